"""The client agent's decisions, without I/O: `ClientCore.handle(event, now) -> effects`.

The agent thread (`agent.py`) feeds it the user threads' commands, what the scheduler and the object
storage server send, and a `Tick` at the end of each turn of its loop; it performs the effects in order:
sends, and the ends of tasks and commands, named by ID (the agent maps the IDs to the futures). Nothing
here touches a socket, a clock, a future, or the process (the pid and hostname of Hello are given).

This module holds the session with the scheduler, one `SESSION` table (client_lifecycles.py): the
handshake (and who answered it: a scheduler, or something else at a wrong address), heartbeats and their
echoes, the scheduler's silence (a Hello or heartbeat unanswered for the timeout: a client whose own thread
stalled, and so sent nothing, never takes the scheduler for lost), the connection (its socket monitor's
changes), disconnecting, `clear` and `shutdown`, and the end of everything when the client stops.

When the connection closes (the scheduler died, restarted, or the network failed), the client waits up to
``reconnect_seconds`` for it to be reachable again, on a new socket: meanwhile its tasks stay pending, new ones
are taken, and nothing goes to the scheduler (it would come before the Hello). Reachable again, it says Hello
again; at the HelloAck it sends again every task and graph that has not ended (`TasksInFlight.resend`): a
scheduler that kept them ignores what it holds, a new one runs them (docs/protocol.md, "Reconnecting"). Past
the wait, everything fails with `DisconnectedError` naming the address, as it does at once with
``reconnect_seconds`` 0. The tasks are `TasksInFlight`'s (tasks_in_flight.py, with
graphs in graph_submissions.py), the objects `StorageRequests`' (storage_requests.py).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from functools import partial
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from scaler.client.client_events import (
    Abort,
    AskInfo,
    AskWorkers,
    Cancel,
    Clear,
    Connect,
    ConnectionChanged,
    ConnectStorage,
    Disconnect,
    Effect,
    Event,
    FromScheduler,
    FromStorage,
    HandshakeFailed,
    Heartbeat,
    InputsEnded,
    MadeIn,
    PutObject,
    Release,
    RenewConnection,
    Reply,
    ReplyError,
    ReportTasks,
    Shutdown,
    Stopped,
    Submit,
    SubmitGraph,
    TaskPrinted,
    TaskRunsArrived,
    Tick,
    ToScheduler,
)
from scaler.client.client_lifecycles import (
    CONNECTION_EVENTS,
    SCHEDULER_ROLES,
    SESSION,
    SessionAction,
    SessionEvent,
    SessionState,
)
from scaler.client.scheduler_asks import SchedulerAsks
from scaler.client.session_stops import COMMAND_REFUSALS, REFUSE_COMMAND, STOP_ERRORS, gone
from scaler.client.storage_requests import StorageRequests
from scaler.client.tasks_in_flight import TasksInFlight
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.messages import (
    ClientHeartbeatEcho,
    ClientShutdownRequest,
    ClientShutdownResponse,
    Counter,
    DisconnectRequest,
    DisconnectResponse,
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectResponse,
    PeerRole,
    Refusal,
    SchedulerInfo,
    TaskCancelConfirm,
    TaskOutputBatch,
    TaskResultBatch,
    WorkerCallAnswer,
)
from scaler.protocol.version import PROTOCOL_VERSION

logger = logging.getLogger(__name__)

TASK_BATCH_SIZE = 1000
ARGUMENT_BYTES_IN_STORAGE = 128 * 1024 * 1024  # large arguments of tasks in flight, per client


class ClientCore:
    def __init__(
        self,
        client_id: bytes,
        scheduler_address: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        pid: int,
        hostname: str,
        batch_size: int = TASK_BATCH_SIZE,
        disconnect_wait_seconds: float = 5.0,
        argument_bytes_in_storage: int = ARGUMENT_BYTES_IN_STORAGE,
        made_in: Tuple[bytes, bytes] = (b"", b""),
        reconnect_seconds: float = 0.0,
    ) -> None:
        self._client_id = client_id
        self._address = scheduler_address
        self._timeout = timeout_seconds
        self._reconnect = reconnect_seconds
        self._heartbeat_interval = heartbeat_interval_seconds
        self._disconnect_wait = disconnect_wait_seconds
        # made_in: for a Client made inside a task, that task's ID and its worker's proof (scaler.protocol.delegation)
        self._hello = Hello(
            PROTOCOL_VERSION, PeerRole.CLIENT, pid, hostname, made_in=made_in[0], made_in_proof=made_in[1],
            reconnect_seconds=reconnect_seconds,
        )  # fmt: skip

        self._resuming_hello = dataclasses.replace(self._hello, resuming=True)  # said after the scheduler was lost
        self._out: List[Effect] = []  # what the event being handled decided
        self._storage = StorageRequests(client_id, self._hello, timeout_seconds, self._out)
        self._tasks = TasksInFlight(
            self._storage, self._out, batch_size, argument_bytes_in_storage, keep_sent=reconnect_seconds > 0
        )
        self._storage.tasks = self._tasks

        self.state = SessionState.IDLE  # of the session with the scheduler (SESSION)
        self.story = 0  # its recent events (`Lifecycle.move`), for the error of a missing transition
        self._error: Optional[Exception] = None  # why the client stopped, when it stopped on an error
        # the scheduler is lost if nothing comes by then: the timeout after the first Hello or heartbeat sent since
        # it was last heard (infinite while nothing is asked of it)
        self._silent_after = math.inf
        self._next_heartbeat = math.inf  # while READY
        self._closing_deadline = math.inf  # while CLOSING
        self._ready_command = 0
        self._hello_lost = False  # the connection dropped while waiting for the HelloAck
        self._withheld = False  # the scheduler is away: nothing goes to it but the Hello (RECONNECTING, RESUMING)
        self._after_rejoin: List[Any] = []  # instructions made while it was away (clear, delete): sent first
        self._away_until = math.inf  # when the wait for it ends
        self._last_refusal = ""  # of a handshake while it was away
        self._disconnect_command = 0
        self._shutdown_commands: Deque[int] = collections.deque()
        self._asks = SchedulerAsks(self._out, scheduler_address)  # scheduler_info, and the calls on every worker
        self._heartbeats_sent = 0
        self._echoes_received = 0
        self._echo_barriers: Deque[Tuple[int, int]] = collections.deque()  # (heartbeats sent, command)
        self._task_streams = 0  # open (task_stream.py): the heartbeats ask for the runs of this client's tasks
        self._watched = False  # a monitor watches (the last echo said): the heartbeats count tasks per function
        self._function_names: Dict[bytes, str] = {}  # function object ID -> module.qualname

        session_actions: Dict[SessionAction, Callable[[Any, float], None]] = {
            SessionAction.SAY_HELLO: self._say_hello,
            SessionAction.JOIN: self._join,
            SessionAction.SAY_GOODBYE: self._say_goodbye,
            SessionAction.ANSWER_DISCONNECT: self._answer_disconnect,
            **{action: self._stop_on(action) for action in STOP_ERRORS},
            SessionAction.STOP_DISCONNECTED: self._stop_disconnected,
            SessionAction.STOP_ABORTED: self._stop_aborted,
            SessionAction.FINISH_DISCONNECT: self._finish_disconnect,
            SessionAction.HELLO_LOST: self._on_hello_lost,
            SessionAction.HELLO_AGAIN: self._hello_again,
            SessionAction.WAIT_FOR_SCHEDULER: self._wait_for_scheduler,
            SessionAction.RENEW_CONNECTION: self._renew_connection,
            SessionAction.HELLO_ON_RETURN: self._hello_on_return,
            SessionAction.REJOIN: self._rejoin,
            SessionAction.STOP_GONE: self._stop_gone,
            SessionAction.LEAVE_AWAY: self._leave_away,
            SessionAction.NOTE_REFUSAL: self._note_refusal,
            # (a command's actions are compiled into each state's dispatch table: `_command_in`)
            **dict.fromkeys(COMMAND_REFUSALS.keys() | {SessionAction.RUN_COMMAND}, _ignore),
        }
        self._session_plans = SESSION.plans(session_actions.__getitem__)

        always: Dict[type, Callable[[Any, float], None]] = {
            Connect: partial(self._session, SessionEvent.CONNECT),
            Release: self._release,
            Cancel: self._cancel,
            Disconnect: partial(self._session, SessionEvent.DISCONNECT),
            Abort: partial(self._session, SessionEvent.ABORT),
            MadeIn: self._made_in,
            FromScheduler: self._on_scheduler,
            FromStorage: self._on_storage,
            HandshakeFailed: self._on_handshake_failed,
            ConnectionChanged: self._on_connection,
            Tick: self._on_tick,
            InputsEnded: self._tasks.inputs.on_ended,  # a task parked for its inputs (task_inputs.py)
        }
        self._commands: Dict[type, Callable[[Any, float], None]] = {
            Submit: self._tasks.submit,
            SubmitGraph: self._tasks.graphs.submit,
            PutObject: self._put,
            Clear: self._clear,
            Shutdown: self._shutdown,
            AskInfo: self._asks.ask_info,
            AskWorkers: self._asks.ask_workers,
            ReportTasks: self._report_tasks,
        }
        # The dispatch table of each session state: what the commands do there is the SESSION table's
        # answer for COMMAND, looked up here once. After the client stopped, commands are answered with
        # the error and the rest is dropped.
        self._handlers_by_state = {
            state: {**always, **{kind: self._command_in(state, run) for kind, run in self._commands.items()}}
            for state in SessionState
        }
        self._handlers_by_state[SessionState.STOPPED] = {
            **{event_type: _ignore for event_type in always},
            **{event_type: self._refuse_stopped for event_type in REFUSE_COMMAND},
            Disconnect: self._answer_disconnect,
        }
        self._handlers = self._handlers_by_state[self.state]
        self._scheduler_handlers: Dict[type, Callable[[Any, float], None]] = {
            HelloAck: self._on_hello_ack,
            Refusal: partial(self._session, SessionEvent.REFUSED),
            ClientHeartbeatEcho: self._on_heartbeat_echo,
            TaskResultBatch: self._tasks.on_results,
            TaskCancelConfirm: self._tasks.on_cancel_confirm,
            TaskOutputBatch: self._on_task_output,
            ClientShutdownResponse: self._on_shutdown_response,
            SchedulerInfo: self._asks.on_info,
            WorkerCallAnswer: self._asks.on_workers_answer,
            DisconnectResponse: partial(self._session, SessionEvent.DISCONNECT_RESPONSE),
            DisconnectRequest: partial(self._session, SessionEvent.SCHEDULER_LEAVING),
        }
        self._storage_handlers: Dict[type, Callable[[Any, Any], None]] = {
            HelloAck: self._storage.on_hello_ack,
            Refusal: self._storage.on_refusal,
            ObjectResponse: self._storage.on_response,
        }

    # --- the one entry point ----------------------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> List[Effect]:
        """What ``event`` makes the client do, in order. Sends that batch (tasks, cancels, storage requests)
        leave with the next `Tick`'s effects."""
        self._handlers[type(event)](event, now)
        out = self._out
        effects = out.copy() if not self._withheld else [effect for effect in out if self._goes_while_away(effect)]
        out.clear()
        return effects

    def _goes_while_away(self, effect: Effect) -> bool:
        """While the scheduler is away, only the Hello goes to it: what else is decided meanwhile (tasks, cancels,
        graphs, heartbeats) would reach it before the Hello; the tasks and graphs go again once it answered, and
        the object instructions (clear, delete) first."""
        kind = type(effect)
        if kind is Heartbeat:
            return False
        if kind is not ToScheduler or effect.message is self._resuming_hello:  # type: ignore[union-attr]
            return True
        if type(effect.message) is ObjectInstruction:  # type: ignore[union-attr]
            self._after_rejoin.append(effect.message)  # type: ignore[union-attr]
        return False

    @property
    def next_wakeup(self) -> float:
        """When the core next wants a `Tick` (monotonic seconds, as ``now``)."""
        return min(self._silent_after, self._next_heartbeat, self._closing_deadline, self._storage.next_deadline)

    @property
    def pending_tasks(self) -> int:
        return self._tasks.count

    # --- the session's table --------------------------------------------------------------------------------

    def _session(self, event: SessionEvent, detail: Any, now: float) -> None:
        plan = SESSION.move(self._session_plans, self, event, self._client_id)
        self._handlers = self._handlers_by_state[plan.next_state]
        for action in plan.actions:
            action(detail, now)

    def _command_in(self, state: SessionState, run: Callable[[Any, float], None]) -> Callable[[Any, float], None]:
        """What a command does in ``state``: run, or be refused, as the SESSION table says."""
        transition = SESSION.get(state, SessionEvent.COMMAND)
        if transition is None:  # before Connect (a bug of the caller), or stopped (replaced after)
            return lambda event, now: self._session(SessionEvent.COMMAND, event, now)  # raises, with the story
        assert transition.next_state is state  # a command never moves the session
        (action,) = transition.actions
        if action is SessionAction.RUN_COMMAND:
            return run
        error = COMMAND_REFUSALS[action]
        return lambda event, now: self._refuse(event, DisconnectedError(error))

    def _refuse(self, event: Any, error: Exception) -> None:
        """A command the client cannot run now: its tasks fail, or its caller gets ``error``."""
        REFUSE_COMMAND[type(event)](event, error, self._out)

    def _refuse_stopped(self, event: Any, now: float) -> None:
        self._refuse(event, self._error or DisconnectedError("the client is disconnected"))

    # --- the session's actions ------------------------------------------------------------------------------

    def _say_hello(self, connect: Connect, now: float) -> None:
        self._ready_command = connect.command_id
        self._silent_after = now + self._timeout
        self._out.append(ToScheduler(self._hello))

    def _on_hello_lost(self, detail: Any, now: float) -> None:
        self._hello_lost = True

    def _hello_again(self, detail: Any, now: float) -> None:
        """The connection is up: if the one the Hello went on dropped, it went with it: say it again (within
        the same deadline)."""
        if self._hello_lost:
            self._hello_lost = False
            self._out.append(ToScheduler(self._hello))

    def _answered(self, message: HelloAck, now: float) -> None:
        """The Hello is answered: heartbeats from now (the next starts the wait), and the scheduler's limits."""
        if message.timeout_seconds > 0:  # be heard well within the scheduler's own patience
            self._heartbeat_interval = min(self._heartbeat_interval, message.timeout_seconds / 3)
        self._next_heartbeat = now + self._heartbeat_interval
        self._silent_after = math.inf
        self._tasks.take_limits(message)

    def _join(self, message: HelloAck, now: float) -> None:
        self._answered(message, now)
        address = message.object_storage_address
        if not address:
            address = default_storage_address(self._address)
            logger.warning(f"Client: scheduler named no object storage server; using {address}")
        self._out.append(ConnectStorage(address))
        self._storage.hello(address)
        self._out.append(Reply(self._ready_command, message))
        self._ready_command = 0

    def _wait_for_scheduler(self, detail: Any, now: float) -> None:
        """The connection closed: wait for the scheduler (bounded: SILENT), its tasks pending, sending it nothing.
        The commands that waited for its answer end: a clear or a task report is done as far as this client goes."""
        self._withheld = True
        self._away_until = self._silent_after = now + self._reconnect
        self._next_heartbeat = math.inf
        self._answer_waiting_commands()
        if self._reconnect > 0:
            logger.warning(
                f"Client: lost the connection to the scheduler at {self._address}; waiting up to "
                f"{self._reconnect:g}s for it to come back (reconnect_seconds), {self._tasks.count} task(s) pending"
            )

    def _answer_waiting_commands(self) -> None:
        """A shutdown fails (no answer will come); the commands that wait for a heartbeat's echo are done."""
        out = self._out
        error = DisconnectedError(f"lost the connection to the scheduler at {self._address} before it answered")
        out.extend(ReplyError(command_id, error) for command_id in self._shutdown_commands if command_id)
        out.extend(Reply(command_id, None) for _, command_id in self._echo_barriers if command_id)
        self._shutdown_commands.clear()
        self._echo_barriers.clear()
        self._heartbeats_sent = self._echoes_received = 0

    def _hello_on_return(self, detail: Any, now: float) -> None:
        """Reachable again: Hello again, answered within the wait, or within the timeout if that is later."""
        self._silent_after = max(self._away_until, now + self._timeout)
        self._out.append(ToScheduler(self._resuming_hello))

    def _rejoin(self, message: HelloAck, now: float) -> None:
        """The scheduler answered again: what may not have reached it, or what it may have lost (it restarted),
        goes again; it ignores what it holds. Then the heartbeats, whose first says the resending is over."""
        self._withheld = False
        self._away_until = math.inf
        self._last_refusal = ""
        out = self._out
        out.extend(ToScheduler(instruction) for instruction in self._after_rejoin)
        self._after_rejoin = []
        # the commands made while it was away: a shutdown was not sent; the others end with the next echo
        error = DisconnectedError(f"the scheduler at {self._address} was away: the shutdown request was not sent")
        out.extend(ReplyError(command_id, error) for command_id in self._shutdown_commands if command_id)
        self._shutdown_commands.clear()
        self._heartbeats_sent = self._echoes_received = 0
        self._echo_barriers = collections.deque((1, command_id) for _, command_id in self._echo_barriers)
        self._answered(message, now)
        tasks, graphs = self._tasks.resend()
        logger.info(
            f"Client: the scheduler at {self._address} answered again; sent again {tasks} task(s) and {graphs} "
            "graph(s) not done"
        )

    def _leave_away(self, disconnect: Disconnect, now: float) -> None:
        self._disconnect_command = disconnect.command_id
        self._finish_disconnect(disconnect, now)

    def _made_in(self, made_in: MadeIn, now: float) -> None:
        """The Hello said again names the task a Client of this connection was made in last (still running)."""
        if self._hello.made_in:
            hello = self._resuming_hello
            hello.made_in, hello.made_in_proof = made_in.task_id, made_in.proof

    def _note_refusal(self, refusal: HandshakeFailed, now: float) -> None:
        self._last_refusal = refusal.reason

    def _say_goodbye(self, disconnect: Disconnect, now: float) -> None:
        """Send DisconnectRequest and wait (bounded) for DisconnectResponse; then fail what is left."""
        self._disconnect_command = disconnect.command_id
        self._out.append(ToScheduler(DisconnectRequest(reason="client disconnects")))
        self._next_heartbeat = math.inf
        self._closing_deadline = now + self._disconnect_wait

    def _answer_disconnect(self, disconnect: Disconnect, now: float) -> None:
        self._out.append(Reply(disconnect.command_id, None))

    def _finish_disconnect(self, detail: Any, now: float) -> None:
        """The client left: what is left ends, without that counting as why the client stopped."""
        self._stop(DisconnectedError("the client disconnected before the task finished"), cause=False)

    def _stop_on(self, action: SessionAction) -> Callable[[Any, float], None]:
        """The action that stops the client with the error `session_stops.STOP_ERRORS` makes for ``action``."""
        error_of = STOP_ERRORS[action]
        return lambda detail, now: self._stop(error_of(self._address, self._timeout, detail))

    def _stop_aborted(self, abort: Abort, now: float) -> None:
        self._stop(abort.error)

    def _stop_gone(self, detail: Any, now: float) -> None:
        self._stop(gone(self._address, self._reconnect, self._last_refusal))

    def _renew_connection(self, detail: Any, now: float) -> None:
        self._out.append(RenewConnection())

    def _stop_disconnected(self, disconnect: Disconnect, now: float) -> None:
        """A disconnect before the scheduler answered the Hello: done at once."""
        self._disconnect_command = disconnect.command_id
        self._stop(DisconnectedError("the client disconnected before the scheduler answered"))

    def _stop(self, error: Exception, cause: bool = True) -> None:
        """Every task and every command still waiting ends with ``error``; the client stops."""
        if cause:
            self._error = error
        self._tasks.stop(error)
        self._storage.stop(error)
        out = self._out
        waiting = [self._ready_command, *self._shutdown_commands, *self._asks.stop()]
        waiting += [command for _, command in self._echo_barriers]
        out.extend(ReplyError(command_id, error) for command_id in waiting if command_id)
        if self._disconnect_command:
            out.append(Reply(self._disconnect_command, None))
        self._ready_command = self._disconnect_command = 0
        self._shutdown_commands.clear()
        self._echo_barriers.clear()
        self._silent_after = self._next_heartbeat = self._closing_deadline = math.inf
        self._withheld = False
        self._after_rejoin = []
        out.append(Stopped(self._error))

    # --- commands that need the scheduler -------------------------------------------------------------------

    def _clear(self, clear: Clear, now: float) -> None:
        """Cancel every task of this client and delete its objects; reply once the scheduler has seen it."""
        self._out.append(ToScheduler(ObjectInstruction(kind=ObjectInstructionKind.CLEAR, owner_id=self._client_id)))
        self._tasks.clear()
        self._storage.clear()
        # A heartbeat after the instruction: its echo tells that the scheduler has handled the clear.
        self._heartbeat(now)
        self._echo_barriers.append((self._heartbeats_sent, clear.command_id))

    def _report_tasks(self, report: ReportTasks, now: float) -> None:
        """A task stream opens or closes, or asks for the runs so far: a heartbeat now; its echo replies."""
        self._task_streams = max(0, self._task_streams + report.change)
        self._heartbeat(now)
        self._echo_barriers.append((self._heartbeats_sent, report.command_id))

    def _put(self, put: PutObject, now: float) -> None:
        if put.function_name:
            self._function_names[put.object_id] = put.function_name
        self._storage.put_for_command(put.object_id, put.data, put.command_id)

    def _cancel(self, cancel: Cancel, now: float) -> None:
        self._tasks.cancel(cancel.task_ids)

    def _release(self, release: Release, now: float) -> None:
        for object_id in release.object_ids:
            self._function_names.pop(object_id, None)
        self._storage.release(release.object_ids, now)

    def _shutdown(self, shutdown: Shutdown, now: float) -> None:
        self._out.append(ToScheduler(ClientShutdownRequest()))
        self._shutdown_commands.append(shutdown.command_id)

    # --- messages and time ------------------------------------------------------------------------------------

    def _on_scheduler(self, event: FromScheduler, now: float) -> None:
        # heard: while heartbeats go (ready), the next one starts the wait; before (the Hello), it starts now
        self._silent_after = math.inf if self._next_heartbeat < math.inf else now + self._timeout
        message = event.message
        handler = self._scheduler_handlers.get(type(message))
        if handler is None:
            logger.warning(f"Client: dropped unexpected {type(message).__name__} from scheduler {self._address}")
            return
        handler(message, now)

    def _on_storage(self, event: FromStorage, now: float) -> None:
        message = event.message
        handler = self._storage_handlers.get(type(message))
        if handler is None:
            logger.warning(
                f"Client: dropped unexpected {type(message).__name__} from object storage {self._storage.address}"
            )
            return
        handler(message, event.blobs)

    def _on_handshake_failed(self, event: HandshakeFailed, now: float) -> None:
        """A refusal in the transport's handshake counts as a `Refusal` from that peer (it has a reason too)."""
        if event.from_storage:
            self._storage.on_refusal(event, ())
        else:
            self._session(SessionEvent.KEYS_REFUSED, event, now)

    def _on_hello_ack(self, message: HelloAck, now: float) -> None:
        """A HelloAck says who answered (protocol 1.5): a storage server's port given by mistake says so."""
        event = SessionEvent.HELLO_ACK if message.role in SCHEDULER_ROLES else SessionEvent.WRONG_PEER
        self._session(event, message, now)

    def _on_connection(self, event: ConnectionChanged, now: float) -> None:
        if event.to_storage:
            self._storage.on_connection(event.change)
        else:
            self._session(CONNECTION_EVENTS[event.change], None, now)

    def _on_heartbeat_echo(self, message: ClientHeartbeatEcho, now: float) -> None:
        self._watched = message.record_tasks
        if message.task_runs.task_ids:
            self._out.append(TaskRunsArrived(message.task_runs))
        self._echoes_received += 1
        barriers = self._echo_barriers
        while barriers and barriers[0][0] <= self._echoes_received:
            _, command_id = barriers.popleft()
            if command_id:
                self._out.append(Reply(command_id, None))

    def _on_shutdown_response(self, message: ClientShutdownResponse, now: float) -> None:
        if not self._shutdown_commands:
            logger.warning(f"Client: dropped unexpected ClientShutdownResponse from scheduler {self._address}")
            return
        command_id = self._shutdown_commands.popleft()
        if command_id:
            self._out.append(Reply(command_id, (message.accepted, message.reason)))

    def _on_task_output(self, message: TaskOutputBatch, now: float) -> None:
        self._out.append(TaskPrinted(message.outputs))

    def _on_tick(self, tick: Tick, now: float) -> None:
        """The deadlines that passed, then the batches of the turn."""
        if now >= self._silent_after:
            self._session(SessionEvent.SILENT, None, now)
            return
        if now >= self._closing_deadline:
            logger.debug(f"Client: no DisconnectResponse from {self._address}; closing anyway")
            self._session(SessionEvent.CLOSING_EXPIRED, None, now)
            return
        if now >= self._next_heartbeat:
            self._heartbeat(now)
        storage = self._storage
        if storage.next_deadline <= now:
            storage.expire(now)
        if storage.released:
            storage.delete_released(now, self._tasks.function_users)
        storage.flush(now)
        self._tasks.flush()

    def _heartbeat(self, now: float) -> None:
        if self._silent_after == math.inf:  # the first unanswered since the scheduler was last heard
            self._silent_after = now + self._timeout
        functions: Dict[str, int] = {}
        if self._watched:
            for function_id, count in self._tasks.function_users.items():
                name = self._function_names.get(function_id, "")
                functions[name] = functions.get(name, 0) + count
        counts = [Counter(name, count) for name, count in functions.items()]
        self._out.append(Heartbeat(self._tasks.count, self._task_streams > 0, counts))
        self._heartbeats_sent += 1
        self._next_heartbeat = now + self._heartbeat_interval


def _ignore(*args: Any) -> None:
    pass
