"""The task runs the scheduler gathers for monitors and performance reports (protocol 1.8; docs/monitoring.md).

Workers record their task runs only while the scheduler asks (`recording`: a monitor subscribes, or a client
has a performance report open); the ask rides on every heartbeat echo, and when it changes every worker is told
at once (`changed`, `announcements`), so a report misses no task that runs after it opened. A worker's heartbeat
brings the runs that ended since its last one, and those going on (`on_worker_heartbeat`):

- for monitors, the ended runs of each worker wait for the next snapshot, which carries them in the worker's
  heartbeat, with the runs going on as of the snapshot (`fill_snapshot`);
- for reports, each ended run goes to the client whose report it belongs to: a run of that client's tasks, or
  of the tasks of a Client made inside its tasks, however deep (the client such a Client stands for, its
  scope, `Hello.madeIn`), in that client's next heartbeat echo (`client_echo`).

A run's times are durations; the runs of several heartbeats are placed on the scheduler's clock when they
arrive and told again as durations when they leave (`task_runs.RunColumns`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Dict, Iterable, List

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import show
from scaler.protocol.task_runs import RunColumns, check
from scaler.scheduler.scheduler_events import Send

RUNS_PER_SNAPSHOT = 100_000  # of one worker: past that, its runs wait for the next snapshot (a monitor keeps fewer)

logger = logging.getLogger(__name__)

_NO_RUNS = m.TaskRuns()


class TaskStream:
    def __init__(self, scope_of: Callable[[bytes], bytes]) -> None:
        self._scope_of = scope_of  # the client a client stands for (a Client made in a task: its task's client's)
        self.watching = False  # a monitor subscribes
        self._told = (False, False)  # what workers and clients were told last: (record, watching)
        self._for_snapshot: Dict[bytes, RunColumns] = {}  # worker ID -> its runs ended since the last snapshot
        self._heard: Dict[bytes, float] = {}  # worker ID -> when its last heartbeat came (its runs going on)
        self._reports: Dict[bytes, RunColumns] = {}  # client ID -> the runs of its report, for its next echo

    @property
    def recording(self) -> bool:
        """Whether workers are to record task runs."""
        return self.watching or bool(self._reports)

    def changed(self) -> bool:
        """Whether ``recording`` or ``watching`` changed since the last call (then every peer is told at once)."""
        now = (self.recording, self.watching)
        changed, self._told = now != self._told, now
        return changed

    def announcements(self, worker_ids: Iterable[bytes], client_ids: Iterable[bytes]) -> List[Send]:
        """The echoes that tell every worker whether to record and every client whether a monitor watches."""
        sends = [Send(worker_id, m.WorkerHeartbeatEcho(record_tasks=self.recording)) for worker_id in worker_ids]
        return sends + [Send(client_id, m.ClientHeartbeatEcho(self.watching)) for client_id in client_ids]

    # ----------------------------------------------------------------- what the peers say

    def on_client_heartbeat(self, client_id: bytes, heartbeat: m.ClientHeartbeat) -> None:
        if heartbeat.report_tasks and client_id not in self._reports:
            self._reports[client_id] = RunColumns()
        elif not heartbeat.report_tasks and client_id in self._reports:
            self._end_report(client_id)

    def client_echo(self, client_id: bytes, now: float) -> m.ClientHeartbeatEcho:
        """The echo of a client's heartbeat: whether a monitor watches, and the runs of its report."""
        runs = self._reports.get(client_id)
        return m.ClientHeartbeatEcho(self.watching, runs.take(now) if runs else _NO_RUNS)

    def on_worker_heartbeat(self, worker_id: bytes, heartbeat: m.WorkerHeartbeat, now: float) -> None:
        """Take the runs of a worker's heartbeat (kept as the worker's last heartbeat without its ended runs)."""
        ended, current = heartbeat.ended_runs, heartbeat.current_runs
        heartbeat.ended_runs = _NO_RUNS
        try:
            check(ended, ended=True)
            check(current, ended=False)
        except ProtocolError as error:
            logger.warning(f"Scheduler: dropped the task runs of worker {show(worker_id)}: {error}")
            heartbeat.current_runs = _NO_RUNS
            return
        self._heard[worker_id] = now
        if not ended.task_ids:
            return
        if self.watching:
            gathered = self._for_snapshot.setdefault(worker_id, RunColumns())
            if len(gathered) < RUNS_PER_SNAPSHOT:
                gathered.add(ended, now, worker_id)
        if self._reports:
            self._route(worker_id, ended, now)

    def _route(self, worker_id: bytes, ended: m.TaskRuns, now: float) -> None:
        """Each ended run to the report of the client its task's client stands for, if that one reports."""
        reports = self._reports
        by_client = [self._scope_of(client_id) for client_id in ended.client_ids]
        report_of = [report if report in reports else None for report in by_client]
        if len(set(report_of)) == 1:  # one client's tasks (the usual case): all of them, or none
            if report_of[0] is not None:
                reports[report_of[0]].add(ended, now, worker_id)
            return
        by_report: Dict[bytes, List[int]] = {}
        for index, client in enumerate(ended.clients):
            report = report_of[client]
            if report is not None:
                by_report.setdefault(report, []).append(index)
        for report, indexes in by_report.items():
            reports[report].add(ended, now, worker_id, indexes)

    def forget_worker(self, worker_id: bytes) -> None:
        self._heard.pop(worker_id, None)

    def forget_client(self, client_id: bytes) -> None:
        if client_id in self._reports:
            self._end_report(client_id)

    def _end_report(self, client_id: bytes) -> None:
        del self._reports[client_id]

    # ----------------------------------------------------------------- the snapshot

    def fill_snapshot(self, snapshot: m.StateSnapshot, now: float) -> None:
        """Each worker's heartbeat in ``snapshot`` with the runs ended since the last snapshot, and its runs going
        on as of ``now``."""
        gathered, self._for_snapshot = self._for_snapshot, {}
        if not self.watching:
            return
        for worker in snapshot.workers:
            runs = gathered.get(worker.worker_id)
            current = worker.heartbeat.current_runs
            if runs is None and not current.task_ids:
                continue
            since = now - self._heard.get(worker.worker_id, now)
            worker.heartbeat = dataclasses.replace(
                worker.heartbeat,
                ended_runs=runs.take(now, with_workers=False) if runs is not None else _NO_RUNS,
                current_runs=dataclasses.replace(
                    current, run_seconds=m.Float64s([run + since for run in current.run_seconds])
                ),
            )
