"""The worker's queue: the tasks it holds that the runner has not taken, in the order they would run.

The highest priority first; within a priority, first come first served, except while tasks wait for the
tasks they submitted (the runner says so: `TaskRunner.newest_first`): then the newest task runs first (most
likely a child of a waiting task: depth first, so few tasks wait at once and they resume soon). A balance
request gives back the tasks that would run last. Tasks the runner gives back unstarted go to the head of
their priority, in their order.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Dict, Iterator, List, Optional

from scaler.worker.task_lifecycle import TaskEntry


class TaskQueue:
    __slots__ = ("_by_priority", "_priorities", "_count")

    def __init__(self) -> None:
        self._by_priority: Dict[int, Dict[bytes, TaskEntry]] = {}  # oldest first within a priority
        self._priorities: List[int] = []  # the keys of _by_priority, ascending
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def best_priority(self) -> Optional[int]:
        return self._priorities[-1] if self._priorities else None

    def push(self, entry: TaskEntry) -> None:
        task = entry.task
        same_priority = self._by_priority.get(task.priority)
        if same_priority is None:
            same_priority = self._by_priority[task.priority] = {}
            bisect.insort(self._priorities, task.priority)
        same_priority[task.task_id] = entry
        self._count += 1

    def push_front(self, entries: List[TaskEntry]) -> None:
        """Put tasks back at the head of their priority, in their order."""
        by_priority: Dict[int, List[TaskEntry]] = defaultdict(list)
        for entry in entries:
            by_priority[entry.task.priority].append(entry)
        for priority, group in by_priority.items():
            queued = {entry.task.task_id: entry for entry in group}
            later = self._by_priority.get(priority)
            if later is None:
                bisect.insort(self._priorities, priority)
            else:
                queued.update(later)
            self._by_priority[priority] = queued
        self._count += len(entries)

    def remove(self, entry: TaskEntry) -> None:
        task = entry.task
        same_priority = self._by_priority[task.priority]
        del same_priority[task.task_id]
        if not same_priority:
            del self._by_priority[task.priority]
            self._priorities.remove(task.priority)
        self._count -= 1

    def first(self, newest_first: bool) -> Optional[TaskEntry]:
        """The task that would run next."""
        if not self._priorities:
            return None
        same_priority = self._by_priority[self._priorities[-1]].values()
        return next(reversed(same_priority)) if newest_first else next(iter(same_priority))

    def in_run_order(self, newest_first: bool) -> Iterator[TaskEntry]:
        for priority in reversed(self._priorities):
            entries = self._by_priority[priority].values()
            yield from (reversed(entries) if newest_first else entries)

    def last(self, count: int, newest_first: bool) -> List[TaskEntry]:
        """Up to ``count`` tasks that would run last, the very last first."""
        order = list(self.in_run_order(newest_first))
        return order[len(order) - min(count, len(order)) :][::-1] if count > 0 else []
