"""Why a client's session with its scheduler ended: the error each of the SESSION table's ``STOP_*`` actions
(client_lifecycles.py) ends the client's tasks and commands with, made from the scheduler's address, the
client's timeout and what the event carried (a Refusal, a DisconnectRequest, a HelloAck or None); and what a
command the session cannot run gets (`REFUSE_COMMAND`: its tasks fail, or its caller gets the error)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from scaler.client.client_events import (
    AskInfo,
    AskWorkers,
    Clear,
    Connect,
    PutObject,
    ReplyError,
    ReportTasks,
    Shutdown,
    Submit,
    SubmitGraph,
    TaskFailed,
)
from scaler.client.client_lifecycles import SessionAction
from scaler.protocol.connection_events import closed_in_handshake, role_name
from scaler.protocol.errors import DisconnectedError, ProtocolError


def _refused(address: str, timeout: float, refusal: Any) -> Exception:
    return ProtocolError(f"scheduler at {address} refused the client: {refusal.reason}")


def _expelled(address: str, timeout: float, refusal: Any) -> Exception:
    return DisconnectedError(f"scheduler at {address} refused the client: {refusal.reason}")


def _unanswered(address: str, timeout: float, detail: Any) -> Exception:
    return DisconnectedError(f"no scheduler answered at {address} within {timeout:g}s")


def _lost(address: str, timeout: float, detail: Any) -> Exception:
    return DisconnectedError(f"the scheduler at {address} sent nothing for {timeout:g}s: lost it")


def _left(address: str, timeout: float, request: Any) -> Exception:
    reason = f": {request.reason}" if request.reason else ""
    return DisconnectedError(f"the scheduler at {address} closed the connection{reason}")


def _not_a_scheduler(address: str, timeout: float, ack: Any) -> Exception:
    if ack is None:
        return DisconnectedError(closed_in_handshake(address, "a scheduler"))
    return DisconnectedError(f"{address} is {role_name(ack.role)}, not a scheduler")


def gone(address: str, reconnect_seconds: float, last_refusal: str) -> Exception:
    """The connection closed and the scheduler did not come back within the wait (STOP_GONE)."""
    lost = f"lost the connection to the scheduler at {address}"
    if reconnect_seconds <= 0:
        return DisconnectedError(lost)
    refused = f" (its last handshake: {last_refusal})" if last_refusal else ""
    return DisconnectedError(f"{lost}, which did not come back within {reconnect_seconds:g}s{refused}")


STOP_ERRORS: Dict[SessionAction, Callable[[str, float, Any], Exception]] = {
    SessionAction.STOP_REFUSED: _refused,
    SessionAction.STOP_EXPELLED: _expelled,
    SessionAction.STOP_UNANSWERED: _unanswered,
    SessionAction.STOP_LOST: _lost,
    SessionAction.STOP_LEFT: _left,
    SessionAction.STOP_NOT_A_SCHEDULER: _not_a_scheduler,
}


# why a command is refused, by the action the SESSION table answers COMMAND with
COMMAND_REFUSALS = {
    SessionAction.REFUSE_COMMAND_EARLY: "the client is not connected yet",
    SessionAction.REFUSE_COMMAND: "the client is disconnected",
}


def _fail_tasks(submit: Submit, error: Exception, out: List[Any]) -> None:
    out.extend(TaskFailed(task.task_id, error) for task in submit.tasks)


def _fail_targets(submit: SubmitGraph, error: Exception, out: List[Any]) -> None:
    out.extend(TaskFailed(target, error) for target in submit.targets)


def _reply_error(command: Any, error: Exception, out: List[Any]) -> None:
    if command.command_id:
        out.append(ReplyError(command.command_id, error))


# what a command refused gets, by its type: (command, error, the core's effects)
REFUSE_COMMAND: Dict[type, Callable[[Any, Exception, List[Any]], None]] = {
    Submit: _fail_tasks,
    SubmitGraph: _fail_targets,
    **{command: _reply_error for command in (PutObject, Clear, Shutdown, AskInfo, AskWorkers, ReportTasks, Connect)},
}
