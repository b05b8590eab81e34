"""The life of a task in the scheduler, as one table: ``(state, event) -> (next state, actions)``.

`TASK_LIFECYCLE` is a `scaler.protocol.lifecycle.Lifecycle`. The scheduler core looks up every event a task
receives in it and carries out the actions of the answer, in order (`task_routing.TaskRouting._step`);
whatever differs by state is a different entry here, so no handler looks at a task's state. A pair missing
from the table is a bug and raises `TransitionError` with the task's recent events. Every non-terminal state
has an entry for the events that can reach any task (a cancel, its client leaving, its timeout), and for
every event that can reach it, including the loss of its worker, so every task ends in exactly one terminal
state and its client is told exactly once: by a result or by a cancel confirm.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class TaskState(enum.Enum):
    QUEUED = "queued"  # waiting in the scheduler for a worker
    ASSIGNED = "assigned"  # sent to a worker, queued or running there
    CANCELING = "canceling"  # its client cancelled it while a worker held it: waiting for the worker's confirm
    WITHDRAWING = "withdrawing"  # its client left or cleared it while a worker held it: nobody waits for it
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C, on the per-task path


class TaskEvent(enum.Enum):
    ASSIGN = "assign"  # the dispatch chose a worker for it
    RESULT_SUCCESS = "result_success"
    RESULT_FAILED = "result_failed"  # it raised, or killed its processor, and has no run left
    RETRY = "retry"  # it raised (retries left) or killed its processor (deaths left): it may run again
    CANCEL = "cancel"  # its client cancels it and waits for the confirm
    WITHDRAW = "withdraw"  # its client left, timed out or cleared its tasks: nobody waits for a confirm
    CANCEL_CONFIRMED = "cancel_confirmed"  # its worker confirmed a cancel (or no longer knows the task)
    WORKER_GONE = "worker_gone"  # its worker died, timed out or left, or its heartbeat says it does not hold it
    BALANCED = "balanced"  # its worker gave it back without running it
    EXPIRED = "expired"  # its timeout passed
    UNSENDABLE = "unsendable"  # it cannot be encoded for its worker (only a crafted message gets there)

    __hash__ = object.__hash__


class TaskAction(enum.Enum):
    SEND_TO_WORKER = "send_to_worker"  # a new attempt, in the batch for the worker the dispatch chose
    REQUEUE = "requeue"  # off its worker, back in the scheduler's queue
    SEND_CANCEL_TO_WORKER = "send_cancel_to_worker"
    FORWARD_RESULT = "forward_result"  # the result that came with the event, to the client (if connected)
    CONFIRM_CANCELLED = "confirm_cancelled"  # TaskCancelConfirm(cancelled) to the client
    CONFIRM_NOT_CANCELLED = "confirm_not_cancelled"  # the result crossed the cancel: it did finish
    FINISH = "finish"  # forget it: it reached its terminal state

    __hash__ = object.__hash__


TERMINAL_STATES = frozenset({TaskState.SUCCESS, TaskState.FAILED, TaskState.CANCELLED, TaskState.REJECTED})

S, E, A, T = TaskState, TaskEvent, TaskAction, Transition
TASK_LIFECYCLE: Lifecycle[TaskState, TaskEvent] = Lifecycle(
    "task",
    states=TaskState,
    terminal=TERMINAL_STATES,
    always_possible=(E.CANCEL, E.WITHDRAW, E.EXPIRED),
    table={
        (S.QUEUED, E.ASSIGN): T(S.ASSIGNED, (A.SEND_TO_WORKER,)),
        (S.QUEUED, E.CANCEL): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),
        (S.QUEUED, E.WITHDRAW): T(S.CANCELLED, (A.FINISH,)),
        (S.QUEUED, E.EXPIRED): T(S.REJECTED, (A.FORWARD_RESULT, A.FINISH)),  # no worker took it in time
        (S.ASSIGNED, E.RESULT_SUCCESS): T(S.SUCCESS, (A.FORWARD_RESULT, A.FINISH)),
        (S.ASSIGNED, E.RESULT_FAILED): T(S.FAILED, (A.FORWARD_RESULT, A.FINISH)),
        (S.ASSIGNED, E.RETRY): T(S.QUEUED, (A.REQUEUE,)),
        (S.ASSIGNED, E.CANCEL): T(S.CANCELING, (A.SEND_CANCEL_TO_WORKER,)),
        (S.ASSIGNED, E.WITHDRAW): T(S.WITHDRAWING, (A.SEND_CANCEL_TO_WORKER,)),
        (S.ASSIGNED, E.CANCEL_CONFIRMED): T(S.ASSIGNED),  # a confirm nobody asked for: it still runs there
        (S.ASSIGNED, E.WORKER_GONE): T(S.QUEUED, (A.REQUEUE,)),
        (S.ASSIGNED, E.BALANCED): T(S.QUEUED, (A.REQUEUE,)),
        (S.ASSIGNED, E.EXPIRED): T(S.ASSIGNED),  # it runs: its worker enforces the timeout
        (S.ASSIGNED, E.UNSENDABLE): T(S.REJECTED, (A.FORWARD_RESULT, A.FINISH)),
        # a result that crossed the cancel on the wire wins: the task did finish
        (S.CANCELING, E.RESULT_SUCCESS): T(S.SUCCESS, (A.FORWARD_RESULT, A.CONFIRM_NOT_CANCELLED, A.FINISH)),
        (S.CANCELING, E.RESULT_FAILED): T(S.FAILED, (A.FORWARD_RESULT, A.CONFIRM_NOT_CANCELLED, A.FINISH)),
        (S.CANCELING, E.RETRY): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),
        (S.CANCELING, E.CANCEL): T(S.CANCELING),  # the confirm to come answers this cancel too
        (S.CANCELING, E.WITHDRAW): T(S.WITHDRAWING),
        (S.CANCELING, E.CANCEL_CONFIRMED): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),
        (S.CANCELING, E.WORKER_GONE): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),
        (S.CANCELING, E.BALANCED): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),
        (S.CANCELING, E.EXPIRED): T(S.CANCELING),
        (S.CANCELING, E.UNSENDABLE): T(S.CANCELLED, (A.CONFIRM_CANCELLED, A.FINISH)),  # it never reached its worker
        # a withdrawn task's result still goes to its client if it is connected (it cleared its tasks)
        (S.WITHDRAWING, E.RESULT_SUCCESS): T(S.SUCCESS, (A.FORWARD_RESULT, A.FINISH)),
        (S.WITHDRAWING, E.RESULT_FAILED): T(S.FAILED, (A.FORWARD_RESULT, A.FINISH)),
        (S.WITHDRAWING, E.RETRY): T(S.CANCELLED, (A.FINISH,)),
        (S.WITHDRAWING, E.CANCEL): T(S.CANCELING),  # its client (still connected) now waits for the confirm
        (S.WITHDRAWING, E.WITHDRAW): T(S.WITHDRAWING),
        (S.WITHDRAWING, E.CANCEL_CONFIRMED): T(S.CANCELLED, (A.FINISH,)),
        (S.WITHDRAWING, E.WORKER_GONE): T(S.CANCELLED, (A.FINISH,)),
        (S.WITHDRAWING, E.BALANCED): T(S.CANCELLED, (A.FINISH,)),
        (S.WITHDRAWING, E.EXPIRED): T(S.WITHDRAWING),
        (S.WITHDRAWING, E.UNSENDABLE): T(S.CANCELLED, (A.FINISH,)),
    },
)
del S, E, A, T
