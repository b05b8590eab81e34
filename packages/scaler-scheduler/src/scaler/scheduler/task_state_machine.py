"""The life of a task in the scheduler, as one table.

``TRANSITIONS[(state, event)]`` is the next state. Any pair missing from the
table is a bug in the caller and raises `TaskStateError` with the task's recent
history. Every non-terminal state has an entry for every event that can reach
it, including the loss of its worker or its client, so every task ends in
exactly one terminal state.
"""

from __future__ import annotations

import enum
from typing import Dict, Sequence, Tuple

from scaler.protocol.errors import ScalerError


class TaskState(enum.Enum):
    QUEUED = "queued"  # waiting in the scheduler for a worker
    ASSIGNED = "assigned"  # sent to a worker, queued or running there
    CANCELING = "canceling"  # cancel sent to its worker, waiting for the confirm
    SUCCESS = "success"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C, on the per-task path


class TaskEvent(enum.Enum):
    ASSIGN = "assign"  # a worker was chosen and the task sent to it
    RESULT_SUCCESS = "result_success"
    RESULT_FAILED = "result_failed"  # the task raised, or its processor died
    RETRY = "retry"  # it failed (or killed its processor) and may run again
    CANCEL = "cancel"  # the client cancelled it, cleared, or went away
    CANCEL_CONFIRMED = "cancel_confirmed"  # its worker confirmed (or no longer knows it)
    WORKER_GONE = "worker_gone"  # its worker died, timed out or left
    BALANCED = "balanced"  # its worker gave it back without running it
    REJECT = "reject"  # the scheduler will never run it

    __hash__ = object.__hash__


TERMINAL_STATES = frozenset({TaskState.SUCCESS, TaskState.FAILED, TaskState.CANCELLED, TaskState.REJECTED})

S, E = TaskState, TaskEvent
TRANSITIONS: Dict[Tuple[TaskState, TaskEvent], TaskState] = {
    (S.QUEUED, E.ASSIGN): S.ASSIGNED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.QUEUED, E.REJECT): S.REJECTED,
    (S.ASSIGNED, E.RESULT_SUCCESS): S.SUCCESS,
    (S.ASSIGNED, E.RESULT_FAILED): S.FAILED,
    (S.ASSIGNED, E.RETRY): S.QUEUED,
    (S.ASSIGNED, E.CANCEL): S.CANCELING,
    (S.ASSIGNED, E.WORKER_GONE): S.QUEUED,
    (S.ASSIGNED, E.BALANCED): S.QUEUED,
    (S.ASSIGNED, E.REJECT): S.REJECTED,
    # a result that crossed the cancel on the wire wins: the task did finish
    (S.CANCELING, E.RESULT_SUCCESS): S.SUCCESS,
    (S.CANCELING, E.RESULT_FAILED): S.FAILED,
    (S.CANCELING, E.RETRY): S.CANCELLED,
    (S.CANCELING, E.CANCEL): S.CANCELING,
    (S.CANCELING, E.CANCEL_CONFIRMED): S.CANCELLED,
    (S.CANCELING, E.WORKER_GONE): S.CANCELLED,
    (S.CANCELING, E.BALANCED): S.CANCELLED,
    (S.CANCELING, E.REJECT): S.CANCELLED,
}
del S, E


class TaskStateError(ScalerError):
    """An event that the task's current state has no transition for."""


def next_state(state: TaskState, event: TaskEvent, task_id: bytes, history: Sequence[TaskEvent]) -> TaskState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        events = " -> ".join(e.value for e in history) or "(none)"
        raise TaskStateError(
            f"task {task_id.hex()}: no transition from {state.value} on {event.value}; recent events: {events}"
        ) from None
