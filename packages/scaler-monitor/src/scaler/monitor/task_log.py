"""What `scaler_ui` shows of single tasks, from the runs the snapshots carry (protocol 1.8; no I/O).

Each worker's heartbeat in a snapshot carries the runs that ended since the last snapshot and the runs going on
(`scaler.protocol.task_runs`); the log places them on this process's clock as the snapshot arrives and keeps:

- the last `KEPT_RUNS` ended runs (`runs`), searched by function, state and task ID (`search`, the page's task
  table and ``/tasks.json``) and drawn as the task stream (`window`: those of the last minutes);
- the runs going on (`current`), the runs that arrived with the last snapshot (`arrived`, which the page adds to
  its stream), and per function the work in flight (`progress`): what ended since the function's work began,
  what runs now, and what still waits (what its clients say they have not had back, less what runs).
"""

from __future__ import annotations

import collections
from typing import Any, Deque, Dict, Iterable, List

from scaler.protocol import messages as m
from scaler.protocol.task_runs import TaskRun, records

KEPT_RUNS = 100_000
ARRIVED_SHOWN = 5_000  # the runs of one snapshot sent to the page; past that, the latest ones
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
        self.runs: Deque[TaskRun] = collections.deque(maxlen=kept_runs)
        self.current: List[TaskRun] = []
        self.arrived: List[TaskRun] = []
        self.ended_total = 0  # ended runs seen since scaler_ui started
        self._progress: Dict[str, _Progress] = {}
        self._in_flight: Dict[str, int] = {}  # function -> tasks its clients have not had back

    def on_snapshot(self, snapshot: m.StateSnapshot, now: float) -> None:
        """Take the runs of ``snapshot``, received at ``now`` (seconds since the epoch)."""
        arrived: List[TaskRun] = []
        current: List[TaskRun] = []
        for worker in snapshot.workers:
            beat = worker.heartbeat
            arrived.extend(records(beat.ended_runs, now, worker.worker_id))
            current.extend(records(beat.current_runs, now, worker.worker_id, ended=False))
        arrived.sort(key=lambda run: run.ended)  # type: ignore[arg-type, return-value]
        self.runs.extend(arrived)
        self.ended_total += len(arrived)
        self.arrived = arrived[-ARRIVED_SHOWN:]
        self.current = current
        in_flight: Dict[str, int] = collections.Counter()
        for client in snapshot.client_snapshots:
            for counter in client.heartbeat.functions:
                in_flight[counter.name] += counter.value
        self._in_flight = dict(in_flight)
        self._count(arrived, current, now)

    def _count(self, arrived: Iterable[TaskRun], current: Iterable[TaskRun], now: float) -> None:
        progress = self._progress
        for run in arrived:
            entry = progress.get(run.function) or progress.setdefault(run.function, _Progress(now))
            entry.done += 1
            entry.failed += run.state != "success"
            entry.last_active = now
        for name in [*self._in_flight, *(run.function for run in current)]:
            entry = progress.get(name) or progress.setdefault(name, _Progress(now))
            entry.last_active = now
        for name in [name for name, entry in progress.items() if now - entry.last_active > IDLE_SECONDS]:
            del progress[name]  # its work ended a while ago: its next work starts a new bar

    def progress(self) -> List[Dict[str, Any]]:
        """Per function with work in flight or lately done, the most work first: done (failed among them),
        running, waiting."""
        running: Dict[str, int] = collections.Counter(run.function for run in self.current)
        rows = []
        for name, entry in self._progress.items():
            runs = running.get(name, 0)
            waiting = max(0, self._in_flight.get(name, 0) - runs)
            if not (entry.done or runs or waiting):
                continue
            rows.append({"function": name, "done": entry.done, "failed": entry.failed, "running": runs,
                         "waiting": waiting})  # fmt: skip
        rows.sort(key=lambda row: -(row["done"] + row["running"] + row["waiting"]))
        return rows

    def window(self, now: float, seconds: float = WINDOW_SECONDS, limit: int = WINDOW_RUNS) -> List[TaskRun]:
        """The ended runs of the last ``seconds`` (at most ``limit``, the latest), oldest first."""
        since = now - seconds
        found: List[TaskRun] = []
        for run in reversed(self.runs):
            if len(found) >= limit or (run.ended is not None and run.ended < since):
                break
            found.append(run)
        found.reverse()
        return found

    def search(
        self,
        runs: Iterable[TaskRun],
        function: str = "",
        state: str = "",
        task_id: str = "",
        limit: int = SEARCH_LIMIT,
    ) -> Dict[str, Any]:
        """The runs (newest first, at most ``limit``) whose function contains ``function`` (any case), whose state
        is ``state`` and whose task ID starts with ``task_id``; and how many match in all."""
        function, task_id = function.lower(), task_id.lower()
        matched: List[TaskRun] = []
        count = 0
        for run in runs:
            if function and function not in run.function.lower():
                continue
            if state and run.state != state:
                continue
            if task_id and not run.task_id.startswith(task_id):
                continue
            count += 1
            if len(matched) < limit:
                matched.append(run)
        return {"matched": count, "tasks": [run._asdict() for run in matched]}

    def newest_first(self) -> List[TaskRun]:
        """The runs going on, then every ended run kept, newest first (a copy, to search outside any lock)."""
        return [*self.current, *reversed(self.runs)]
