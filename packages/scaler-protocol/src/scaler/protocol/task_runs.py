"""Task runs (`messages.TaskRuns`, protocol 1.8): checking them, gathering them, and reading them as records.

A worker sends the runs of its tasks in columns (one entry per run in ``task_ids`` and in each list after it;
functions, clients and workers named once each and referred to by position). The scheduler checks what a worker
sends (`check`), gathers the runs of several messages into one for a snapshot or a client's heartbeat echo
(`RunColumns`), and monitors and clients keep them as they came and read them as records on their own clock
(`Arrival`).

Times travel as durations, each measured on one host: how long before the message left the run ended, how
long it ran, how long its task was queued before. A receiver places them from when the message arrived
(``received_at``, on its own clock), so no two hosts' clocks are ever compared; what is lost is the time the
message took on its way (docs/monitoring.md, "Clocks").
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Hashable, Iterable, Iterator, List, NamedTuple, Optional, Sequence, TypeVar

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import show

_Name = TypeVar("_Name", bound=Hashable)

RUNNING = "running"  # the state of a run that goes on
_SUCCESS = m.TaskStatus.SUCCESS
STATES = {
    m.TaskStatus.SUCCESS: "success",
    m.TaskStatus.FAILED: "failed",
    m.TaskStatus.CANCELLED: "cancelled",
    m.TaskStatus.WORKER_DIED: "worker died",
    m.TaskStatus.REJECTED: "rejected",
}


class TaskRun(NamedTuple):
    """One run of a task, its times in seconds on the clock of whoever read it (`records`)."""

    task_id: str  # hex
    function: str  # module.qualname
    client: str  # the client that submitted it (`ids.show`)
    worker: str  # the worker it ran on
    state: str  # one of STATES' values, or RUNNING
    queued: float  # when the scheduler received it
    started: float
    ended: Optional[float]  # None while it runs
    error: str  # the first line of a failure's error ("" if none)


def function_name(value: Any) -> str:
    """``module.qualname`` of a function (of the function inside a ``functools.partial``), or of its type: what
    runs are named by, on the worker as on the client."""
    if isinstance(value, functools.partial):
        value = value.func
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    module = getattr(value, "__module__", None)
    return f"{module}.{name}" if module else name


def check(runs: m.TaskRuns, ended: bool) -> None:
    """Raise `ProtocolError` naming what is wrong with ``runs`` (from a peer: lists of unequal lengths, a
    position past its table); ``ended``: they are ended runs (which say when they ended)."""
    count = len(runs.task_ids)
    columns: Dict[str, Sequence[Any]] = {
        "functions": runs.functions, "clients": runs.clients, "queuedSeconds": runs.queued_seconds,
        "runSeconds": runs.run_seconds,
    }  # fmt: skip
    if ended:
        columns["endedSecondsAgo"] = runs.ended_seconds_ago
    if runs.workers:
        columns["workers"] = runs.workers
    for name, column in columns.items():
        if len(column) != count:
            raise ProtocolError(f"task runs: {name} has {len(column)} entries for {count} runs")
    for name, positions, table in (
        ("functions", runs.functions, runs.function_names),
        ("clients", runs.clients, runs.client_ids),
        ("workers", runs.workers, runs.worker_ids),
        ("failedRuns", runs.failed_runs, runs.task_ids),
    ):
        if positions and max(positions) >= len(table):
            raise ProtocolError(f"task runs: {name} refers to entry {max(positions)} of {len(table)}")
    if not len(runs.failed_runs) == len(runs.failed_statuses) == len(runs.error_texts):
        raise ProtocolError("task runs: failedRuns, failedStatuses and errorTexts differ in length")


class RunColumns:
    """Runs gathered from several messages (each checked, `add`) or noted one by one where they ran (`append`),
    as the columns of one `m.TaskRuns` (`take`)."""

    __slots__ = (
        "_functions", "_clients", "_workers", "_task_ids", "_function_of", "_client_of", "_worker_of", "_queued",
        "_durations", "_ended_at", "_failed", "_failed_statuses", "_errors",
    )  # fmt: skip

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._functions: Dict[Hashable, int] = {}
        self._clients: Dict[Hashable, int] = {}
        self._workers: Dict[Hashable, int] = {}
        self._task_ids: List[bytes] = []
        self._function_of: List[int] = []  # lists, made packed columns once (`take`): appending to a list costs
        self._client_of: List[int] = []  # half of what appending to an array does
        self._worker_of: List[int] = []
        self._queued: List[float] = []
        self._durations: List[float] = []
        self._ended_at: List[float] = []  # the gatherer's clock
        self._failed: List[int] = []
        self._failed_statuses: List[m.TaskStatus] = []
        self._errors: List[str] = []

    def __len__(self) -> int:
        return len(self._task_ids)

    def add(
        self, runs: m.TaskRuns, received_at: float, worker_id: Optional[bytes] = None, only: Sequence[int] = ()
    ) -> None:
        """Ended ``runs`` that arrived at ``received_at`` (the gatherer's clock), from ``worker_id`` when the
        runs do not say their workers; ``only``: these positions in ``runs`` (empty: all of them)."""
        functions = [position(self._functions, name) for name in runs.function_names]
        clients = [position(self._clients, client_id) for client_id in runs.client_ids]
        start = len(self._task_ids)
        picked: Sequence[int] = only or range(len(runs.task_ids))
        if not only:  # every run: whole lists at once
            self._task_ids.extend(runs.task_ids)
            self._function_of.extend([functions[i] for i in runs.functions])
            self._client_of.extend([clients[i] for i in runs.clients])
            self._queued.extend(runs.queued_seconds)
            self._durations.extend(runs.run_seconds)
            self._ended_at.extend([received_at - ago for ago in runs.ended_seconds_ago])
        else:
            for i in only:
                self._task_ids.append(runs.task_ids[i])
                self._function_of.append(functions[runs.functions[i]])
                self._client_of.append(clients[runs.clients[i]])
                self._queued.append(runs.queued_seconds[i])
                self._durations.append(runs.run_seconds[i])
                self._ended_at.append(received_at - runs.ended_seconds_ago[i])
        if worker_id is not None:
            self._worker_of.extend([position(self._workers, worker_id)] * len(picked))
        else:
            workers = [position(self._workers, each) for each in runs.worker_ids]
            self._worker_of.extend([workers[runs.workers[i]] for i in picked])
        if runs.failed_runs:
            at = {i: start + offset for offset, i in enumerate(picked)}
            for i, status, error in zip(runs.failed_runs, runs.failed_statuses, runs.error_texts, strict=True):
                if i in at:
                    self._failed.append(at[i])
                    self._failed_statuses.append(status)
                    self._errors.append(error)

    def append(
        self, task_id: bytes, function: str, client_id: bytes, queued: float, seconds: float, ended_at: float,
        status: m.TaskStatus = m.TaskStatus.SUCCESS, error: str = "",
    ) -> None:  # fmt: skip
        """One ended run, noted where it ran (so without a worker's column: `take` it ``with_workers=False``):
        queued ``queued`` seconds, ran ``seconds``, ended at ``ended_at`` (the gatherer's clock); ``error``: a
        failure's line. (Once per run at a worker that records: no call it can do without.)"""
        if status != _SUCCESS:
            self._failed.append(len(self._task_ids))
            self._failed_statuses.append(status)
            self._errors.append(error)
        self._task_ids.append(task_id)
        functions, clients = self._functions, self._clients
        self._function_of.append(functions.setdefault(function, len(functions)))  # as `position` does
        self._client_of.append(clients.setdefault(client_id, len(clients)))
        self._queued.append(queued)
        self._durations.append(seconds)
        self._ended_at.append(ended_at)

    def take(self, now: float, with_workers: bool = True) -> m.TaskRuns:
        """The runs gathered, for a message leaving at ``now``, and start anew; without the workers' columns
        when the message says whose they are (a worker's snapshot)."""
        runs = m.TaskRuns(
            function_names=list(self._functions),  # type: ignore[arg-type]
            client_ids=list(self._clients),  # type: ignore[arg-type]
            worker_ids=list(self._workers) if with_workers else [],  # type: ignore[arg-type]
            task_ids=self._task_ids,
            functions=m.UInt32s(self._function_of),
            clients=m.UInt32s(self._client_of),
            workers=m.UInt32s(self._worker_of if with_workers else ()),
            queued_seconds=m.Float64s(self._queued),
            run_seconds=m.Float64s(self._durations),
            ended_seconds_ago=m.Float64s([now - when for when in self._ended_at]),
            failed_runs=self._failed,
            failed_statuses=self._failed_statuses,
            error_texts=self._errors,
        )
        self._clear()
        return runs


class Arrival:
    """Runs (checked) as one message brought them, placed on the reader's clock from when it arrived
    (``received_at``): of ``worker_id`` when the runs do not say their workers; ``ended``: ended runs, else runs
    going on (then they ``end`` at ``received_at``, as far as is known). Kept as they came (columns): a record is
    made only of the runs read (`records`)."""

    __slots__ = ("runs", "received_at", "worker", "ended", "failures", "start")

    def __init__(self, runs: m.TaskRuns, received_at: float, worker_id: bytes = b"", ended: bool = True) -> None:
        self.runs = runs
        self.received_at = received_at
        self.worker = show(worker_id)
        self.ended = ended
        failures = zip(runs.failed_statuses, runs.error_texts, strict=True)
        self.failures = dict(zip(runs.failed_runs, failures, strict=True))  # position -> (status, error text)
        self.start = 0  # the runs before this position are dropped (a reader that keeps a bounded number)

    def __len__(self) -> int:
        return len(self.runs.task_ids) - self.start

    def ends(self) -> List[float]:
        """When each run ended (a run going on: when its message arrived)."""
        received_at = self.received_at
        if not self.ended:
            return [received_at] * len(self.runs.task_ids)
        return [received_at - ago for ago in self.runs.ended_seconds_ago]

    def state(self, index: int) -> str:
        failure = self.failures.get(index)
        if failure is not None:
            return STATES.get(failure[0], STATES[m.TaskStatus.SUCCESS])
        return STATES[m.TaskStatus.SUCCESS] if self.ended else RUNNING

    def records(self, indexes: Optional[Iterable[int]] = None) -> Iterator[TaskRun]:
        """The runs at ``indexes`` (all of them, by default) as records."""
        runs = self.runs
        clients = [show(client_id) for client_id in runs.client_ids]
        workers = [show(each) for each in runs.worker_ids]
        ends = self.ends()
        for i in range(self.start, len(runs.task_ids)) if indexes is None else indexes:
            started = ends[i] - runs.run_seconds[i]
            failure = self.failures.get(i)
            yield TaskRun(
                runs.task_ids[i].hex(),
                runs.function_names[runs.functions[i]],
                clients[runs.clients[i]],
                workers[runs.workers[i]] if runs.workers else self.worker,
                self.state(i),
                started - runs.queued_seconds[i],
                started,
                ends[i] if self.ended else None,
                failure[1] if failure is not None else "",
            )


def position(positions: Dict[_Name, int], key: _Name) -> int:
    """The position of ``key`` in a table of names (``positions``: name -> position), added if new."""
    return positions.setdefault(key, len(positions))
