"""What the worker core sends back to the scheduler, and when.

Results travel in `TaskResultBatch`es. While more tasks wait on this worker, results wait a little for
company (fewer, larger batches for the scheduler and the client): at most `RESULT_BATCH_SECONDS`, and at
most `RESULT_BATCH_SIZE` of them; any other message (a cancel confirm, a balance response, a storage
request) takes them along at once, after them. A failed task's result carries the exception
(`task_failure`).
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.worker.task_failure import failure_payload
from scaler.worker.worker_events import SendToScheduler

RESULT_BATCH_SECONDS = 0.005
RESULT_BATCH_SIZE = 256


class SchedulerAnswers:
    def __init__(self, batch_seconds: float = RESULT_BATCH_SECONDS) -> None:
        self._batch_seconds = batch_seconds  # 0: results never wait
        self._results: List[m.TaskResult] = []
        self._messages: List[Any] = []  # other messages, after the results
        self.send_by = math.inf  # results held for company go at the latest then

    # ------------------------------------------------------------------------- what to send

    def result(
        self, task: m.Task, status: int, payload: Any, error_text: str, profiling: Optional[Tuple[float, float, int]]
    ) -> None:
        """The result the runner reported (a serialized value or failure, inline)."""
        kind = m.PayloadKind.INLINE if payload else m.PayloadKind.NONE
        profiled = m.Profiling(*profiling) if profiling else m.Profiling()
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, m.TaskStatus(status), kind, payload, error_text, profiled)
        )

    def stored(self, task: m.Task, object_id: bytes, profiling: m.Profiling) -> None:
        status = m.TaskStatus.SUCCESS
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, m.PayloadKind.OBJECT, object_id, "", profiling)
        )

    def failure(self, task: m.Task, error: BaseException, profiling: Optional[m.Profiling] = None) -> None:
        payload, error_text = failure_payload(error)
        kind = m.PayloadKind.INLINE if payload else m.PayloadKind.NONE
        status = m.TaskStatus.FAILED
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, kind, payload, error_text, profiling or m.Profiling())
        )

    def worker_died(self, task: m.Task, reason: str) -> None:
        status = m.TaskStatus.WORKER_DIED
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, m.PayloadKind.NONE, b"", reason, m.Profiling())
        )

    def message(self, message: Any) -> None:
        self._messages.append(message)

    # ------------------------------------------------------------------------- when

    @property
    def pending(self) -> bool:
        return bool(self._results or self._messages)

    def may_hold(self, now: float, more_tasks_here: bool) -> bool:
        """Whether what is collected (only results) may wait, and note until when."""
        if (
            self._messages
            or not more_tasks_here
            or self._batch_seconds <= 0
            or len(self._results) >= RESULT_BATCH_SIZE
            or now >= self.send_by
        ):
            return False
        if self.send_by == math.inf:
            self.send_by = now + self._batch_seconds
        return True

    def send(self, out: List[Any]) -> None:
        """Everything collected: the results first, then the other messages."""
        if self._results:
            out.append(SendToScheduler(m.TaskResultBatch(self._results)))
            self._results = []
        if self._messages:
            out.extend(SendToScheduler(message) for message in self._messages)
            self._messages = []
        self.send_by = math.inf


def profile(profiling: Optional[Tuple[float, float, int]]) -> m.Profiling:
    """A runner's (duration seconds, CPU seconds, peak memory bytes), or None, as a `Profiling`."""
    return m.Profiling(*profiling) if profiling else m.Profiling()
