"""The client core's tasks in flight, each following the `TASK` table of client_lifecycles.py.

Ordering rules it keeps:

- a task is sent only after every object it needs (function, serializer, large arguments) has been
  acknowledged by the object storage server;
- the large arguments of this client's tasks take at most ``argument_bytes_in_storage`` of the storage
  server's memory at a time (one task's, whatever their size, when no other task holds any): the tasks
  beyond wait here (`HELD`), in submission order, holding their arguments where the user's data lies, until
  tasks end and their argument objects are deleted. So a burst of large arguments does not make the
  storage server hold them all (the memory it reuses is far cheaper than fresh memory), and no put is ever
  refused for a burst alone;
- at most the scheduler's quota of tasks (``task_quota``, its HelloAck's ``clientQuota``) are on their way
  or at the scheduler at once (graphs aside): the tasks beyond wait here (`HELD`) likewise, and leave as
  tasks end, so a map larger than the quota runs whole and the scheduler never refuses one of its tasks;
- tasks that become ready in one turn of the agent's loop leave in one TaskBatch (split every
  ``batch_size`` tasks, and so that no message is larger than the scheduler takes: `max_message_size`, from
  its HelloAck); a task that alone is larger fails, unsent;
- a result whose payload is in object storage is read (then deleted there) before the task ends; a task's
  temporary argument objects are deleted once it ends;
- a task that takes other tasks' results (futures as arguments, ``kind task``: `task_inputs.py`) keeps its
  message until it ends; the result object of an input stays in storage until its dependents ended.

The scheduler owns retries and re-dispatch; the client sends a task again only when the scheduler answers
again after its connection was lost (`resend`): a client that resumes (``keep_sent``) keeps each task's message
until the task ends.
"""

from __future__ import annotations

import collections
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from scaler.client.client_events import (
    CancelRefused,
    Effect,
    Submit,
    TaskCancelled,
    TaskFailed,
    TaskResults,
    ToScheduler,
)
from scaler.client.client_lifecycles import TASK, TaskAction, TaskEvent, TaskState
from scaler.client.graph_submissions import GraphSubmissions
from scaler.client.storage_requests import PUTTING, StorageRequests
from scaler.client.task_inputs import TaskInputs
from scaler.protocol import object_frames
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import show
from scaler.protocol.message_limits import batches, message_budget, task_size, too_large_for
from scaler.protocol.messages import (
    HelloAck,
    PayloadKind,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
)
from scaler.protocol.version import TASK_INPUTS_VERSION, knows

logger = logging.getLogger(__name__)

_SEND, _RESULT, _PARK = TaskEvent.SEND, TaskEvent.RESULT, TaskEvent.PARK  # the events of the hot path, looked up once
_INPUTS_GONE = TaskStatus.INPUTS_GONE
_CANCEL_BYTES = 32  # a task ID in a TaskCancel, at most


@dataclass(slots=True)
class _TaskRecord:
    """What the core keeps of a task in flight (one per pending future: keep it small).

    The `Task` message is kept until it is sent, or, by a client that resumes with a scheduler that came back
    (``reconnect_seconds``), until it ends, to send it again; and what its end needs: the function whose use
    count drops, the temporary objects to delete, the room its large arguments take in storage.
    """

    task: Optional[Task]  # the message (None once sent, unless kept to send again; for a graph's target)
    function_id: bytes  # b"" for a graph's target: its graph counts the uses of its functions
    state: TaskState = TaskState.NEW
    story: int = 0  # its last events (`Lifecycle.move`): told when a transition is illegal
    temporary_objects: Sequence[bytes] = ()  # its large arguments' objects, deleted once it ends
    argument_bytes: int = 0  # of its large arguments in storage
    admitted: bool = False  # it counts against the quota of tasks at the scheduler (it left NEW or HELD)
    missing: int = 0  # objects it waits for
    fetching: Optional[TaskResult] = None  # its result, while the payload is read from storage
    inputs: Optional[Any] = None  # the futures whose results it takes (task_inputs.Inputs)


