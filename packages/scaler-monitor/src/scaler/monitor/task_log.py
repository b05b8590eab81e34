"""What `scaler_ui` shows of single tasks, from the runs the snapshots carry (protocol 1.8; no I/O).

Each worker's heartbeat in a snapshot carries the runs that ended since the last snapshot and the runs going on
(`scaler.protocol.task_runs`); the log keeps them as they came, in columns, placed on this process's clock as the
snapshot arrives (`Arrival`): a record is made only of what a page reads. It keeps:

- the last `KEPT_RUNS` ended runs (`arrivals`), searched by function, state and task ID (`search`, the page's task
  table and ``/tasks.json``) and drawn as the task stream (`window`: those of the last minutes);
- the runs going on (`current`), the runs that came with the last snapshot (`arrived`, which the page adds to its
  stream), and per function the work in flight (`progress`): what ended since the function's work began, what
  runs now, and what still waits (what its clients say they have not had back, less what runs).
"""

from __future__ import annotations

import collections
from typing import Any, Deque, Dict, List, Optional, Set

from scaler.protocol import messages as m
from scaler.protocol.task_runs import Arrival

KEPT_RUNS = 100_000
ARRIVED_SHOWN = 1_000  # the runs of one snapshot sent to the page; past that, an even sample of them
WINDOW_SECONDS = 600.0  # of the task stream a page gets when it opens
WINDOW_RUNS = 20_000  # the most runs it gets then
SEARCH_LIMIT = 200
IDLE_SECONDS = 60.0  # a function whose work ended that long ago leaves the progress bars


class _Progress:
    __slots__ = ("done", "failed", "last_active")

    def __init__(self, now: float) -> None:
        self.done = 0
        self.failed = 0
        self.last_active = now


class TaskLog:
    def __init__(self, kept_runs: int = KEPT_RUNS) -> None:
        self._kept_runs = kept_runs
        self.arrivals: Deque[Arrival] = collections.deque()  # ended runs, oldest first
        self.kept = 0  # runs in arrivals
        self.current: List[Arrival] = []
        self.arrived: List[Arrival] = []
        self.ended_total = 0  # ended runs seen since scaler_ui started
        self._progress: Dict[str, _Progress] = {}
        self._in_flight: Dict[str, int] = {}  # function -> tasks its clients have not had back
        self._running: Dict[str, int] = {}  # function -> its runs going on

    def on_snapshot(self, snapshot: m.StateSnapshot, now: float) -> None:
        """Take the runs of ``snapshot``, received at ``now`` (seconds since the epoch)."""
        beats = [(worker.worker_id, worker.heartbeat) for worker in snapshot.workers]
        self.arrived = [Arrival(beat.ended_runs, now, worker) for worker, beat in beats if beat.ended_runs.task_ids]
        self.current = [
            Arrival(beat.current_runs, now, worker, ended=False) for worker, beat in beats if beat.current_runs.task_ids
        ]
        arrived_runs = sum(len(arrival) for arrival in self.arrived)
        self.arrivals.extend(self.arrived)
        self.kept += arrived_runs
        self.ended_total += arrived_runs
        self._trim()
        in_flight: Dict[str, int] = collections.Counter()
        for client in snapshot.client_snapshots:
            for counter in client.heartbeat.functions:
                in_flight[counter.name] += counter.value
        self._in_flight = dict(in_flight)
        self._running = _per_function(self.current)
        self._count(now)

    def _trim(self) -> None:
        """Drop the oldest runs past `KEPT_RUNS`."""
        arrivals = self.arrivals
        while self.kept > self._kept_runs:
            oldest = arrivals[0]
            excess = self.kept - self._kept_runs
            if len(oldest) <= excess:
                arrivals.popleft()
                self.kept -= len(oldest)
            else:
                oldest.start += excess
                self.kept -= excess

    def _count(self, now: float) -> None:
        progress = self._progress

        def entry(name: str) -> _Progress:
            found = progress.get(name)
            if found is None:
                found = progress[name] = _Progress(now)
            found.last_active = now
            return found

        for name, count in _per_function(self.arrived).items():
            entry(name).done += count
        for arrival in self.arrived:
            runs = arrival.runs
            for i in arrival.failures:
                entry(runs.function_names[runs.functions[i]]).failed += 1
        for name in [*self._in_flight, *self._running]:
            entry(name)
        for name in [name for name, found in progress.items() if now - found.last_active > IDLE_SECONDS]:
            del progress[name]  # its work ended a while ago: its next work starts a new bar

    def progress(self) -> List[Dict[str, Any]]:
        """Per function with work in flight or lately done, the most work first: done (failed among them),
        running, waiting."""
        rows: List[Dict[str, Any]] = []
        for name, entry in self._progress.items():
            runs = self._running.get(name, 0)
            waiting = max(0, self._in_flight.get(name, 0) - runs)
            if entry.done or runs or waiting:
                rows.append({"function": name, "done": entry.done, "failed": entry.failed, "running": runs,
                             "waiting": waiting})  # fmt: skip
        rows.sort(key=lambda row: -(row["done"] + row["running"] + row["waiting"]))
        return rows

    def window(self, now: float, seconds: float = WINDOW_SECONDS) -> List[Arrival]:
        """The ended runs that arrived in the last ``seconds``, oldest first."""
        found: List[Arrival] = []
        for arrival in reversed(self.arrivals):
            if arrival.received_at < now - seconds:
                break
            found.append(arrival)
        found.reverse()
        return found

    def newest_first(self) -> List[Arrival]:
        """The runs going on, then the ended runs kept, newest first (a copy, to search outside any lock)."""
        return [*self.current, *reversed(self.arrivals)]


def search(
    arrivals: List[Arrival], function: str = "", state: str = "", task_id: str = "", limit: int = SEARCH_LIMIT
) -> Dict[str, Any]:
    """The runs of ``arrivals`` (newest first: `TaskLog.newest_first`) whose function contains ``function`` (any
    case), whose state is ``state`` and whose task ID starts with ``task_id``: how many match, and the first
    ``limit`` as records (newest first)."""
    needle, task_id = function.lower(), task_id.lower()
    matched = 0
    found: List[Any] = []
    for arrival in arrivals:
        runs = arrival.runs
        allowed: Optional[Set[int]] = None
        if needle:
            allowed = {place for place, name in enumerate(runs.function_names) if needle in name.lower()}
            if not allowed:
                continue
        if not (allowed is not None or state or task_id):  # no filter: the newest runs, without looking at them
            matched += len(arrival)
            taken = range(len(runs.task_ids) - 1, max(arrival.start, len(runs.task_ids) - limit + len(found)) - 1, -1)
            found.extend(arrival.records(taken))
            continue
        picked: List[int] = []
        for i in range(len(runs.task_ids) - 1, arrival.start - 1, -1):
            if allowed is not None and runs.functions[i] not in allowed:
                continue
            if state and arrival.state(i) != state:
                continue
            if task_id and not runs.task_ids[i].hex().startswith(task_id):
                continue
            matched += 1
            if len(found) + len(picked) < limit:
                picked.append(i)
        found.extend(arrival.records(picked))
    return {"matched": matched, "tasks": [run._asdict() for run in found]}


def _per_function(arrivals: List[Arrival]) -> Dict[str, int]:
    """How many runs of each function ``arrivals`` hold."""
    counts: Dict[str, int] = collections.Counter()
    for arrival in arrivals:
        names = arrival.runs.function_names
        for place, count in collections.Counter(arrival.runs.functions[arrival.start :]).items():
            counts[names[place]] += count
    return dict(counts)
