"""What the worker core sends back to the scheduler, and when.

Results travel in `TaskResultBatch`es; while the scheduler is away (the worker waits for it to come back) they
wait here, and the worker's Hello names their tasks (`held`), so that the scheduler takes them for its own.
While more tasks wait on this worker, results wait a little for
company (fewer, larger batches for the scheduler and the client): at most `RESULT_BATCH_SECONDS`, and at
most `RESULT_BATCH_SIZE` of them; any other message (a cancel confirm, a balance response, a storage
request, the tasks that began or ended a wait) takes them along at once, after them. Waits go at once: a
waiting task's room at the scheduler is what lets its children come. A failed task's result carries the exception
(`task_failure`). Every message fits in what the scheduler takes (its HelloAck's ``maxMessageSize``): results
and outputs are split over as many as needed. The lifecycle's actions that answer the scheduler
(`task_lifecycle.TaskAction`) are carried out here.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.errors import TaskTimeoutError
from scaler.protocol.message_limits import batches, message_budget, output_size, result_size, too_large_for
from scaler.worker.task_failure import failure_payload
from scaler.worker.task_lifecycle import Detail, TaskEntry
from scaler.worker.worker_events import SendToScheduler

RESULT_BATCH_SECONDS = 0.005
RESULT_BATCH_SIZE = 256

_STATUSES = {status.value: status for status in m.TaskStatus}  # faster than m.TaskStatus(value)


class SchedulerAnswers:
    def __init__(self, batch_seconds: float = RESULT_BATCH_SECONDS) -> None:
        self._batch_seconds = batch_seconds  # 0: results never wait
        self._results: List[m.TaskResult] = []
        self._owners: List[Tuple[bytes, bytes]] = []  # the (client, scope) of each result's task, in order
        self._messages: List[Any] = []  # other messages, after the results
        self._waits: Dict[bytes, bool] = {}  # tasks that began (True) or ended (False) a wait since the last send
        self.send_by = math.inf  # results held for company go at the latest then

    # ------------------------------------------------------------------------- the lifecycle's actions

    def send_result(self, entry: TaskEntry, detail: Detail) -> None:
        """The result the runner reported: ``detail`` is (status, serialized value or failure, error text,
        profiling)."""
        status, payload, error_text, profiling = detail
        task = entry.task
        kind = m.PayloadKind.INLINE if payload else m.PayloadKind.NONE
        profiled = m.Profiling(*profiling) if profiling else m.Profiling()
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, _STATUSES[status], kind, payload, error_text, profiled)
        )
        self._owners.append((task.client_id, task.scope_id))

    def send_stored(self, entry: TaskEntry, detail: Detail) -> None:
        """The result is in object storage: ``detail`` is (object ID, profiling)."""
        object_id, profiling = detail
        task = entry.task
        status = m.TaskStatus.SUCCESS
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, m.PayloadKind.OBJECT, object_id, "", profiling)
        )
        self._owners.append((task.client_id, task.scope_id))

    def send_failure(self, entry: TaskEntry, detail: Detail) -> None:
        """``detail`` is (the exception, profiling or None)."""
        error, profiling = detail
        task = entry.task
        payload, error_text = failure_payload(error)
        kind = m.PayloadKind.INLINE if payload else m.PayloadKind.NONE
        status = m.TaskStatus.FAILED
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, kind, payload, error_text, profiling or m.Profiling())
        )
        self._owners.append((task.client_id, task.scope_id))

    def send_timeout(self, entry: TaskEntry, detail: Detail) -> None:
        self.send_failure(entry, (timeout_error(entry.task), None))

    def send_worker_died(self, entry: TaskEntry, reason: Detail) -> None:
        task = entry.task
        status = m.TaskStatus.WORKER_DIED
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, m.PayloadKind.NONE, b"", reason, m.Profiling())
        )
        self._owners.append((task.client_id, task.scope_id))

    def reject(self, task_id: bytes, attempt: int, why: str) -> None:
        """A task this worker cannot read: REJECTED, with ``why``."""
        self._results.append(m.TaskResult(task_id, attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", why))
        self._owners.append((b"", b""))  # (a task that cannot be read names no client the worker trusts)

    def confirm_now(self, entry: TaskEntry, detail: Detail) -> None:
        """The cancel (``detail``: the confirm, the task's position in it) says cancelled."""
        confirm, position = detail
        confirm.cancelled[position] = True

    def resolve_cancelled(self, entry: TaskEntry, detail: Detail) -> None:
        self._resolve(entry, True)

    def resolve_not_cancelled(self, entry: TaskEntry, detail: Detail) -> None:
        self._resolve(entry, False)

    def _resolve(self, entry: TaskEntry, cancelled: bool) -> None:
        """The cancels that waited for the runner to end ``entry`` are answered: a task is cancelled once, so
        the first says ``cancelled`` and a repeated one reads as one of a task already gone. A confirm goes
        once every task of it is answered."""
        for confirm, position in entry.confirms or ():
            confirm.cancelled[position] = cancelled
            cancelled = False
            confirm.unresolved -= 1
            if confirm.unresolved == 0:
                self._messages.append(m.TaskCancelConfirm(confirm.task_ids, confirm.cancelled))
        entry.confirms = None

    def tell_waiting(self, entry: TaskEntry, detail: Detail) -> None:
        entry.waiting = True  # (a Hello said again names it waiting)
        self._wait(entry.task.task_id, True)

    def tell_resumed(self, entry: TaskEntry, detail: Detail) -> None:
        entry.waiting = False
        self._wait(entry.task.task_id, False)

    def _wait(self, task_id: bytes, waiting: bool) -> None:
        """A wait that began and ended since the last send is no news to the scheduler."""
        waits = self._waits
        if waits.get(task_id, waiting) != waiting:
            del waits[task_id]
        else:
            waits[task_id] = waiting

    def held(self) -> List[m.HeldTask]:
        """The tasks whose results wait here, as a Hello said again names them (those of no client left out). The
        waits not told yet are dropped: that Hello says which tasks wait."""
        self._waits.clear()
        return [
            m.HeldTask(result.task_id, client_id, scope_id, result.attempt)
            for result, (client_id, scope_id) in zip(self._results, self._owners, strict=True)
            if client_id
        ]

    def message(self, message: Any) -> None:
        """A cancel confirm, a balance response or a `WorkerCallResult`."""
        self._messages.append(message)

    # ------------------------------------------------------------------------- when

    @property
    def pending(self) -> bool:
        return bool(self._results or self._messages or self._waits)

    def may_hold(self, now: float, more_tasks_here: bool) -> bool:
        """Whether what is collected (only results) may wait, and note until when."""
        if (
            self._messages
            or self._waits
            or not more_tasks_here
            or self._batch_seconds <= 0
            or len(self._results) >= RESULT_BATCH_SIZE
            or now >= self.send_by
        ):
            return False
        if self.send_by == math.inf:
            self.send_by = now + self._batch_seconds
        return True

    def send(self, out: List[Any], max_message_size: int = 0) -> None:
        """Everything collected: the results first, then the other messages. The results leave in as many
        batches as the scheduler's ``max_message_size`` needs (0: it states none); a result that cannot fit in
        any (its exception too large) leaves as a failure that says so."""
        if self._results:
            budget = message_budget(max_message_size)
            runs, too_large = batches(self._results, result_size, budget, len(self._results))
            out.extend(SendToScheduler(m.TaskResultBatch(run)) for run in runs)
            if too_large:
                out.append(SendToScheduler(m.TaskResultBatch([_failed(*each, max_message_size) for each in too_large])))
            self._results = []
            self._owners = []
        if self._waits:
            waits, self._waits = self._waits, {}
            out.append(SendToScheduler(m.WaitingTasks(list(waits), list(waits.values()))))
        if self._messages:
            out.extend(SendToScheduler(message) for message in self._messages)
            self._messages = []
        self.send_by = math.inf


def _failed(result: m.TaskResult, size: int, max_message_size: int) -> m.TaskResult:
    """In place of a result too large for any message: a failure that says so."""
    what = f"the {'result' if result.status == m.TaskStatus.SUCCESS else 'exception'} of task {result.task_id.hex()}"
    why = too_large_for(what, size, max_message_size, "scheduler", "scaler_scheduler --max-message-size")
    return m.TaskResult(result.task_id, result.attempt, m.TaskStatus.FAILED, m.PayloadKind.NONE, b"", why)


def add_output(out: List[Any], output: m.TaskOutput, max_message_size: int) -> None:
    """What a task printed, in the `TaskOutputBatch` that ``out`` ends with while it fits in a message the
    scheduler takes, else in a new one; a text too large for any is cut into pieces that fit."""
    budget = message_budget(max_message_size)
    piece = budget // 4 - len(output.task_id) - len(output.client_id)  # a character takes 4 bytes at most
    texts = [output.text] if output_size(output) <= budget else [
        output.text[start : start + piece] for start in range(0, len(output.text), piece)
    ]  # fmt: skip
    for text in texts:
        each = m.TaskOutput(output.task_id, output.client_id, output.stream, text) if len(texts) > 1 else output
        last = out[-1].message if out and type(out[-1]) is SendToScheduler else None
        if type(last) is m.TaskOutputBatch and sum(map(output_size, last.outputs)) + output_size(each) <= budget:
            last.outputs.append(each)  # one batch per message, while it fits
        else:
            out.append(SendToScheduler(m.TaskOutputBatch([each])))


def profile(profiling: Optional[Tuple[float, float, int]]) -> m.Profiling:
    """A runner's (duration seconds, CPU seconds, peak memory bytes), or None, as a `Profiling`."""
    return m.Profiling(*profiling) if profiling else m.Profiling()


def timeout_error(task: m.Task) -> TaskTimeoutError:
    return TaskTimeoutError(f"task {task.task_id.hex()} exceeded its timeout of {task.timeout_seconds:g} seconds")
