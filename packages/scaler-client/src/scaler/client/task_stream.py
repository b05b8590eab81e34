"""`Client.task_stream()`: the runs of a client's tasks while a block runs, as records a notebook can plot.

Opening the stream tells the scheduler at once (a heartbeat, `ReportTasks`): from then on the workers record
each run, and the scheduler sends this client, in the echoes of its heartbeats, the runs of its tasks and of
the tasks they submitted (through Clients made inside them), however deep (protocol 1.8; docs/monitoring.md).
The agent thread hands each arrival to the open streams (`received`), with when it arrived: the records are on
this host's clock (`scaler.protocol.task_runs`).

A run reaches the scheduler with its worker's next heartbeat, so closing the stream waits, bounded: until
the run of each task of this client that succeeded while the stream was open has come, and one heartbeat
interval after the last of them ended (what their tasks submitted ends before them, possibly on workers
whose heartbeats come later). A worker older than protocol 1.8 records nothing: its runs are missing.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, List, Optional, Set

from scaler.client.client_events import ReportTasks
from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.task_runs import Arrival, TaskRun
from scaler.protocol.version import TASK_RUNS_VERSION, require_scheduler

POLL_SECONDS = 0.1  # how often closing asks for the runs so far
_SUCCESS = m.TaskStatus.SUCCESS


class TaskStream:
    """A context manager: ``with client.task_stream() as stream: ...``, then ``stream.records``.

    ``records`` lists a `TaskRun` per run that ended or went on while the stream was open (a task retried has
    several), sorted by start: task ID, function, client, worker, state, when it was queued, started and ended
    (seconds since the epoch on this host's clock), and a failure's error. ``pandas.DataFrame(stream.records)``
    makes a table of it.
    """

    def __init__(self, agent: Any, wait_seconds: float) -> None:
        self._agent = agent
        self._wait_seconds = wait_seconds  # the longest a reply of the scheduler is waited for
        self._lock = threading.Lock()  # guards what the agent thread hands in
        self._arrivals: List[Arrival] = []  # the runs as they came, on this host's clock
        self._seen: Set[bytes] = set()  # task IDs with a run
        self._succeeded: Set[bytes] = set()  # this client's tasks that succeeded while open: their runs will come
        self._last_end = 0.0  # when the last of those ended (monotonic)
        self.opened: Optional[float] = None  # seconds since the epoch, once open
        self.closed: Optional[float] = None
        self.missing = 0  # tasks that succeeded while it was open whose run did not come before it closed

    def __enter__(self) -> TaskStream:
        require_scheduler(self._agent.scheduler_version, TASK_RUNS_VERSION, "a task stream")
        self.opened = time.time()
        self._agent.watch_tasks(self, True)
        self._ask(+1)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._gather()
        finally:
            self._agent.watch_tasks(self, False)
            self.closed = time.time()
        self._ask(-1)

    @property
    def records(self) -> List[TaskRun]:
        runs = [run for arrival in self.arrivals for run in arrival.records()]
        runs.sort(key=lambda run: run.started)
        return runs

    @property
    def arrivals(self) -> List[Arrival]:
        """The runs as they came (columns: what a report writes without making a record of each)."""
        with self._lock:
            return list(self._arrivals)

    # ----------------------------------------------------------------- from the agent thread

    def received(self, runs: m.TaskRuns, arrived: float) -> None:
        with self._lock:
            self._arrivals.append(Arrival(runs, arrived))
            self._seen.update(runs.task_ids)

    def ended(self, results: List[m.TaskResult]) -> None:
        succeeded = [result.task_id for result in results if result.status == _SUCCESS]
        if succeeded:
            with self._lock:
                self._succeeded.update(succeeded)
                self._last_end = time.monotonic()

    # ----------------------------------------------------------------- closing

    def _gather(self) -> None:
        """Ask for the runs so far until every awaited run came and a heartbeat interval passed since the last of
        their tasks ended; bounded."""
        heartbeat = self._agent.heartbeat_seconds
        deadline = time.monotonic() + max(5.0, 4 * heartbeat)
        while True:
            self._ask(0)
            with self._lock:
                missing = len(self._succeeded - self._seen)
                settled = time.monotonic() >= self._last_end + heartbeat + POLL_SECONDS
            if (not missing and settled) or time.monotonic() >= deadline:
                self.missing = missing
                return
            time.sleep(POLL_SECONDS)

    def _ask(self, change: int) -> None:
        try:
            self._agent.ask(ReportTasks, change).result(timeout=self._wait_seconds)
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError on 3.10
            raise DisconnectedError(f"the scheduler did not answer within {self._wait_seconds:g}s") from None
