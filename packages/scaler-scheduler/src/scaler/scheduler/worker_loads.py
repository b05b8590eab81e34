"""The workers by load: who takes the next task, and who holds the most, without a scan of every worker.

`WorkerLoads` files each worker under its load (`Worker.load`: the tasks it holds less those that wait) in
buckets, one per load, each in the order its workers came into it. The next task goes to the first worker of
the least loaded bucket with room (and the capabilities the task needs), which then moves to the end of the
next bucket: workers of equal load take tasks in turn. Workers with room are filed by their set of
capabilities, apart from the full ones; every worker but a draining one is also filed in one set of buckets
for balancing, read from the most loaded down (a draining worker has no room, and gives back all it holds).
So a pick, or a change of a worker's load, costs a few dictionary operations whatever the number of workers;
a worker whose load changed while an event was handled (results, tasks given back, tasks that began to wait)
is filed again once (`touch`, then `refresh` before the next pick).
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Dict, FrozenSet, Iterator, List, Optional, Set

from scaler.scheduler.peers import Worker


class _Buckets:
    """Workers by load: load -> {worker ID: worker} in the order they came in (a bucket emptied stays, for the
    next worker of that load), and a heap of the loads whose bucket may hold workers."""

    __slots__ = ("by_load", "_loads", "_in_heap")

    def __init__(self) -> None:
        self.by_load: Dict[int, Dict[bytes, Worker]] = {}
        self._loads: List[int] = []  # dropped when found empty at the top
        self._in_heap: Set[int] = set()

    def add(self, worker: Worker, load: int) -> None:
        bucket = self.by_load.get(load)
        if bucket is None:
            bucket = self.by_load[load] = {}
        bucket[worker.worker_id] = worker
        if load not in self._in_heap:
            self._in_heap.add(load)
            heapq.heappush(self._loads, load)

    def remove(self, worker: Worker, load: int) -> None:
        del self.by_load[load][worker.worker_id]

    def least(self) -> Optional[int]:
        """The least load of a worker here (None: no worker)."""
        loads, by_load = self._loads, self.by_load
        while loads and not by_load[loads[0]]:
            self._in_heap.discard(heapq.heappop(loads))
        return loads[0] if loads else None


class WorkerLoads:
    """Every connected worker, filed by load (see the module's description)."""

    __slots__ = ("_room", "_balanced", "_eligible", "_touched", "_offered", "total_load", "balanced_count")

    def __init__(self) -> None:
        self._room: Dict[FrozenSet[str], _Buckets] = {}  # by capabilities: the workers with room
        self._balanced = _Buckets()  # every worker but the draining ones
        self._eligible: Dict[Optional[FrozenSet[str]], List[_Buckets]] = {}  # needs -> the room of capable workers
        self._touched: Dict[bytes, Worker] = {}  # workers whose load changed since they were filed
        self._offered: Counter = Counter()  # the sets of capabilities of the workers connected: how many offer each
        self.total_load = 0  # of the workers balanced
        self.balanced_count = 0  # the workers balanced: not draining

    def add(self, worker: Worker) -> None:
        if worker.capabilities not in self._room:
            self._room[worker.capabilities] = _Buckets()
            self._eligible.clear()  # a new set of capabilities: which workers can take what, again
        self._offered[worker.capabilities] += 1
        self._file(worker)

    def remove(self, worker: Worker) -> None:
        self._unfile(worker)
        self._touched.pop(worker.worker_id, None)
        self._offered[worker.capabilities] -= 1
        if not self._offered[worker.capabilities]:
            del self._offered[worker.capabilities]

    def offers(self, needs: FrozenSet[str]) -> bool:
        """Whether a connected worker (with room or not) offers every capability in ``needs``."""
        return any(needs <= capabilities for capabilities in self._offered)

    def drain(self, worker: Worker) -> None:
        """``worker`` takes no new task (capacity 0) and is balanced no more: it gives back all it holds."""
        self._unfile(worker)
        worker.draining = True
        worker.capacity = 0
        self._file(worker)

    def touch(self, worker: Worker) -> None:
        """``worker``'s load changed: it is filed again at the next `refresh`."""
        self._touched[worker.worker_id] = worker

    def refresh(self) -> None:
        if self._touched:
            for worker in self._touched.values():
                self._refile(worker)
            self._touched.clear()

    def took(self, worker: Worker) -> None:
        """``worker`` was given a task (its load is one more): filed again now, for the next pick."""
        self._refile(worker)

    def least_loaded(self, needs: Optional[FrozenSet[str]]) -> Optional[Worker]:
        """The least loaded worker with room that offers every capability in ``needs`` (None: any worker)."""
        candidates = self._eligible.get(needs)
        if candidates is None:
            candidates = self._eligible[needs] = [
                buckets for capabilities, buckets in self._room.items() if needs is None or needs <= capabilities
            ]
        best: Optional[_Buckets] = None
        best_load = 0
        for buckets in candidates:
            load = buckets.least()
            if load is not None and (best is None or load < best_load):
                best, best_load = buckets, load
        if best is None:
            return None
        return next(iter(best.by_load[best_load].values()))

    def idle_count(self) -> int:
        """How many workers balanced hold no task that takes room."""
        return len(self._balanced.by_load.get(0, ()))

    def most_loaded(self) -> Iterator[Worker]:
        """Every worker balanced, the most loaded first (read it only as far as needed)."""
        by_load = self._balanced.by_load
        for load in sorted(by_load, reverse=True):
            yield from list(by_load[load].values())

    def _refile(self, worker: Worker) -> None:
        load = worker.load
        if load != worker.filed_load or (load < worker.capacity) != worker.filed_with_room:
            self._unfile(worker)
            self._file(worker)

    def _file(self, worker: Worker) -> None:
        load = worker.load
        if not worker.draining:
            self._balanced.add(worker, load)
            self.total_load += load
            self.balanced_count += 1
        worker.filed_load = load
        worker.filed_with_room = load < worker.capacity
        if worker.filed_with_room:
            self._room[worker.capabilities].add(worker, load)

    def _unfile(self, worker: Worker) -> None:
        load = worker.filed_load
        if not worker.draining:
            self._balanced.remove(worker, load)
            self.total_load -= load
            self.balanced_count -= 1
        if worker.filed_with_room:
            self._room[worker.capabilities].remove(worker, load)
