"""The life of a task in the worker core, as one table.

A task the scheduler assigns is QUEUED; STAGED once what it needs is being fetched from object storage
(function, serializer, object arguments; a few tasks are staged ahead so that their data arrives while
others run); RUNNING once the task runner took it (`task_runner`); STORING while its large result is put in
object storage. It ends DONE (its result went to the scheduler), CANCELLED (a cancel confirm said so) or
BALANCED (given back in a balance response): every task ends in exactly one of them, and each of those is
exactly one answer to the scheduler. CANCELLING and TIMING_OUT are RUNNING tasks the core asked the runner
to end (a cancel, a timeout): what the runner then reports (`died`, `returned`, `finished`) ends them. A
started task that waits for tasks it submitted, and runs again, stays in its state: the scheduler is told
(WAIT, RESUME), so that a waiting task holds no room there.

``TASK_LIFECYCLE.table[(state, event)]`` gives the next state and the actions the core carries out, in
order (`WorkerCore._apply`); a pair missing from the table raises `TransitionError` with the task's recent
events. What differs by state is a different entry, so no handler re-checks the state.
"""

from __future__ import annotations

import enum
from typing import Any, List, Optional, Sequence, Tuple

from scaler.protocol import messages as m
from scaler.protocol.lifecycle import Lifecycle, Transition


class TaskState(enum.Enum):
    QUEUED = "queued"
    STAGED = "staged"  # what it needs is fetched (or held by the runner)
    RUNNING = "running"  # the task runner has it: sent to the processor, running, or waiting there
    CANCELLING = "cancelling"  # running, and the runner was asked to end it for a cancel
    TIMING_OUT = "timing out"  # running, and the runner was asked to end it: it exceeded its timeout
    STORING = "storing"  # its large result is being put in object storage
    DONE = "done"
    CANCELLED = "cancelled"
    BALANCED = "balanced"

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C, on the per-task path


class TaskEvent(enum.Enum):
    STAGE = "stage"  # it comes up to run soon: fetch what it needs
    RUN = "run"  # the runner takes it
    FAIL = "fail"  # what it needs cannot be had (not found, refused, storage silent), or its result not stored
    CANCEL = "cancel"  # the scheduler cancels it
    BALANCE = "balance"  # given back to the scheduler (a balance request)
    REASSIGNED = "reassigned"  # the scheduler assigned it again, with a new attempt number
    RESULT = "result"  # the runner reports its result, small enough to travel inline
    LARGE_RESULT = "large result"  # the runner reports its result, to be put in object storage first
    STORED = "stored"  # object storage took its result
    DIED = "died"  # the runner reports it ended without a result of its own (processor died or stopped)
    RETURNED = "returned"  # the runner gives it back unstarted
    TIMEOUT = "timeout"  # it ran longer than its timeout
    WAIT = "wait"  # the runner reports it waits for tasks it submitted (it holds no room meanwhile)
    RESUME = "resume"  # the runner reports it runs again

    __hash__ = object.__hash__


class TaskAction(enum.Enum):
    DEQUEUE = "dequeue"  # take it out of the queue
    DEQUEUE_STAGED = "dequeue staged"  # take it out of the queue, and forget the object arguments kept for it
    REQUEUE = "requeue"  # back at the head of the queue (the runner gave it back)
    SEND_FAILURE = "send failure"  # a FAILED result with the error given
    SEND_RESULT = "send result"  # the runner's result, inline
    PUT_RESULT = "put result"  # put the runner's result in object storage
    SEND_STORED = "send stored"  # a SUCCESS result naming the stored object
    SEND_WORKER_DIED = "send worker died"  # a WORKER_DIED result with the runner's reason
    SEND_TIMEOUT = "send timeout"  # a FAILED result with TaskTimeoutError
    CONFIRM_NOW = "confirm now"  # this cancel says cancelled
    ASK_RUNNER = "ask runner"  # this cancel waits for the runner to end the task
    RESOLVE_CANCELLED = "resolve cancelled"  # the cancels waiting for it say cancelled (the first one)
    RESOLVE_NOT_CANCELLED = "resolve not cancelled"  # the cancels waiting for it say not cancelled
    ABORT = "abort"  # ask the runner to end it now
    NEW_ATTEMPT = "new attempt"  # its result answers the new attempt
    TELL_WAITING = "tell waiting"  # the scheduler hears it waits (WaitingTasks): it holds no room there
    TELL_RESUMED = "tell resumed"  # the scheduler hears it runs again

    __hash__ = object.__hash__


