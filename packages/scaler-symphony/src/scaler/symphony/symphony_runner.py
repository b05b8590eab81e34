"""The Symphony runner (`scaler.worker.task_runner.TaskRunner`), without I/O: which tasks go to Symphony, when.

The worker core keeps the queue and fetches what each task needs; this runner takes ready tasks and hands
each to its host (`symphony_host.SymphonyHost`: `SubmitTask`), which sends it to Symphony as one task of the
worker's session and reports back what happens (`Submitted`, `TaskOutput`, `TaskFailed`, `TaskAborted`,
`SessionOpened`, `SessionLost`). Each task's life here is one table (`symphony_lifecycle`).

Base concurrency: at most N tasks in Symphony at once, except nested tasks. A task is **nested** when the
client that submitted it was made inside a task that this worker has in Symphony now, in its current session
(the Scaler service marks the clients made while it runs a task: `scaler.protocol.ids.clients_made_in`, with
`task_payload.task_origin`). Nested tasks never count against the limit and never wait for room under it:
once the limit is reached, the runner still takes, in queue order, every queued task that is nested, so a
task waiting in Symphony for its children never starves them, at any depth and at any N. A task the runner
submitted keeps its place under the limit until it is out of Symphony, also when the worker ended it early
(a cancel or a timeout aborts it in Symphony; its place is free once Symphony confirms).

A session that dies (its callback's ``on_exception``): the tasks that were in Symphony are reported died with
its reason (the scheduler runs them again, up to its limit of deaths per task, or fails them naming it); the
tasks still on their way are returned to the queue; the runner asks for a new session and submits nothing
until it is open. A session that cannot be opened stops the worker (`Broken`, from the host).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from scaler.protocol import messages as m
from scaler.symphony.symphony_lifecycle import SYMPHONY_TASK_LIFECYCLE, SymphonyAction, SymphonyEvent, SymphonyState
from scaler.symphony.task_payload import parent_task
from scaler.worker.task_runner import ReadyTask, RunnerOwner

logger = logging.getLogger(__name__)

_TABLE = SYMPHONY_TASK_LIFECYCLE.table
_TERMINAL = SYMPHONY_TASK_LIFECYCLE.terminal
_HISTORY_LENGTH = 8
_CLIENTS_REMEMBERED = 10_000  # clients whose origin is kept parsed (the dict is emptied when it grows past this)
_NOT_PARSED = "\0"

# ----------------------------------------------------------------------------- effects (to the host)


@dataclass(slots=True)
class OpenSession:
    """Connect to the application if not connected, and open a session (answered `SessionOpened`)."""


@dataclass(slots=True)
class SubmitTask:
    serial: int  # names this submission in what the host reports
    session_id: str  # the session it is for: the host drops it if that session is gone
    ready: ReadyTask


@dataclass(slots=True)
class AbortTask:
    serial: int


# ----------------------------------------------------------------------------- messages (from the host)


@dataclass(slots=True)
class SessionOpened:
    session_id: str


@dataclass(slots=True)
class SessionLost:
    session_id: str
    reason: str


@dataclass(slots=True)
class Submitted:
    serial: int
    symphony_task_id: str


@dataclass(slots=True)
class TaskOutput:
    """The task's result, read from its service's output (or its failure to be submitted: its own problem)."""

    serial: int
    status: int
    payload: Any
    error_text: str
    function: str
    seconds: float


@dataclass(slots=True)
class TaskFailed:
    """Symphony failed the task, or did not take it."""

    serial: int
    reason: str


@dataclass(slots=True)
class TaskAborted:
    serial: int


# ----------------------------------------------------------------------------- the runner


class _Taken:
    """A task the runner took, for one submission."""

    __slots__ = ("task_id", "serial", "nested", "state", "symphony_task_id", "history")

    def __init__(self, task_id: bytes, serial: int, nested: bool) -> None:
        self.task_id = task_id
        self.serial = serial
        self.nested = nested
        self.state = SymphonyState.SUBMITTING
        self.symphony_task_id = ""
        self.history: List[SymphonyEvent] = []


class SymphonyRunner:
    def __init__(self, base_concurrency: int) -> None:
        if base_concurrency < 1:
            raise ValueError(f"base concurrency must be at least 1, not {base_concurrency}")
        self._limit = base_concurrency
        self._counted = 0  # tasks in Symphony that are not nested
        self._session_id: Optional[str] = None
        self._serials = itertools.count(1)
        self._by_serial: Dict[int, _Taken] = {}
        self._by_task: Dict[bytes, _Taken] = {}  # the tasks the core sees running (not the aborting ones)
        self._parents: Dict[str, bytes] = {}  # Symphony task ID -> task ID, of the tasks in Symphony now
        self._origins: Dict[bytes, Optional[str]] = {}  # client ID -> Symphony task ID it was made in (this session)
        self._returning: List[bytes] = []
        self._message_handlers: Dict[type, Callable[[RunnerOwner, Any, List[Any]], None]] = {
            SessionOpened: self._on_session_opened,
            SessionLost: self._on_session_lost,
            Submitted: self._on_submitted,
            TaskOutput: self._on_output,
            TaskFailed: self._on_failed,
            TaskAborted: self._on_aborted,
        }
        A = SymphonyAction
        self._actions: Dict[SymphonyAction, Callable[[_Taken, RunnerOwner, Any], None]] = {
            A.REMEMBER_ID: self._remember_id,
            A.REPORT_FINISHED: self._report_finished,
            A.REPORT_DIED: self._report_died,
            A.REPORT_RETURNED: self._report_returned,
            A.SEND_ABORT: self._send_abort,
            A.RELEASE: self._release,
        }

    # ------------------------------------------------------------------------- TaskRunner

    def start(self, out: List[Any]) -> None:
        out.append(OpenSession())

    def fill(self, owner: RunnerOwner, out: List[Any]) -> None:
        """While there is room under the base concurrency, the next task; after that, nested tasks only."""
        session_id = self._session_id
        if session_id is None:
            return
        while True:
            if self._counted < self._limit:
                ready = owner.next_ready(False)
            elif self._parents:
                ready = owner.next_ready(False, self._is_nested)
            else:
                return
            if ready is None:
                return
            task_id = ready.task.task_id
            taken = _Taken(task_id, next(self._serials), self._is_nested(ready.task))
            if not taken.nested:
                self._counted += 1
            self._by_serial[taken.serial] = taken
            self._by_task[task_id] = taken
            owner.started(task_id)
            out.append(SubmitTask(taken.serial, session_id, ready))

    def cancel(self, owner: RunnerOwner, task_ids: Sequence[bytes], out: List[Any]) -> None:
        for task_id in task_ids:
            taken = self._by_task.get(task_id)
            if taken is not None:
                self._step(taken, SymphonyEvent.CANCEL, owner, out, "cancelled")

    def take_back(self, owner: RunnerOwner, count: int, out: List[Any]) -> None:
        """Nothing to give back: every task it took is Symphony's (`unstarted` is 0)."""

    def abort(self, owner: RunnerOwner, task_id: bytes, why: str, out: List[Any]) -> None:
        taken = self._by_task.get(task_id)
        if taken is not None:
            self._step(taken, SymphonyEvent.CANCEL, owner, out, f"aborted in Symphony: {why}")

    def on_message(self, owner: RunnerOwner, message: Any, out: List[Any]) -> None:
        self._message_handlers[type(message)](owner, message, out)

    def restart(self, owner: RunnerOwner, why: str, out: List[Any]) -> None:
        """Nothing to replace here: each task runs in Symphony's own service processes."""

    def refresh(self, out: List[Any]) -> None:
        """Uploaded files stay on this host: Symphony's compute hosts do not see them (docs/symphony.md)."""

    def holds_function(self, function_id: bytes) -> bool:
        return False

    def holds_serializer(self, serializer_id: bytes) -> bool:
        return False

    def holds_objects(self, object_ids: Sequence[bytes]) -> bool:
        return False

    @property
    def newest_first(self) -> bool:
        return False

    @property
    def unstarted(self) -> int:
        return 0

    @property
    def running(self) -> int:
        return len(self._by_task)

    @property
    def suspended(self) -> int:
        return 0  # a task that waits in Symphony cannot be seen waiting from here

    @property
    def memory_kills(self) -> int:
        return 0  # its tasks run under Symphony's limits, not the worker's

    def take_memory_kills(self) -> List[m.MemoryKill]:
        return []

    # ------------------------------------------------------------------------- observation

    @property
    def session_id(self) -> Optional[str]:
        return self._session_id

    @property
    def counted(self) -> int:
        """Tasks in Symphony under the base concurrency (not nested), aborting ones included."""
        return self._counted

    def state_of(self, task_id: bytes) -> Optional[SymphonyState]:
        taken = self._by_task.get(task_id)
        return taken.state if taken is not None else None

    # ------------------------------------------------------------------------- nested tasks

    def _is_nested(self, task: m.Task) -> bool:
        origins = self._origins
        parent = origins.get(task.client_id, _NOT_PARSED)
        if parent is _NOT_PARSED:
            origin = parent_task(task.client_id)
            parent = origin[1] if origin is not None and origin[0] == self._session_id else None
            if len(origins) >= _CLIENTS_REMEMBERED:
                origins.clear()
            origins[task.client_id] = parent
        return parent is not None and parent in self._parents

    # ------------------------------------------------------------------------- the host's messages

    def _on_session_opened(self, owner: RunnerOwner, opened: SessionOpened, out: List[Any]) -> None:
        logger.info(f"Symphony: session {opened.session_id} open")
        self._session_id = opened.session_id
        self._origins.clear()

    def _on_session_lost(self, owner: RunnerOwner, lost: SessionLost, out: List[Any]) -> None:
        if lost.session_id != self._session_id:
            return  # an earlier session's last word
        logger.warning(f"Symphony: session {lost.session_id} ended ({lost.reason}); opening a new one")
        self._session_id = None
        reason = f"its Symphony session {lost.session_id} ended: {lost.reason}"
        for taken in list(self._by_serial.values()):
            self._step(taken, SymphonyEvent.SESSION_LOST, owner, out, reason)
        if self._returning:
            returning, self._returning = self._returning, []
            owner.returned(returning)
        out.append(OpenSession())

    def _on_submitted(self, owner: RunnerOwner, submitted: Submitted, out: List[Any]) -> None:
        self._event(submitted.serial, SymphonyEvent.SUBMITTED, owner, out, submitted.symphony_task_id)

    def _on_output(self, owner: RunnerOwner, output: TaskOutput, out: List[Any]) -> None:
        self._event(output.serial, SymphonyEvent.OUTPUT, owner, out, output)

    def _on_failed(self, owner: RunnerOwner, failed: TaskFailed, out: List[Any]) -> None:
        self._event(failed.serial, SymphonyEvent.FAILED, owner, out, failed.reason)

    def _on_aborted(self, owner: RunnerOwner, aborted: TaskAborted, out: List[Any]) -> None:
        self._event(aborted.serial, SymphonyEvent.ABORTED, owner, out, None)

    def _event(self, serial: int, event: SymphonyEvent, owner: RunnerOwner, out: List[Any], detail: Any) -> None:
        taken = self._by_serial.get(serial)
        if taken is None:  # a submission that is over (its session died, it was returned)
            logger.debug(f"Symphony: dropped {event.value} of submission {serial}: not in Symphony any more")
            return
        self._step(taken, event, owner, out, detail)

    # ------------------------------------------------------------------------- transitions and actions

    def _step(self, taken: _Taken, event: SymphonyEvent, owner: RunnerOwner, out: List[Any], detail: Any) -> None:
        transition = _TABLE.get((taken.state, event))
        history = taken.history
        if transition is None:
            logger.warning(
                f"Symphony: dropped {event.value} of task {taken.task_id.hex()}: no transition from "
                f"{taken.state.value}; recent events: {' -> '.join(e.value for e in history) or '(none)'}"
            )
            return
        history.append(event)
        if len(history) > _HISTORY_LENGTH:
            del history[0]
        taken.state = transition.next_state
        for action in transition.actions:
            self._actions[action](taken, owner, (out, detail))

    def _remember_id(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        taken.symphony_task_id = detail[1]
        self._parents[taken.symphony_task_id] = taken.task_id

    def _report_finished(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        output: TaskOutput = detail[1]
        self._forget_task(taken)
        owner.finished(
            taken.task_id, output.status, output.payload, output.error_text, None, output.function, output.seconds
        )

    def _report_died(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        self._forget_task(taken)
        owner.died(taken.task_id, detail[1])

    def _report_returned(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        self._forget_task(taken)
        self._returning.append(taken.task_id)

    def _send_abort(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        self._parents.pop(taken.symphony_task_id, None)  # what it submitted is not nested any more
        detail[0].append(AbortTask(taken.serial))

    def _release(self, taken: _Taken, owner: RunnerOwner, detail: Any) -> None:
        del self._by_serial[taken.serial]
        if taken.symphony_task_id and self._parents.get(taken.symphony_task_id) == taken.task_id:
            del self._parents[taken.symphony_task_id]
        if not taken.nested:
            self._counted -= 1

    def _forget_task(self, taken: _Taken) -> None:
        if self._by_task.get(taken.task_id) is taken:
            del self._by_task[taken.task_id]
