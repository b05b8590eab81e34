"""The runs of a worker's tasks, for monitors and performance reports (protocol 1.8; docs/monitoring.md).

While the scheduler asks for them (`WorkerHeartbeatEcho.record_tasks`: a monitor watches, or a client's
performance report is open), the core notes each run that ends (`ended`), and each heartbeat carries the runs
that ended since the last one and the runs going on (`heartbeat_runs`), as the columns of `m.TaskRuns`.
Nothing is noted while nobody asks: a run costs a few appends to lists while someone does.

Times are durations on this host's clock, placed by the receiver from when the heartbeat left: a run ends when
the core hears its result (the processor holds the results of quick tasks for company, at most 5 ms), starts
its duration (measured by the processor) before that, and was queued ``queued_seconds`` before its start (what
the scheduler says it waited there, `Task.queued_seconds`, and the time from its arrival here to its start).
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

from scaler.protocol import messages as m
from scaler.protocol.task_runs import RunColumns, position
from scaler.worker.scheduler_answers import timeout_error
from scaler.worker.task_failure import ERROR_LINE_CHARACTERS, error_line
from scaler.worker.task_lifecycle import TaskEntry, TaskState

# a run that goes on is named after its function once a run of that function ended here (the processor names
# the functions it loads, in its results); until then it goes by this name
UNNAMED_FUNCTION = "(not known until a run of it ends)"
NAMES_KEPT = 1_000  # function IDs whose names are kept for the runs that go on; past that, the list starts anew

_SUCCESS = m.TaskStatus.SUCCESS

CurrentRun = Tuple[m.Task, float, float]  # a task that runs, when it arrived here, when it started


class TaskRunRecorder:
    """The ended runs since the last heartbeat, as columns, and the names of the functions seen."""

    __slots__ = ("recording", "_names", "_ended")

    def __init__(self) -> None:
        self.recording = False  # the scheduler asks for runs (its last heartbeat echo said so)
        self._names: Dict[bytes, str] = {}  # function ID -> module.qualname, as the processor named it
        self._ended = RunColumns()  # ended_at: this worker's monotonic clock

    def ended(
        self, task: m.Task, received: float, now: float, seconds: float, function: str, status: int, error: str
    ) -> None:
        """A run of ``task`` (here since ``received``) ended at ``now`` after ``seconds``; ``function`` is its
        function's name ("" if the processor could not load it), ``error`` a failure's line. (Once per task
        while recording: kept to a few appends.)"""
        names = self._names
        if not function:
            function = names.get(task.function_id, UNNAMED_FUNCTION)
        elif task.function_id not in names:
            if len(names) >= NAMES_KEPT:
                names.clear()
            names[task.function_id] = function
        waited = now - seconds - received  # here, before it started
        queued = task.queued_seconds + waited if waited > 0 else task.queued_seconds
        if status == _SUCCESS:
            self._ended.append(task.task_id, function, task.client_id, queued, seconds, now)
        else:
            line = error.partition("\n")[0][:ERROR_LINE_CHARACTERS]
            self._ended.append(task.task_id, function, task.client_id, queued, seconds, now, m.TaskStatus(status), line)

    def died(self, entry: TaskEntry, now: float, reason: str) -> None:
        """A started run of ``entry`` ended without a result of its own: its processor died, or was stopped to
        cancel it or for its timeout."""
        status, error = m.TaskStatus.WORKER_DIED, reason
        if entry.state is TaskState.CANCELLING:
            status = m.TaskStatus.CANCELLED
        elif entry.state is TaskState.TIMING_OUT:
            status, error = m.TaskStatus.FAILED, error_line(timeout_error(entry.task))
        started = now if entry.started is None else entry.started
        self.ended(entry.task, entry.received, now, now - started, "", status, error)

    def heartbeat_runs(self, now: float, current: Iterable[CurrentRun]) -> Tuple[m.TaskRuns, m.TaskRuns]:
        """(the runs ended since the last call, the runs going on) for a heartbeat leaving at ``now``;
        ``current`` is (task, arrived here at, started at) for each task started and not ended."""
        ended = self._ended.take(now, with_workers=False)
        return ended, self._current_runs(now, current)

    def _current_runs(self, now: float, current: Iterable[CurrentRun]) -> m.TaskRuns:
        runs = m.TaskRuns()
        functions: Dict[str, int] = {}
        clients: Dict[bytes, int] = {}
        for task, received, started in current:
            name = self._names.get(task.function_id, UNNAMED_FUNCTION)
            runs.functions.append(position(functions, name))
            runs.clients.append(position(clients, task.client_id))
            runs.task_ids.append(task.task_id)
            runs.queued_seconds.append(task.queued_seconds + max(0.0, started - received))
            runs.run_seconds.append(now - started)
        runs.function_names = list(functions)
        runs.client_ids = list(clients)
        return runs