_S, _E, _A = TaskState, TaskEvent, TaskAction


def _t(next_state: TaskState, *actions: TaskAction) -> Transition[TaskState]:
    return Transition(next_state, actions)


_TABLE = {
    (_S.QUEUED, _E.STAGE): _t(_S.STAGED),
    (_S.QUEUED, _E.FAIL): _t(_S.DONE, _A.DEQUEUE, _A.SEND_FAILURE),
    (_S.QUEUED, _E.CANCEL): _t(_S.CANCELLED, _A.DEQUEUE, _A.CONFIRM_NOW),
    (_S.QUEUED, _E.BALANCE): _t(_S.BALANCED, _A.DEQUEUE),
    (_S.QUEUED, _E.REASSIGNED): _t(_S.QUEUED, _A.NEW_ATTEMPT),
    (_S.STAGED, _E.RUN): _t(_S.RUNNING, _A.DEQUEUE_STAGED),
    (_S.STAGED, _E.FAIL): _t(_S.DONE, _A.DEQUEUE_STAGED, _A.SEND_FAILURE),
    (_S.STAGED, _E.CANCEL): _t(_S.CANCELLED, _A.DEQUEUE_STAGED, _A.CONFIRM_NOW),
    (_S.STAGED, _E.BALANCE): _t(_S.BALANCED, _A.DEQUEUE_STAGED),
    (_S.STAGED, _E.REASSIGNED): _t(_S.STAGED, _A.NEW_ATTEMPT),
    (_S.RUNNING, _E.RESULT): _t(_S.DONE, _A.SEND_RESULT),
    (_S.RUNNING, _E.LARGE_RESULT): _t(_S.STORING, _A.PUT_RESULT),
    (_S.RUNNING, _E.DIED): _t(_S.DONE, _A.SEND_WORKER_DIED),
    (_S.RUNNING, _E.RETURNED): _t(_S.QUEUED, _A.REQUEUE),
    (_S.RUNNING, _E.CANCEL): _t(_S.CANCELLING, _A.ASK_RUNNER),
    (_S.RUNNING, _E.TIMEOUT): _t(_S.TIMING_OUT, _A.ABORT),
    (_S.RUNNING, _E.REASSIGNED): _t(_S.RUNNING, _A.NEW_ATTEMPT),
    (_S.RUNNING, _E.WAIT): _t(_S.RUNNING, _A.TELL_WAITING),
    (_S.RUNNING, _E.RESUME): _t(_S.RUNNING, _A.TELL_RESUMED),
    # a result that crossed the cancel wins: the task did finish, and the cancel says not cancelled
    (_S.CANCELLING, _E.RESULT): _t(_S.DONE, _A.RESOLVE_NOT_CANCELLED, _A.SEND_RESULT),
    (_S.CANCELLING, _E.LARGE_RESULT): _t(_S.STORING, _A.RESOLVE_NOT_CANCELLED, _A.PUT_RESULT),
    (_S.CANCELLING, _E.DIED): _t(_S.CANCELLED, _A.RESOLVE_CANCELLED),
    (_S.CANCELLING, _E.RETURNED): _t(_S.CANCELLED, _A.RESOLVE_CANCELLED),
    (_S.CANCELLING, _E.CANCEL): _t(_S.CANCELLING, _A.ASK_RUNNER),  # a task is cancelled once: the first says so
    (_S.CANCELLING, _E.TIMEOUT): _t(_S.CANCELLING, _A.ABORT),
    (_S.CANCELLING, _E.REASSIGNED): _t(_S.CANCELLING, _A.NEW_ATTEMPT),
    (_S.CANCELLING, _E.WAIT): _t(_S.CANCELLING, _A.TELL_WAITING),
    (_S.CANCELLING, _E.RESUME): _t(_S.CANCELLING, _A.TELL_RESUMED),
    (_S.TIMING_OUT, _E.RESULT): _t(_S.DONE, _A.SEND_RESULT),
    (_S.TIMING_OUT, _E.LARGE_RESULT): _t(_S.STORING, _A.PUT_RESULT),
    (_S.TIMING_OUT, _E.DIED): _t(_S.DONE, _A.SEND_TIMEOUT),
    (_S.TIMING_OUT, _E.RETURNED): _t(_S.QUEUED, _A.REQUEUE),  # it had not started after all
    (_S.TIMING_OUT, _E.CANCEL): _t(_S.CANCELLING, _A.ASK_RUNNER),
    (_S.TIMING_OUT, _E.TIMEOUT): _t(_S.TIMING_OUT),
    (_S.TIMING_OUT, _E.REASSIGNED): _t(_S.TIMING_OUT, _A.NEW_ATTEMPT),
    (_S.TIMING_OUT, _E.WAIT): _t(_S.TIMING_OUT, _A.TELL_WAITING),
    (_S.TIMING_OUT, _E.RESUME): _t(_S.TIMING_OUT, _A.TELL_RESUMED),
    (_S.STORING, _E.STORED): _t(_S.DONE, _A.SEND_STORED),
    (_S.STORING, _E.FAIL): _t(_S.DONE, _A.SEND_FAILURE),
    (_S.STORING, _E.CANCEL): _t(_S.STORING),  # finished: its result is on the way, the cancel says not cancelled
    (_S.STORING, _E.TIMEOUT): _t(_S.STORING),  # it finished in time
    (_S.STORING, _E.REASSIGNED): _t(_S.STORING, _A.NEW_ATTEMPT),
}

