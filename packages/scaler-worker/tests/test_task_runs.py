"""The runs of a worker's tasks in its heartbeats (protocol 1.8), driven through the core: recorded only while
the scheduler asks, each with its function, client, times and how it ended."""

from __future__ import annotations

import pytest
from core_harness import CLIENT, Harness, make_task, task_id

from scaler.protocol import messages as m
from scaler.protocol.task_runs import check
from scaler.worker.processor_protocol import ProcessorResult
from scaler.worker.task_runs import UNNAMED_FUNCTION
from scaler.worker.worker_events import FromScheduler, UsageMeasured


def heartbeat(h: Harness) -> m.WorkerHeartbeat:
    h.handle(UsageMeasured(1.0, 100, 2.0, 200))
    (beat,) = h.take(m.WorkerHeartbeat)
    return beat


def finish(h: Harness, status: m.TaskStatus, seconds: float, function: str = "module.square", error: str = "") -> None:
    """The running task ends after ``seconds`` (as the processor measured them), the clock moves that far."""
    h.now += seconds
    result = h.processor_finishes(status)
    h.tell(ProcessorResult(result.task_id, status, result.payload, "", None, seconds, function, error))


def _echo(on: bool) -> FromScheduler:
    """The scheduler's heartbeat echo: record task runs, or not."""
    return FromScheduler(m.WorkerHeartbeatEcho(record_tasks=on))


def test_nothing_is_recorded_while_the_scheduler_does_not_ask():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    finish(h, m.TaskStatus.SUCCESS, 0.5)
    beat = heartbeat(h)
    assert beat.ended_runs == m.TaskRuns() and beat.current_runs == m.TaskRuns()


def test_each_ended_run_says_its_function_client_times_and_outcome():
    h = Harness()
    h.handle(_echo(True))
    task = make_task(1)
    task.queued_seconds = 2.0  # what the scheduler says it waited there
    h.now = 10.0
    h.assign(task, make_task(2))
    h.now = 10.25  # a quarter of a second here before it starts
    h.answer_gets()
    finish(h, m.TaskStatus.SUCCESS, 0.5)
    finish(h, m.TaskStatus.FAILED, 0.125, "module.check", "ValueError: bad input")
    h.now += 1.0
    beat = heartbeat(h)
    runs = beat.ended_runs
    check(runs, ended=True)
    assert runs.task_ids == [task_id(1), task_id(2)]
    assert [runs.function_names[i] for i in runs.functions] == ["module.square", "module.check"]
    assert [runs.client_ids[i] for i in runs.clients] == [CLIENT, CLIENT]
    assert runs.run_seconds == [0.5, 0.125]
    assert runs.ended_seconds_ago == pytest.approx([1.125, 1.0])
    assert runs.queued_seconds == pytest.approx([2.25, 0.75])  # task 2 arrived at 10.0 and started at 10.75
    assert (runs.failed_runs, runs.failed_statuses) == ([1], [m.TaskStatus.FAILED])
    assert runs.error_texts == ["ValueError: bad input"]
    assert heartbeat(h).ended_runs.task_ids == []  # each run goes in one heartbeat


def test_a_run_going_on_is_in_each_heartbeat_named_after_its_function_once_known():
    h = Harness()
    h.handle(_echo(True))
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.now = 3.0
    current = heartbeat(h).current_runs
    assert current.task_ids == [task_id(1)] and current.function_names == [UNNAMED_FUNCTION]
    assert current.run_seconds == [3.0] and current.ended_seconds_ago == [] and current.failed_runs == []
    finish(h, m.TaskStatus.SUCCESS, 0.5)
    current = heartbeat(h).current_runs
    assert current.task_ids == [task_id(2)] and current.function_names == ["module.square"]  # same function


def test_a_run_whose_processor_died_ends_as_worker_died_with_the_cause():
    h = Harness()
    h.handle(_echo(True))
    h.assign(make_task(1))
    h.answer_gets()
    h.now = 2.0
    h.die("processor was killed by signal SIGKILL")
    runs = heartbeat(h).ended_runs
    assert runs.task_ids == [task_id(1)] and runs.failed_statuses == [m.TaskStatus.WORKER_DIED]
    assert runs.error_texts == ["processor was killed by signal SIGKILL"] and runs.run_seconds == [2.0]


def test_recording_stops_when_the_scheduler_no_longer_asks():
    h = Harness()
    h.handle(_echo(True))
    h.handle(_echo(False))
    h.assign(make_task(1))
    h.answer_gets()
    finish(h, m.TaskStatus.SUCCESS, 0.5)
    assert heartbeat(h).ended_runs.task_ids == []
