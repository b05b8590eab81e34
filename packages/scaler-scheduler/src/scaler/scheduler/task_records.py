"""What the scheduler holds of each task, and every change of a task's state (the base of `TaskRouting`).

`TaskRecords` keeps a record per task the scheduler holds (`TaskRecord`), the queues of tasks waiting for a
worker (a priority heap, and one per set of capabilities that tasks need), the workers by load, and
what is kept for clients that will send their tasks again (`kept_results.py`, and the ADOPTED tasks no client
claimed yet). Every event a task receives goes through `_step`, which looks the pair up in
`task_lifecycle.TASK_LIFECYCLE` and carries out the actions of the answer, which are here; what is sent is
gathered in the event's `Outbox`. How tasks are routed (the handlers of the peers' messages, the dispatch,
balancing, expiry) is `task_routing.TaskRouting`'s.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from scaler.protocol.held_tasks import task_term
from scaler.scheduler.graph_record import whole_result
from scaler.scheduler.kept_results import KeptResults
from scaler.scheduler.monitor_events import MonitorEvents
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client, Worker
from scaler.scheduler.task_lifecycle import TASK_LIFECYCLE, TaskAction, TaskEvent, TaskState
from scaler.scheduler.worker_loads import WorkerLoads

_QUEUED = TaskState.QUEUED
DEFAULT_CLAIM_SECONDS = 60.0  # how long a task a worker said it held waits for its client to send it again


class TaskRecord:
    __slots__ = (
        "task", "state", "worker_id", "story", "queue_seq", "needs", "deaths", "failures", "submitted", "queued_at",
    )  # fmt: skip

    def __init__(self, task: Any, needs: Optional[FrozenSet[str]], submitted: bool, queued_at: float) -> None:
        self.task = task  # a routed.RoutedTask (or an m.Task, from the graph layer)
        self.submitted = submitted  # its client sent it (not a graph node): queued, it counts against the quota
        self.queued_at = queued_at  # when it came, for its runs (Task.queued_seconds)
        self.state = TaskState.QUEUED
        self.worker_id: Optional[bytes] = None
        self.story = 0  # its last events (`Lifecycle.move`), for the error of a missing transition
        self.queue_seq = 0
        self.needs = needs  # capability names a worker must have, or None
        self.deaths = 0  # times its processor or worker died while holding it
        self.failures = 0  # times it raised and was retried


_Action = Callable[[TaskRecord, Outbox, Any], None]


class TaskRecords:
    def __init__(
        self, workers: Dict[bytes, Worker], clients: Dict[bytes, Client], claim_seconds: float = DEFAULT_CLAIM_SECONDS
    ) -> None:
        self._workers = workers  # shared with the core, which adds and removes peers
        self._clients = clients
        self.kept = KeptResults()  # results kept for clients that will send their tasks again
        self._claim_seconds = claim_seconds
        self._unclaimed: Dict[bytes, float] = {}  # ADOPTED task -> when it is withdrawn if no client claimed it
        self._hold_dispatch_until = 0.0  # a scheduler that restarted waits for its workers to say what they hold
        self._loads = WorkerLoads()
        self._tasks: Dict[bytes, TaskRecord] = {}
        self._queue: List[Tuple[int, int, bytes]] = []  # (-priority, seq, task_id), lazily pruned
        self._capability_queues: Dict[FrozenSet[str], List[Tuple[int, int, bytes]]] = {}
        self._seq = itertools.count()
        self._changed = False  # tasks were queued or room made since the last dispatch
        self.state_counts: Counter = Counter()
        self._queued_needing: Counter = Counter()  # needs -> the tasks queued here that need them (not None)
        self.recording = False  # workers record task runs: a task sent says how long it waited here
        self.events = MonitorEvents()  # the core's, where it notes what monitors show
        self._now = 0.0  # of the dispatch under way
        carry_out: Dict[TaskAction, _Action] = {
            TaskAction.SEND_TO_WORKER: self._send_to_worker,
            TaskAction.REQUEUE: self._requeue,
            TaskAction.SEND_CANCEL_TO_WORKER: self._send_cancel_to_worker,
            TaskAction.FORWARD_RESULT: self._forward_result,
            TaskAction.CONFIRM_CANCELLED: self._confirm_cancelled,
            TaskAction.CONFIRM_NOT_CANCELLED: self._confirm_not_cancelled,
            TaskAction.FINISH: self._finish,
            TaskAction.NOTE_HELD: self._note_held,
            TaskAction.CANCEL_ON_REPORTER: self._cancel_on_reporter,
            TaskAction.TAKE_TASK: self._take_task,
            TaskAction.KEEP_RESULT: self._keep_result,
        }
        self._plans = TASK_LIFECYCLE.plans(carry_out.__getitem__)  # the table with the actions bound to this object

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    def knows(self, task_id: bytes) -> bool:
        return task_id in self._tasks

    def knows_for_another(self, task_id: bytes, client_id: bytes) -> bool:
        """Whether the scheduler holds a task with this ID of another client than ``client_id``."""
        record = self._tasks.get(task_id)
        return record is not None and record.task.client_id != client_id

    def keep_for(self, client_id: bytes, results: List[Any], now: float) -> None:
        """Results to keep for the tasks the client sends again (graph nodes not released yet)."""
        for result in results:
            self.kept.keep(client_id, result, now + self._claim_seconds)

    def holder(self, task_id: bytes) -> Optional[Tuple[bytes, bytes]]:
        """The worker that holds the task now, and the task's scope (None: no worker holds it, or only a worker's
        word says so: an ADOPTED task is proof of nothing until its client sends it again)."""
        record = self._tasks.get(task_id)
        if record is None or record.worker_id is None or record.state is TaskState.ADOPTED:
            return None
        return record.worker_id, record.task.scope_id or record.task.client_id

    def awaited(self, task_id: bytes) -> bool:
        """Whether a worker may come to hold the task soon: queued here, or a worker's word says it holds it."""
        record = self._tasks.get(task_id)
        return record is not None and (record.worker_id is None or record.state is TaskState.ADOPTED)

    def _enqueue(self, record: TaskRecord) -> None:
        record.queue_seq = seq = next(self._seq)
        queue = self._queue
        if record.needs is not None:
            queue = self._capability_queues.setdefault(record.needs, [])
        heapq.heappush(queue, (-record.task.priority, seq, record.task.task_id))
        self._changed = True

    # ----------------------------------------------------------------- the lifecycle

    def _step(self, record: TaskRecord, event: TaskEvent, out: Outbox, result: Any = None) -> None:
        """``event`` reaches the task: its next state and actions, from the table."""
        old = record.state
        plan = TASK_LIFECYCLE.move(self._plans, record, event, record.task.task_id)  # a missing pair raises
        new = plan.next_state
        counts = self.state_counts
        counts[old] -= 1
        counts[new] += 1
        if (old is _QUEUED) is not (new is _QUEUED):
            change = 1 if new is _QUEUED else -1
            if record.needs is not None:
                self._queued_needing[record.needs] += change
            if record.submitted:
                client = self._clients.get(record.task.client_id)
                if client is not None:
                    client.queued += change
        for action in plan.actions:
            action(record, out, result)

    # ----------------------------------------------------------------- actions (TaskAction)

    def _send_to_worker(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        task = record.task
        task.attempt += 1
        if self.recording:
            task.queued_seconds = self._now - record.queued_at
        worker_id: bytes = record.worker_id  # type: ignore[assignment]
        worker = self._workers[worker_id]
        batch = out.tasks[worker_id]
        if not batch:  # the first task of this event for that worker: a new TaskBatch
            worker.batch_sequence += 1
            out.sequences[worker_id] = worker.batch_sequence
        worker.tasks[task.task_id] = worker.batch_sequence
        worker.digest ^= task_term(task.task_id)
        batch.append(task)

    def _requeue(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        worker = self._workers.get(record.worker_id)  # type: ignore[arg-type]
        if worker is not None:
            self._release(worker, record.task.task_id)
        record.worker_id = None
        self._enqueue(record)

    def _send_cancel_to_worker(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        out.cancels[record.worker_id].append(record.task.task_id)  # type: ignore[index]

    def _forward_result(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        client_id = record.task.client_id
        if client_id in self._clients:
            out.results[client_id].append(result)

    def _confirm_cancelled(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        if record.task.client_id in self._clients:
            out.confirm(record.task.client_id, record.task.task_id, True)

    def _confirm_not_cancelled(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        if record.task.client_id in self._clients:
            out.confirm(record.task.client_id, record.task.task_id, False)

    def _finish(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        task_id = record.task.task_id
        del self._tasks[task_id]
        if self._unclaimed:
            self._unclaimed.pop(task_id, None)
        client = self._clients.get(record.task.client_id)
        if client is not None:
            client.tasks.discard(task_id)
        if record.worker_id is not None:
            worker = self._workers.get(record.worker_id)
            if worker is not None:
                self._release(worker, task_id)
                self._changed = True  # room on that worker

    def _note_held(self, record: TaskRecord, out: Outbox, detail: Any) -> None:
        """A worker that said Hello again holds this task, queued here: it is that worker's, at its attempt."""
        worker, held = detail
        record.worker_id = worker.worker_id
        record.queue_seq = -1  # its entry in the queue is stale: the dispatch passes it by
        record.task.attempt = held.attempt
        self._hold(worker, record.task.task_id, held.waiting)

    def _cancel_on_reporter(self, record: TaskRecord, out: Outbox, detail: Any) -> None:
        worker, held = detail
        out.cancels[worker.worker_id].append(held.task_id)

    def _take_task(self, record: TaskRecord, out: Outbox, detail: Any) -> None:
        """Its client sent the task again: its copy is the task now (at the attempt its worker holds)."""
        task, scope, submitted = detail
        task_id = task.task_id
        task.client_id = record.task.client_id
        task.attempt = record.task.attempt
        if task.scope_id != scope:
            task.scope_id = scope
        record.task = task
        record.submitted = submitted
        if task.capabilities:
            record.needs = frozenset(c.name for c in task.capabilities)
        del self._unclaimed[task_id]
        client = self._clients.get(task.client_id)
        if client is not None:
            client.tasks.add(task_id)

    def _keep_result(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        """The result of a task its client has not sent again yet: kept for it (`kept_results.py`)."""
        task_id = record.task.task_id
        self.kept.keep(record.task.client_id, whole_result(result), self._unclaimed.pop(task_id, self._now))

    def _hold(self, worker: Worker, task_id: bytes, waiting: bool) -> None:
        """``worker`` holds the task, as its Hello said (not sent in a batch: sequence 0)."""
        worker.tasks[task_id] = 0
        worker.digest ^= task_term(task_id)
        if waiting:
            worker.waiting.add(task_id)

    def _release(self, worker: Worker, task_id: bytes) -> None:
        """``worker`` no longer holds the task."""
        if worker.tasks.pop(task_id, None) is not None:
            worker.digest ^= task_term(task_id)
        if worker.waiting:
            worker.waiting.discard(task_id)
        self._loads.touch(worker)
