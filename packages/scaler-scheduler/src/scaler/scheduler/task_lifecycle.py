"""The life of a task in the scheduler, as one table: ``(state, event) -> (next state, actions)``.

`TASK_LIFECYCLE` is a `scaler.protocol.lifecycle.Lifecycle`. The scheduler core looks up every event a task
receives in it and carries out the actions of the answer, in order (`task_routing.TaskRouting._step`);
whatever differs by state is a different entry here, so no handler looks at a task's state. A pair missing
from the table is a bug and raises `TransitionError` with the task's recent events. Every non-terminal state
has an entry for the events that can reach any task (a cancel, its client leaving, its timeout), and for
every event that can reach it, including the loss of its worker, so every task ends in exactly one terminal
state and its client is told exactly once: by a result or by a cancel confirm.

A scheduler that restarted learns of tasks from the workers that say Hello again (``WorkerInfo.heldTasks``):
a task it does not hold yet is ADOPTED (it knows only its ID, client, scope and attempt) until its client
sends it again (SENT_AGAIN: the client's copy makes it ASSIGNED to that worker, not run again); a task it
holds queued is ASSIGNED to that worker (ADOPT). The result of a task nobody sent again yet is kept for its
client (KEEP_RESULT: `kept_results.py`), which gets it when it sends the task again.
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
    ADOPTED = "adopted"  # a worker that said Hello again holds it; its client has not sent it again yet

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
    ADOPT = "adopt"  # a worker that said Hello again says it holds the task
    SENT_AGAIN = "sent_again"  # its client sent it again (it resumed after losing its connection)

    __hash__ = object.__hash__


class TaskAction(enum.Enum):
    SEND_TO_WORKER = "send_to_worker"  # a new attempt, in the batch for the worker the dispatch chose
    REQUEUE = "requeue"  # off its worker, back in the scheduler's queue
    SEND_CANCEL_TO_WORKER = "send_cancel_to_worker"
    FORWARD_RESULT = "forward_result"  # the result that came with the event, to the client (if connected)
    CONFIRM_CANCELLED = "confirm_cancelled"  # TaskCancelConfirm(cancelled) to the client
    CONFIRM_NOT_CANCELLED = "confirm_not_cancelled"  # the result crossed the cancel: it did finish
    FINISH = "finish"  # forget it: it reached its terminal state
    NOTE_HELD = "note_held"  # the worker that says it holds it has it, at the attempt it says: nothing is sent
    CANCEL_ON_REPORTER = "cancel_on_reporter"  # another worker has it: the one that says it holds it cancels it
    TAKE_TASK = "take_task"  # the client's copy replaces what the worker said of it (ID, client, attempt)
    KEEP_RESULT = "keep_result"  # kept for its client, which gets it when it sends the task again

    __hash__ = object.__hash__


TERMINAL_STATES = frozenset({TaskState.SUCCESS, TaskState.FAILED, TaskState.CANCELLED, TaskState.REJECTED})

S, E, A, T = TaskState, TaskEvent, TaskAction, Transition
TASK_LIFECYCLE: Lifecycle[TaskState, TaskEvent] = Lifecycle(
    "task",
    states=TaskState,
    terminal=TERMINAL_STATES,
    always_possible=(E.CANCEL, E.WITHDRAW, E.EXPIRED),
    show=bytes.hex,
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
        # a scheduler that restarted: what workers say they hold, and clients send again
        (S.QUEUED, E.ADOPT): T(S.ASSIGNED, (A.NOTE_HELD,)),  # not run twice: the worker that holds it keeps it
        (S.ASSIGNED, E.ADOPT): T(S.ASSIGNED, (A.CANCEL_ON_REPORTER,)),
        (S.CANCELING, E.ADOPT): T(S.CANCELING, (A.CANCEL_ON_REPORTER,)),
        (S.WITHDRAWING, E.ADOPT): T(S.WITHDRAWING, (A.CANCEL_ON_REPORTER,)),
        (S.ADOPTED, E.ADOPT): T(S.ADOPTED, (A.CANCEL_ON_REPORTER,)),
        (S.ADOPTED, E.SENT_AGAIN): T(S.ASSIGNED, (A.TAKE_TASK,)),
        (S.QUEUED, E.SENT_AGAIN): T(S.QUEUED),  # held: the copy is not needed
        (S.ASSIGNED, E.SENT_AGAIN): T(S.ASSIGNED),
        (S.CANCELING, E.SENT_AGAIN): T(S.CANCELING),
        (S.WITHDRAWING, E.SENT_AGAIN): T(S.WITHDRAWING),
        (S.ADOPTED, E.RESULT_SUCCESS): T(S.SUCCESS, (A.KEEP_RESULT, A.FINISH)),
        (S.ADOPTED, E.RESULT_FAILED): T(S.FAILED, (A.KEEP_RESULT, A.FINISH)),
        (S.ADOPTED, E.RETRY): T(S.CANCELLED, (A.FINISH,)),  # its processor died: it runs anew once sent again
        (S.ADOPTED, E.CANCEL): T(S.CANCELING, (A.SEND_CANCEL_TO_WORKER,)),
        (S.ADOPTED, E.WITHDRAW): T(S.WITHDRAWING, (A.SEND_CANCEL_TO_WORKER,)),  # its client is gone, or has it
        (S.ADOPTED, E.CANCEL_CONFIRMED): T(S.ADOPTED),
        (S.ADOPTED, E.WORKER_GONE): T(S.CANCELLED, (A.FINISH,)),  # nothing to queue: sent again, it runs anew
        (S.ADOPTED, E.BALANCED): T(S.CANCELLED, (A.FINISH,)),
        (S.ADOPTED, E.EXPIRED): T(S.ADOPTED),
    },
)
del S, E, A, T