TERMINAL_STATES = frozenset({_S.DONE, _S.CANCELLED, _S.BALANCED})

TASK_LIFECYCLE: Lifecycle[TaskState, TaskEvent] = Lifecycle(
    "worker task", TaskState, TERMINAL_STATES, _TABLE, always_possible=(_E.CANCEL, _E.REASSIGNED), show=bytes.hex
)
del _S, _E, _A


class PendingConfirm:
    """A `TaskCancelConfirm` that waits for the runner to end some of its tasks."""

    __slots__ = ("task_ids", "cancelled", "unresolved")

    def __init__(self, task_ids: List[bytes]) -> None:
        self.task_ids = task_ids
        self.cancelled = [False] * len(task_ids)
        self.unresolved = 0


_OBJECT_ARGUMENT = m.ArgumentKind.OBJECT


class TaskEntry:
    """A task this worker holds, with its state in `TASK_LIFECYCLE`."""

    __slots__ = ("task", "object_ids", "state", "story", "run", "confirms", "received", "started", "waiting")

    def __init__(self, task: m.Task, received: float = 0.0) -> None:
        self.task = task
        self.received = received  # when it arrived here, and when the runner started it, for its run (task_runs)
        self.started: Optional[float] = None
        self.object_ids: Sequence[bytes] = ()  # of its object-storage arguments
        for argument in task.arguments:
            if argument.kind == _OBJECT_ARGUMENT:
                self.object_ids = [each.data for each in task.arguments if each.kind == _OBJECT_ARGUMENT]
                break
        self.state = TaskState.QUEUED
        self.story = 0  # its last events (`Lifecycle.advance`), for the error of a missing transition
        self.run = 0  # which start of it its timeout timer belongs to (0: none), so that a stale one is ignored
        # cancels waiting for the runner to end it: (confirm, position of this task in it)
        self.confirms: Optional[List[Tuple[PendingConfirm, int]]] = None
        self.waiting = False  # it waits for tasks it submitted (told to the scheduler, and in a resuming Hello)


Detail = Any  # what an event carries to its actions: an error, a reason, a result, a cancel's (confirm, position)