class TasksInFlight:
    def __init__(
        self, storage: StorageRequests, out: List[Effect], batch_size: int, argument_bytes_in_storage: int,
        keep_sent: bool = False,
    ) -> None:  # fmt: skip
        self._storage = storage
        self._keep_sent = keep_sent  # a sent task keeps its message, to send it again
        self._out = out
        self._batch_size = batch_size
        self._tasks: Dict[bytes, _TaskRecord] = {}
        self._waiting: Dict[bytes, List[bytes]] = {}  # object ID -> tasks waiting for its put acknowledgement
        self.function_users: Dict[bytes, int] = {}  # function object ID -> tasks in flight naming it
        self._argument_bytes_limit = argument_bytes_in_storage
        self._argument_bytes = 0  # of the large arguments put for tasks in flight, not deleted yet
        self._held: Deque[Tuple[bytes, Sequence[Tuple[bytes, Any]], int]] = collections.deque()  # (ID, puts, bytes)
        self._out_tasks: List[Task] = []
        self._out_cancels: List[bytes] = []
        self.max_message_size = 0  # the scheduler's (HelloAck, 1.8); 0: it states none
        self.message_budget = message_budget(0)
        self.task_quota = 0  # the tasks it may have at the scheduler (HelloAck, 1.8); 0: no quota stated
        self._admitted = 0  # tasks that count against it
        self.graphs = GraphSubmissions(self, storage, out)
        self.inputs = TaskInputs(self, storage, out)
        carry_out: Dict[TaskAction, Callable[[bytes, Any, Any], None]] = {
            TaskAction.HOLD: self._hold,
            TaskAction.SEND: self._send,
            TaskAction.SEND_AGAIN: self._send_again,
            TaskAction.SEND_CANCEL: self._send_cancel,
            TaskAction.FETCH: self._fetch,
            TaskAction.DROP_RESULT: self._drop_result,
            TaskAction.END: self._end,
            TaskAction.FORGET: self._forget,
            TaskAction.GIVE_RESULT: self._give_result,
            TaskAction.GIVE_ERROR: self._give_error,
            TaskAction.GIVE_CANCELLED: self._give_cancelled,
            TaskAction.TELL_CANCEL_REFUSED: self._tell_cancel_refused,
            TaskAction.RESOLVE_INPUTS: self.inputs.resolve,
        }
        self._plans = TASK.plans(carry_out.__getitem__)  # the table with the actions bound to this object

    @property
    def keeps_sent(self) -> bool:
        return self._keep_sent

    @property
    def count(self) -> int:
        return len(self._tasks)

    def record(self, task_id: bytes) -> Optional[_TaskRecord]:
        return self._tasks.get(task_id)

    def step(self, task_id: bytes, record: _TaskRecord, event: TaskEvent, value: Any = None) -> None:
        """Move the task on ``event`` and carry out the table's actions (``value``: the result or the error)."""
        # (a pair missing from the table is a bug: it raises, naming the task's recent events)
        for action in TASK.move(self._plans, record, event, task_id).actions:
            action(task_id, record, value)

    # --- commands ------------------------------------------------------------------------------------------------

    def submit(self, event: Submit, now: float) -> None:
        tasks, users, objects, step, send = self._tasks, self.function_users, self._storage.objects, self.step, _SEND
        all_puts, quota = event.puts, self.task_quota or math.inf
        inputs = getattr(all_puts, "inputs", None)  # task ID -> the futures whose results it takes
        for task in event.tasks:
            task_id, function_id = task.task_id, task.function_id
            record = _TaskRecord(task, function_id)
            tasks[task_id] = record
            users[function_id] = users.get(function_id, 0) + 1
            puts = all_puts.get(task_id) if all_puts else None
            if inputs is not None and task_id in inputs and not self.inputs.added(task, record, inputs[task_id], puts):
                step(task_id, record, TaskEvent.PARK)  # the scheduler will not hold it: its inputs end here first
                continue
            # nothing is being put and no put failed (its objects are stored), and there is room at the scheduler
            if puts is None and not objects and self._admitted < quota:
                record.admitted = True
                self._admitted += 1
                step(task_id, record, send)
            else:
                self._admit(task_id, record, puts)

    def add_target(self, task_id: bytes) -> _TaskRecord:
        """A graph's target: a task whose message travels in its graph."""
        record = self._tasks[task_id] = _TaskRecord(None, b"")
        return record

    def cancel(self, task_ids: Sequence[bytes]) -> None:
        tasks = self._tasks
        for task_id in task_ids:
            record = tasks.get(task_id)
            if record is not None:
                self.step(task_id, record, TaskEvent.CANCEL)

    def clear(self) -> None:
        """Client.clear: every task ends cancelled; scheduler and storage forget this client's tasks and objects."""
        self._held.clear()  # first: no held task may start while the others end
        for task_id, record in list(self._tasks.items()):
            self.step(task_id, record, TaskEvent.CLEAR)
        self._forget_all()

    def stop(self, error: Exception) -> None:
        """The client stopped: every task ends with ``error``."""
        self._held.clear()
        for task_id, record in list(self._tasks.items()):
            self.step(task_id, record, TaskEvent.STOP, error)
        self._forget_all()

    def resend(self) -> Tuple[int, int]:
        """The scheduler answered again after the connection was lost: every task it may hold goes again, in
        submission order, and every graph (`GraphSubmissions.resend`); returns how many of each."""
        before = len(self._out_tasks)
        for task_id, record in list(self._tasks.items()):
            self.step(task_id, record, TaskEvent.RESEND)
        return len(self._out_tasks) - before, self.graphs.resend()

    def _forget_all(self) -> None:
        self._argument_bytes = 0
        self._admitted = 0
        self._waiting.clear()
        self.function_users.clear()
        self._out_tasks.clear()
        self._out_cancels.clear()
        self.graphs.clear()
        self.inputs.clear()

    # --- messages from the scheduler ----------------------------------------------------------------------------

    def on_results(self, message: TaskResultBatch, now: float) -> None:
        tasks, step, storage = self._tasks, self.step, self._storage
        for result in message.results:
            task_id = result.task_id
            record = tasks.get(task_id)
            if record is None:
                logger.debug(f"Client: dropped result of unknown or finished task {show(task_id)}")
                self._drop_result(task_id, None, result)
            elif result.payload_kind != PayloadKind.OBJECT:
                gone = result.status is _INPUTS_GONE and record.inputs is not None  # its inputs end here first
                step(task_id, record, _PARK if gone else _RESULT, result)
            elif storage.error is None:
                step(task_id, record, TaskEvent.RESULT_STORED, result)
            else:
                step(task_id, record, TaskEvent.FAIL, storage.error)

    def on_cancel_confirm(self, message: TaskCancelConfirm, now: float) -> None:
        tasks = self._tasks
        for task_id, cancelled in zip(message.task_ids, message.cancelled, strict=False):
            record = tasks.get(task_id)
            if record is not None:
                self.step(task_id, record, TaskEvent.CANCEL_CONFIRMED if cancelled else TaskEvent.CANCEL_REFUSED)

    # --- what storage answered (see StorageRequests) ----------------------------------------------------------

    def object_stored(self, object_id: bytes) -> None:
        for task_id in self._waiting.pop(object_id, ()):
            record = self._tasks.get(task_id)
            if record is None:  # it ended meanwhile
                continue
            record.missing -= 1
            if record.missing == 0:
                self.step(task_id, record, TaskEvent.SEND)
        if self.graphs.waiting:
            self.graphs.object_stored(object_id)

    def object_failed(self, object_id: bytes, error: Exception) -> None:
        for task_id in self._waiting.pop(object_id, ()):
            record = self._tasks.get(task_id)
            if record is not None:
                self.step(task_id, record, TaskEvent.FAIL, error)
        if self.graphs.waiting:
            self.graphs.object_failed(object_id, error)

    def result_read(self, task_id: bytes, payload: Any) -> None:
        record = self._tasks.get(task_id)
        if record is None:
            return
        result = record.fetching
        assert result is not None  # a result is read only for a task FETCHING it
        result.payload = payload
        result.payload_kind = PayloadKind.INLINE
        self.step(task_id, record, TaskEvent.FETCHED, result)

    def result_lost(self, task_id: bytes, error: Exception) -> None:
        record = self._tasks.get(task_id)
        if record is not None:
            self.step(task_id, record, TaskEvent.FAIL, error)

    # --- the way in: what a new task waits for -----------------------------------------------------------------

    def _admit(self, task_id: bytes, record: _TaskRecord, puts: Optional[Sequence[Tuple[bytes, Any]]]) -> None:
        """A new task while some object is being put (or failed), or with large arguments."""
        error = self._failed_need(record)
        if error is None and puts and self._storage.error is not None:
            error = self._storage.error
        if error is not None:
            self.step(task_id, record, TaskEvent.FAIL, error)
            return
        puts = puts or ()
        record.temporary_objects = [*record.temporary_objects, *(object_id for object_id, _ in puts)]
        size = sum(object_frames.size(data) for _, data in puts)
        if not self._room_at_scheduler() or (size and (self._held or not self._room_for(size))):
            self.step(task_id, record, TaskEvent.HOLD, (puts, size))
            return
        self._start(task_id, record, puts, size)
        self.step(task_id, record, self._await(task_id, record))

    admit = _admit  # a task whose inputs ended here, with their values (task_inputs.py)

    def unadmit(self, record: _TaskRecord) -> None:
        """The task left the scheduler (it waits here for its inputs): it no longer counts against the quota."""
        record.admitted = False
        self._admitted -= 1
        if self._held:
            self._start_held()

    def _failed_need(self, record: _TaskRecord) -> Optional[Exception]:
        """The error of a failed put of the task's function or serializer, if one failed."""
        task = record.task
        assert task is not None
        objects = self._storage.objects
        for object_id in (task.function_id, task.serializer_id):
            state = objects.get(object_id)
            if state is not None and state is not PUTTING:
                return state
        return None

    def _room_for(self, size: int) -> bool:
        return self._argument_bytes == 0 or self._argument_bytes + size <= self._argument_bytes_limit

    def _room_at_scheduler(self) -> bool:
        return not self.task_quota or self._admitted < self.task_quota

    def _start(self, task_id: bytes, record: _TaskRecord, puts: Sequence[Tuple[bytes, Any]], size: int) -> None:
        """Put the task's large arguments (it goes once every object it needs is acknowledged)."""
        record.admitted = True
        self._admitted += 1
        record.argument_bytes = size
        self._argument_bytes += size
        for object_id, data in puts:
            self._storage.put(object_id, data)

    def _await(self, task_id: bytes, record: _TaskRecord) -> TaskEvent:
        """Wait for the objects of the task still being put: `STORE`, or `SEND` when none is."""
        task = record.task
        assert task is not None
        objects = self._storage.objects
        missing = 0
        for object_id in (task.function_id, task.serializer_id, *record.temporary_objects):
            if objects.get(object_id) is PUTTING:
                missing += 1
                self._waiting.setdefault(object_id, []).append(task_id)
        record.missing = missing
        return TaskEvent.STORE if missing else TaskEvent.SEND

    def _start_held(self) -> None:
        """Start the tasks held for room, in order, as far as the room (in storage, at the scheduler) now goes."""
        held = self._held
        while held:
            task_id, puts, size = held[0]
            record = self._tasks.get(task_id)
            if record is None:  # it ended (cancelled) while held
                held.popleft()
                continue
            if not self._room_for(size) or not self._room_at_scheduler():
                return
            held.popleft()
            error = self._failed_need(record) or (self._storage.error if puts else None)
            if error is not None:
                self.step(task_id, record, TaskEvent.FAIL, error)
            else:
                self._start(task_id, record, puts, size)
                self.step(task_id, record, self._await(task_id, record))

    # --- the table's actions ------------------------------------------------------------------------------------

    def _hold(self, task_id: bytes, record: _TaskRecord, held: Tuple[Sequence[Tuple[bytes, Any]], int]) -> None:
        puts, size = held
        self._held.append((task_id, puts, size))

    def _send(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        self._out_tasks.append(record.task)  # type: ignore[arg-type]  # a task sent alone has its message
        if not self._keep_sent and record.inputs is None:  # one with inputs may be sent again with their values
            record.task = None

    def _send_again(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        if record.task is not None:  # (a graph's target goes with its graph)
            self._out_tasks.append(record.task)

    def _send_cancel(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        self._out_cancels.append(task_id)

    def _fetch(self, task_id: bytes, record: _TaskRecord, result: TaskResult) -> None:
        record.fetching = result
        self._storage.read(result.payload, task_id, self.inputs.keep(task_id, result.payload))

    def _drop_result(self, task_id: bytes, record: Optional[_TaskRecord], result: TaskResult) -> None:
        if result.payload_kind == PayloadKind.OBJECT and result.payload:
            self._storage.delete((result.payload,))

    def _end(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        self._forget(task_id, record, value, True)

    def _forget(self, task_id: bytes, record: _TaskRecord, value: Any, delete: bool = False) -> None:
        del self._tasks[task_id]
        function_id = record.function_id
        if function_id:  # a graph's targets count their functions per graph
            users = self.function_users.pop(function_id, 1) - 1
            if users > 0:
                self.function_users[function_id] = users
        if delete and record.temporary_objects:
            self._storage.delete(record.temporary_objects)
        if record.inputs is not None:
            self.inputs.ended(record.inputs)
        if record.argument_bytes or record.admitted:
            self._argument_bytes -= record.argument_bytes
            self._admitted -= record.admitted
            if self._held:
                self._start_held()
        if self.graphs.targets:
            self.graphs.target_ended(task_id, delete)

    def _give_result(self, task_id: bytes, record: _TaskRecord, result: TaskResult) -> None:
        out = self._out
        if out and type(out[-1]) is TaskResults:  # the results of one message end in one effect
            out[-1].results.append(result)  # type: ignore[union-attr]
        else:
            out.append(TaskResults([result]))

    def _give_error(self, task_id: bytes, record: _TaskRecord, error: Exception) -> None:
        self._out.append(TaskFailed(task_id, error))

    def _give_cancelled(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        self._out.append(TaskCancelled(task_id))

    def _tell_cancel_refused(self, task_id: bytes, record: _TaskRecord, value: Any) -> None:
        self._out.append(CancelRefused(task_id))

    # --- the turn's batches -------------------------------------------------------------------------------------

    def take_limits(self, ack: HelloAck) -> None:
        """What the scheduler's HelloAck says (1.8; 0: an older one, which says nothing): the largest message it
        takes, and the tasks this client may have there at once."""
        self.max_message_size = ack.max_message_size
        self.message_budget = message_budget(ack.max_message_size)
        self.task_quota = ack.client_quota
        self.inputs.scheduler_holds = knows(ack.version, TASK_INPUTS_VERSION)

    def too_large(self, what: str, size: int) -> ProtocolError:
        option = "scaler_scheduler --max-message-size"
        return ProtocolError(too_large_for(what, size, self.max_message_size, "scheduler", option))

    def flush(self) -> None:
        out = self._out
        if self._out_tasks:
            runs, too_large = batches(self._out_tasks, task_size, self.message_budget, self._batch_size)
            out.extend(ToScheduler(TaskBatch(tasks=run)) for run in runs)
            self._out_tasks = []
            for task, size in too_large:
                record = self._tasks.get(task.task_id)
                if record is not None:
                    self.step(task.task_id, record, TaskEvent.FAIL, self.too_large(f"task {show(task.task_id)}", size))
        if self._out_cancels:
            cancels, each = self._out_cancels, max(1, self.message_budget // _CANCEL_BYTES)
            out.extend(ToScheduler(TaskCancel(cancels[i : i + each])) for i in range(0, len(cancels), each))
            self._out_cancels = []
