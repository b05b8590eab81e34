"""Tasks that take other tasks' results as arguments (a future passed to `submit`), held until those end; sans-I/O.

A client names an earlier task of its own as an argument: ``Argument{kind task}`` in a `TaskBatch` (1.8), which
`routed.RoutedTask` lists as its ``dependencies``. `TaskInputs` holds such a task (not queued: it takes no room on
any worker) while every task it names is the scheduler's: queued, assigned, or held here in turn. What the
scheduler sends its clients passes here first (`graph_routes.GraphRoutes.through`), and each input's end, which
reaches its client as usual, decides for the tasks held for it, by the table `HELD_TASK`:

- a success: its payload is written into each dependent's arguments (``kind inline`` with the bytes, one object
  for every dependent, or ``kind object`` naming the result object, which the client keeps in storage until its
  dependents end); once every input of a task succeeded, it is queued as its client's task;
- a failure (failed, its worker died, rejected): each dependent ends with that failure (status, payload, error
  text: its client raises the input's own exception), and so do their dependents, in turn;
- a cancel (its client cancelled it, or it is a dependent that ended cancelled): each dependent ends cancelled.

A task that names a task the scheduler does not hold (it ended already, is another client's, or a graph's node)
is answered ``inputsGone``: its client, which has that input's outcome by then (the scheduler sent it before),
sends it again with the input's value itself. A held task its client cancels is confirmed at once; a client
that leaves, clears or is away takes its held tasks with it.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Dict, List, Sequence, Set

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.scheduler.outbox import Outbox

_SUCCESS, _CANCELLED, _OBJECT = m.TaskStatus.SUCCESS, m.TaskStatus.CANCELLED, m.PayloadKind.OBJECT


class HeldState(enum.Enum):
    WAITING = "waiting"  # some task it names has not succeeded yet
    RELEASED = "released"  # every input succeeded: queued as its client's task
    FAILED = "failed"  # an input failed: it ended with that failure
    CANCELLED = "cancelled"  # an input was cancelled, or its client cancelled it
    DROPPED = "dropped"  # its client left, cleared or is away

    __hash__ = object.__hash__


class HeldEvent(enum.Enum):
    INPUT_SUCCEEDED = "input_succeeded"  # an input succeeded; others have not yet
    LAST_INPUT_SUCCEEDED = "last_input_succeeded"
    INPUT_FAILED = "input_failed"
    INPUT_CANCELLED = "input_cancelled"
    CANCEL = "cancel"  # its client cancelled it
    CLIENT_GONE = "client_gone"

    __hash__ = object.__hash__


class HeldAction(enum.Enum):
    TAKE_VALUE = "take_value"  # the input's result becomes its arguments that name it
    FORGET = "forget"
    RELEASE = "release"  # queue it
    GIVE_FAILURE = "give_failure"  # a result to its client: the input's failure
    GIVE_CANCELLED = "give_cancelled"  # a result to its client: cancelled
    CONFIRM_CANCELLED = "confirm_cancelled"  # the cancel its client asked for is confirmed

    __hash__ = object.__hash__


S, E, A = HeldState, HeldEvent, HeldAction
HELD_TASK: Lifecycle[HeldState, HeldEvent] = Lifecycle(
    "held task",
    states=HeldState,
    terminal=(S.RELEASED, S.FAILED, S.CANCELLED, S.DROPPED),
    always_possible=(E.CANCEL, E.CLIENT_GONE),
    table={
        (S.WAITING, E.INPUT_SUCCEEDED): Transition(S.WAITING, (A.TAKE_VALUE,)),
        (S.WAITING, E.LAST_INPUT_SUCCEEDED): Transition(S.RELEASED, (A.TAKE_VALUE, A.FORGET, A.RELEASE)),
        (S.WAITING, E.INPUT_FAILED): Transition(S.FAILED, (A.FORGET, A.GIVE_FAILURE)),
        (S.WAITING, E.INPUT_CANCELLED): Transition(S.CANCELLED, (A.FORGET, A.GIVE_CANCELLED)),
        (S.WAITING, E.CANCEL): Transition(S.CANCELLED, (A.FORGET, A.CONFIRM_CANCELLED)),
        (S.WAITING, E.CLIENT_GONE): Transition(S.DROPPED, (A.FORGET,)),
    },
)
del S, E, A


class _Held:
    __slots__ = ("task", "client_id", "missing", "state")

    def __init__(self, task: Any, client_id: bytes, missing: Set[bytes]) -> None:
        self.task = task  # a routed.RoutedTask
        self.client_id = client_id
        self.missing = missing  # the inputs that have not succeeded yet
        self.state = HeldState.WAITING


class TaskInputs:
    """``live(task_id, client_id)``: whether the scheduler holds that task of that client (not a graph's node)."""

    def __init__(self, live: Callable[[bytes, bytes], bool]) -> None:
        self._live = live
        self._held: Dict[bytes, _Held] = {}  # task ID -> the task held here
        self._dependents: Dict[bytes, Dict[bytes, None]] = {}  # an input's task ID -> the tasks held for it, in order
        self._released: List[Any] = []  # of the current round, for the caller to queue
        self._carry_out: Dict[HeldAction, Callable[[_Held, Any, Outbox], None]] = {
            HeldAction.TAKE_VALUE: self._take_value,
            HeldAction.FORGET: self._forget,
            HeldAction.RELEASE: lambda held, result, out: self._released.append(held.task),
            HeldAction.GIVE_FAILURE: self._give_failure,
            HeldAction.GIVE_CANCELLED: self._give_cancelled,
            HeldAction.CONFIRM_CANCELLED: self._confirm_cancelled,
        }

    @property
    def active(self) -> bool:
        return bool(self._held)

    @property
    def held_count(self) -> int:
        return len(self._held)

    def holds(self, task_id: bytes, client_id: bytes) -> bool:
        held = self._held.get(task_id)
        return held is not None and held.client_id == client_id

    def hold(self, client_id: bytes, tasks: Sequence[Any], out: Outbox) -> None:
        """Tasks of ``client_id`` that name other tasks (``dependencies``): held until those end, or answered
        ``inputsGone`` when the scheduler does not hold one of them. One held already (sent again) stays as it is."""
        for task in tasks:
            task_id = task.task_id
            if task_id in self._held:
                continue
            inputs = {input_id for _, input_id in task.dependencies}
            gone = [i for i in inputs if not (self.holds(i, client_id) or self._live(i, client_id))]
            if gone:
                why = f"task {show(gone[0])}, an input of this task, is not held by the scheduler: send its value"
                out.results[client_id].append(
                    m.TaskResult(task_id, task.attempt, m.TaskStatus.INPUTS_GONE, m.PayloadKind.NONE, b"", why)
                )
                continue
            self._held[task_id] = _Held(task, client_id, inputs)
            for input_id in inputs:
                self._dependents.setdefault(input_id, {})[task_id] = None

    def on_results(self, client_id: bytes, results: Sequence[Any], out: Outbox) -> List[Any]:
        """Results about to leave for ``client_id`` (they still do): those of inputs decide for their dependents.
        Returns the tasks released, to queue; their failures and cancels join ``out.results``."""
        dependents = self._dependents
        for result in results:
            waiting = dependents.pop(result.task_id, None)
            if waiting is None:
                continue
            status = result.status
            for task_id in waiting:
                held = self._held.get(task_id)
                if held is None or held.client_id != client_id:
                    continue  # it ended already, by another of its inputs
                if status is _SUCCESS:
                    last = held.missing == {result.task_id}
                    event = HeldEvent.LAST_INPUT_SUCCEEDED if last else HeldEvent.INPUT_SUCCEEDED
                else:
                    event = HeldEvent.INPUT_CANCELLED if status is _CANCELLED else HeldEvent.INPUT_FAILED
                self._step(held, event, result, out)
        released, self._released = self._released, []
        return released

    def on_confirms(self, client_id: bytes, task_ids: Sequence[bytes], flags: Sequence[bool], out: Outbox) -> None:
        """Cancel confirms about to leave for ``client_id``: a cancelled input cancels its dependents."""
        dependents = self._dependents
        for task_id, cancelled in zip(task_ids, flags, strict=False):
            if not cancelled or task_id not in dependents:
                continue
            for dependent_id in dependents.pop(task_id):
                held = self._held.get(dependent_id)
                if held is not None and held.client_id == client_id:
                    self._step(held, HeldEvent.INPUT_CANCELLED, None, out)

    def cancel(self, client_id: bytes, task_ids: Sequence[bytes], out: Outbox) -> List[bytes]:
        """The client cancels tasks: those held here are confirmed cancelled at once; returns the others."""
        others = []
        for task_id in task_ids:
            held = self._held.get(task_id)
            if held is None or held.client_id != client_id:
                others.append(task_id)
            else:
                self._step(held, HeldEvent.CANCEL, None, out)
        return others

    def forget_client(self, client_id: bytes) -> None:
        """The client left, cleared or is away: its held tasks are dropped (it sends again what it still wants)."""
        out = Outbox()  # nothing is sent to a client that left
        for held in [held for held in self._held.values() if held.client_id == client_id]:
            self._step(held, HeldEvent.CLIENT_GONE, None, out)

    def _step(self, held: _Held, event: HeldEvent, result: Any, out: Outbox) -> None:
        transition = HELD_TASK.step(held.state, event, show(held.task.task_id))
        held.state = transition.next_state
        for action in transition.actions:
            self._carry_out[action](held, result, out)

    # --- actions (HeldAction) -------------------------------------------------------------------------------------

    def _take_value(self, held: _Held, result: Any, out: Outbox) -> None:
        read = getattr(result, "kind_and_payload", None)  # a routed.RoutedResult: both fields in one read
        kind, payload = read() if read is not None else (result.payload_kind, result.payload)
        argument_kind = m.ArgumentKind.OBJECT if kind is _OBJECT else m.ArgumentKind.INLINE
        input_id = result.task_id
        for position, needed in held.task.dependencies:
            if needed == input_id:
                held.task.set_argument(position, argument_kind, payload)
        held.missing.discard(input_id)

    def _forget(self, held: _Held, result: Any, out: Outbox) -> None:
        task_id = held.task.task_id
        del self._held[task_id]
        dependents = self._dependents
        for input_id in held.missing:  # the inputs still waited for no longer wait for it
            waiting = dependents.get(input_id)
            if waiting is not None:
                waiting.pop(task_id, None)
                if not waiting:
                    del dependents[input_id]

    def _give_failure(self, held: _Held, failure: Any, out: Outbox) -> None:
        out.results[held.client_id].append(
            m.TaskResult(
                held.task.task_id, held.task.attempt, failure.status, failure.payload_kind, failure.payload,
                failure.error_text,
            )
        )  # fmt: skip

    def _confirm_cancelled(self, held: _Held, result: Any, out: Outbox) -> None:
        out.confirm(held.client_id, held.task.task_id, True)

    def _give_cancelled(self, held: _Held, result: Any, out: Outbox) -> None:
        out.results[held.client_id].append(
            m.TaskResult(held.task.task_id, held.task.attempt, _CANCELLED, m.PayloadKind.NONE, b"", "")
        )
