"""What the scheduler holds of each task it routes (`TaskRecord`), and the task's recent events.

A record's ``history`` is its last eight events, four bits each in one integer (no list per task): an event
is noted as ``((history << 4) | EVENT_CODES[event]) & HISTORY_MASK``, and `story` reads them back for the error
of a missing transition (`task_lifecycle.TASK_LIFECYCLE`).
"""

from __future__ import annotations

from typing import Any, FrozenSet, List, Optional

from scaler.scheduler.task_lifecycle import TaskEvent, TaskState

HISTORY_MASK = (1 << 32) - 1
_EVENTS = list(TaskEvent)
EVENT_CODES = {event: code for code, event in enumerate(_EVENTS, start=1)}
assert len(_EVENTS) < 16


class TaskRecord:
    __slots__ = (
        "task", "state", "worker_id", "history", "queue_seq", "needs", "deaths", "failures", "submitted", "queued_at",
    )  # fmt: skip

    def __init__(self, task: Any, needs: Optional[FrozenSet[str]], submitted: bool, queued_at: float) -> None:
        self.task = task  # a routed.RoutedTask (or an m.Task, from the graph layer)
        self.submitted = submitted  # its client sent it (not a graph node): queued, it counts against the quota
        self.queued_at = queued_at  # when it came, for its runs (Task.queued_seconds)
        self.state = TaskState.QUEUED
        self.worker_id: Optional[bytes] = None
        self.history = 0  # its last events (see above), for the error of a missing transition
        self.queue_seq = 0
        self.needs = needs  # capability names a worker must have, or None
        self.deaths = 0  # times its processor or worker died while holding it
        self.failures = 0  # times it raised and was retried


def story(history: int) -> List[TaskEvent]:
    """A task's recent events, oldest first, from its `TaskRecord.history`."""
    events = []
    while history:
        events.append(_EVENTS[(history & 15) - 1])
        history >>= 4
    return events[::-1]
