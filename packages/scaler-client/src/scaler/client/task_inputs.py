"""Futures as task arguments, in the client's core (sans-I/O): the tasks whose results a task takes (its inputs).

In the user's thread (`task_builder.py`) a future of this client passed as an argument (at the top, or inside
lists, tuples and dicts: `nested_references.py`) becomes ``Argument{kind task}`` naming its task, and the futures
travel with the tasks that take them (`task_builder.Puts.inputs`); a future that succeeded already is its value
instead. `TaskInputs`, for `tasks_in_flight.TasksInFlight`:

- counts, for each input in flight here, the tasks that take its result: a result object of an input stays in
  storage when its payload is read (not deleted) until they ended, since the scheduler hands it to them by its ID;
- lets such a task go as it is to a scheduler of 1.8, which holds it until its inputs end (the scheduler's
  `task_inputs.py`), and parks it here (`PARKED`) when the scheduler is older, or when it answers
  ``inputsGone`` (an input had ended before the task reached it, whose outcome this client has by then): the agent
  waits for the futures (`ResolveInputs`) and says how they ended (`InputsEnded`, `inputs_ended`); the task then
  goes with their values (an input's result object kept here by its ID, else its payload, inline or put as a
  temporary object), or ends as the first input that failed (with its error) or was cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from scaler.client.client_events import Effect, InputsEnded, ResolveInputs
from scaler.client.client_lifecycles import TaskEvent, TaskState
from scaler.client.storage_requests import StorageRequests
from scaler.client.task_builder import INLINE_ARGUMENT_LIMIT
from scaler.protocol.ids import IDGenerator
from scaler.protocol.messages import ArgumentKind, Task

if TYPE_CHECKING:
    from scaler.client.tasks_in_flight import TasksInFlight


class Inputs:
    """A task's inputs: (position of the argument, the input's task ID, its future) for each argument that is one."""

    __slots__ = ("items", "counted", "puts")

    def __init__(self, items: List[Tuple[int, bytes, Any]], puts: Sequence[Tuple[bytes, Any]]) -> None:
        self.items = items
        self.counted: List[bytes] = []  # the inputs in flight here when it came: their results wait for it
        self.puts = puts  # its own large arguments, while it is parked before it was ever sent


class TaskInputs:
    def __init__(self, tasks: TasksInFlight, storage: StorageRequests, out: List[Effect]) -> None:
        self._tasks = tasks
        self._storage = storage
        self._out = out
        self.scheduler_holds = False  # the scheduler holds a task until its inputs end (1.8)
        self._dependents: Dict[bytes, int] = {}  # input task ID -> the tasks in flight that take its result
        self._kept: Dict[bytes, bytes] = {}  # input task ID -> its result object, kept in storage for them
        self._ids = IDGenerator()

    def added(self, task: Task, record: Any, futures: Sequence[Any], puts: Optional[Sequence[Any]]) -> bool:
        """A new task that takes these futures' results; True when it goes to the scheduler as it is."""
        by_id = {future.task_id: future for future in futures}
        items = [
            (position, argument.data, by_id[argument.data])
            for position, argument in enumerate(task.arguments)
            if argument.kind is ArgumentKind.TASK
        ]
        inputs = record.inputs = Inputs(items, puts or ())
        for input_id in by_id:
            if self._tasks.record(input_id) is not None:
                self._dependents[input_id] = self._dependents.get(input_id, 0) + 1
                inputs.counted.append(input_id)
        return self.scheduler_holds

    def keep(self, task_id: bytes, object_id: bytes) -> bool:
        """Whether a result object being read stays in storage: tasks in flight take it."""
        if task_id not in self._dependents:
            return False
        self._kept[task_id] = object_id
        return True

    def ended(self, inputs: Inputs) -> None:
        """A task that took results ended: a result object no other task takes is deleted."""
        for input_id in inputs.counted:
            left = self._dependents.get(input_id, 0) - 1
            if left > 0:
                self._dependents[input_id] = left
                continue
            self._dependents.pop(input_id, None)
            object_id = self._kept.pop(input_id, None)
            if object_id is not None:
                self._storage.delete((object_id,))
        inputs.counted = []

    def clear(self) -> None:
        self._dependents.clear()
        self._kept.clear()

    def resolve(self, task_id: bytes, record: Any, value: Any) -> None:
        """The RESOLVE_INPUTS action: the task waits here for its inputs (see `on_ended`)."""
        if record.admitted:
            self._tasks.unadmit(record)
        self._out.append(ResolveInputs(task_id, record.inputs.items))

    def on_ended(self, event: InputsEnded, now: float) -> None:
        """The parked task's inputs ended: it goes with their values, or ends as the first that did not succeed."""
        record: Any = self._tasks.record(event.task_id)  # parked: it keeps its message and its inputs
        if record is None or record.state is not TaskState.PARKED:
            return  # it ended meanwhile (cancelled, the client stopped)
        if event.cancelled:
            self._tasks.step(event.task_id, record, TaskEvent.CANCEL)
            return
        if event.error is not None:
            self._tasks.step(event.task_id, record, TaskEvent.FAIL, event.error)
            return
        inputs, arguments = record.inputs, record.task.arguments
        puts, inputs.puts = list(inputs.puts), ()
        for position, input_id, _ in inputs.items:
            argument = arguments[position]
            object_id = self._kept.get(input_id) if input_id in inputs.counted else None
            if object_id is None:
                data = event.payloads[position]
                if type(data) is not list and len(data) <= INLINE_ARGUMENT_LIMIT:
                    argument.kind, argument.data = ArgumentKind.INLINE, bytes(data)
                    continue
                object_id = self._ids.next_id()
                puts.append((object_id, data))
            argument.kind, argument.data = ArgumentKind.OBJECT, object_id
        self._tasks.admit(event.task_id, record, puts)


def inputs_ended(task_id: bytes, items: Sequence[Tuple[int, bytes, Any]]) -> InputsEnded:
    """How the futures of a parked task ended (each is done): in the agent's thread, for the core."""
    payloads: Dict[int, Any] = {}
    for position, _, future in items:
        payload, error, cancelled = future._argument_outcome()
        if cancelled or error is not None:
            return InputsEnded(task_id, {}, error, cancelled)
        payloads[position] = payload
    return InputsEnded(task_id, payloads)
