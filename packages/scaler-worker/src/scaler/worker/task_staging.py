"""The tasks a worker holds that its runner has not taken: the queue in run order, and the few staged ahead.

A task comes QUEUED (`task_queue.TaskQueue`: the highest priority first, ...). The next few in run order are
STAGED ahead (`stage_ahead`, up to ``prefetch_tasks``): what they need from object storage is kept, and
fetched while other tasks run (`storage_requests`). The runner takes the next task (`next_ready`) once
everything it needs is there, in strict priority order: while the best task waits for its data, none other
is taken. A staged task whose fetch failed fails (`fail_needing`). Every change of a task's state goes
through the worker core's lifecycle table (``apply``: `worker_core.WorkerCore._apply`); the actions of the
table that take a task out of the queue are `dequeue` and `dequeue_staged`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.worker.storage_requests import Fetch, StorageRequests, read_scope
from scaler.worker.task_lifecycle import Detail, TaskEntry, TaskEvent, TaskState
from scaler.worker.task_queue import TaskQueue
from scaler.worker.task_runner import ReadyTask, TaskRunner

_QUEUED = TaskState.QUEUED
_TASK_ARGUMENT = m.ArgumentKind.TASK
_E = TaskEvent


class TaskStaging:
    def __init__(
        self,
        storage: StorageRequests,
        prefetch_tasks: int,
        apply: Callable[[TaskEntry, TaskEvent, Detail], None],
    ) -> None:
        self.queue = TaskQueue()  # QUEUED and STAGED tasks
        self._staged: Dict[bytes, TaskEntry] = {}
        self._storage = storage
        self._prefetch = max(1, prefetch_tasks)
        self._apply = apply

    def next_ready(
        self, runner: TaskRunner, newest_first: bool, accept: Optional[Callable[[m.Task], bool]] = None
    ) -> Optional[ReadyTask]:
        """`RunnerOwner.next_ready`: the next task in run order (the first ``accept`` accepts), with what it needs,
        now the runner's; None if there is none, or it waits for what it needs."""
        queue = self.queue
        storage = self._storage
        if storage.waiting_for_room:  # back-pressure: results wait for room in storage, make no more
            return None
        while True:
            if accept is None:
                entry = queue.first(newest_first)
            else:
                entry = next((each for each in queue.in_run_order(newest_first) if accept(each.task)), None)
            if entry is None:
                return None
            if entry.state is _QUEUED:
                lacks = self._stage(entry, runner)
                if lacks is None:
                    continue  # it failed while staging
            else:
                lacks = storage.request_missing(entry, runner)
            if lacks:
                return None  # strict priority order: wait for what the best task needs
            ready = storage.ready_task(entry)
            self._apply(entry, _E.RUN, None)
            return ready

    def stage_ahead(self, runner: TaskRunner) -> None:
        """Stage the next few tasks in run order, so that their data is fetched while others run."""
        missing = self._prefetch - len(self._staged)
        if missing <= 0 or len(self.queue) <= len(self._staged):
            return
        ahead = []
        for entry in self.queue.in_run_order(runner.newest_first):
            if entry.state is _QUEUED:
                ahead.append(entry)
                if len(ahead) == missing:
                    break
        for entry in ahead:
            self._stage(entry, runner)

    def fail_needing(self, failed: Dict[Fetch, Exception], runner: TaskRunner) -> None:
        """The staged tasks that need an object whose fetch failed fail, each with that fetch's error."""
        for entry in list(self._staged.values()):
            scope = read_scope(entry.task)
            for object_id, _ in self._storage.missing(entry, runner):
                error = failed.get((scope, object_id))
                if error is not None:
                    self._apply(entry, _E.FAIL, (error, None))
                    break

    def dequeue(self, entry: TaskEntry, detail: Detail) -> None:
        self.queue.remove(entry)

    def dequeue_staged(self, entry: TaskEntry, detail: Detail) -> None:
        self.queue.remove(entry)
        del self._staged[entry.task.task_id]
        self._storage.release(entry)

    def push_front(self, entries: List[TaskEntry]) -> None:
        """Tasks the runner gave back unstarted: at the head of their priority, in their order."""
        self.queue.push_front(entries)

    def _stage(self, entry: TaskEntry, runner: TaskRunner) -> Optional[bool]:
        """Keep what ``entry`` will need and fetch what it lacks: whether it lacks anything; None if it cannot
        run (it failed)."""
        for argument in entry.task.arguments:
            if argument.kind == _TASK_ARGUMENT:
                error = ProtocolError(
                    f"argument {argument.name or '(positional)'} refers to task {argument.data.hex()}: "
                    "the scheduler must replace task references before assigning a task to a worker"
                )
                self._apply(entry, _E.FAIL, (error, None))
                return None
        self._apply(entry, _E.STAGE, None)
        self._staged[entry.task.task_id] = entry
        self._storage.hold(entry)
        return self._storage.request_missing(entry, runner)
