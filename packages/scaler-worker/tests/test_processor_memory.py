"""The worker's memory limit in the local processor runner, driven through the core (`core_harness`): a task
past the limit fails alone with `MemoryLimitError` and the next task runs on a new processor; a processor
found above the recycling share between tasks is replaced; the heartbeat counts the kills; and what
``--memory-limit`` means."""

from __future__ import annotations

import pytest
from core_harness import FUNCTION, Harness, load_failure, make_task, task_id

from scaler import MemoryLimitError
from scaler.protocol import messages as m
from scaler.protocol.errors import MemoryLimitError as ProtocolMemoryLimitError
from scaler.worker.memory_limit import memory_limit_bytes
from scaler.worker.processor_protocol import FunctionLoaded, ProcessorResult
from scaler.worker.task_failure import failure_payload
from scaler.worker.worker_events import UsageMeasured

MIB = 1 << 20
LIMIT = 300 * MIB


def test_the_error_is_importable_from_scaler():
    assert MemoryLimitError is ProtocolMemoryLimitError


def started(limit: int = LIMIT, **options) -> Harness:
    h = Harness(memory_limit=limit, **options)
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.tell(FunctionLoaded(FUNCTION, "module.greedy"))
    assert h.running_task() == task_id(1)
    return h


def test_a_task_past_the_limit_fails_alone_naming_memory_the_limit_the_peak_and_its_function():
    h = started()
    h.measure(200 * MIB)
    h.measure(512 * MIB)
    assert h.started == [0, 1]  # its processor was stopped and replaced
    [result] = h.results()
    assert result.task_id == task_id(1) and result.status == m.TaskStatus.FAILED
    error, _ = load_failure(result)
    assert isinstance(error, MemoryLimitError)
    assert "task module.greedy went over its worker's memory limit of 300.0 MiB" in str(error)
    assert "reached 512.0 MiB" in str(error)
    assert h.running_task() == task_id(2)  # the next task runs, on the new processor
    h.finish()
    assert [r.status for r in h.results()] == [m.TaskStatus.SUCCESS]
    h.handle(UsageMeasured(1.0, 100, 2.0, 200))
    [heartbeat] = h.take(m.WorkerHeartbeat)
    assert (heartbeat.memory_limit_bytes, heartbeat.memory_kills) == (LIMIT, 1)
    assert heartbeat.memory_killed == [m.MemoryKill(task_id(1), "module.greedy", 512 * MIB, refused=False)]
    h.handle(UsageMeasured(1.0, 100, 2.0, 200))
    [heartbeat] = h.take(m.WorkerHeartbeat)  # each kill is told once; the count stays
    assert (heartbeat.memory_kills, heartbeat.memory_killed) == (1, [])


def test_a_measure_of_a_stopped_processor_or_under_the_limit_changes_nothing():
    h = started()
    h.measure(900 * MIB, processor=7)  # not the current processor
    h.measure(LIMIT)  # at the limit, not past it
    assert h.started == [0] and h.results() == [] and h.running_task() == task_id(1)


def test_without_a_limit_memory_never_stops_a_task():
    h = started(limit=0)
    h.measure(64 << 30)
    h.finish()
    assert h.started == [0] and h.memory_requests == []
    assert [r.status for r in h.results()] == [m.TaskStatus.SUCCESS]


def test_the_waiting_tasks_die_with_the_processor_and_the_running_one_fails_for_memory():
    h = started()
    h.wait()  # task 1 waits for its children: task 2 runs beside it
    assert h.running_task() == task_id(2)
    h.measure(400 * MIB)
    results = {r.task_id: r for r in h.results()}
    assert results[task_id(2)].status == m.TaskStatus.FAILED
    assert isinstance(load_failure(results[task_id(2)])[0], MemoryLimitError)
    assert results[task_id(1)].status == m.TaskStatus.WORKER_DIED
    assert "memory limit of 300.0 MiB" in results[task_id(1)].error_text


def test_an_idle_processor_past_the_limit_is_replaced_without_failing_anything():
    h = Harness(memory_limit=LIMIT)
    h.measure(400 * MIB)
    assert h.started == [0, 1] and h.results() == []


def test_a_processor_above_the_recycling_share_between_tasks_is_replaced_before_the_next_task():
    h = started()
    h.measure(250 * MIB)  # above 70 % of 300 MiB while task 1 runs: suspect
    h.finish()
    assert h.memory_requests == [0] and h.running_task() is None  # nothing starts before a fresh measure
    h.measure(240 * MIB)
    assert h.started == [0, 1] and h.running_task() == task_id(2)
    assert h.top().function is not None  # a new processor: the function goes again


def test_a_processor_that_gave_its_memory_back_is_kept():
    h = started()
    h.measure(250 * MIB)
    h.finish()
    h.measure(60 * MIB)  # the task's memory was transient
    assert h.started == [0] and h.running_task() == task_id(2)


def test_nothing_is_sent_ahead_to_a_suspect_processor():
    sent_ahead = []
    for resident in (100 * MIB, 250 * MIB):
        h = started(pipeline_depth=4)
        h.finish()  # a quick task: while task 2 runs, the next ones go ahead into the processor's FIFO
        h.measure(resident)
        h.assign(make_task(3), make_task(4))
        h.answer_gets()
        sent_ahead.append(h.runner.inbox)
    assert sent_ahead == [[task_id(3), task_id(4)], []]


def test_a_task_whose_allocation_was_refused_leaves_its_processor_to_be_recycled():
    h = started()
    error = MemoryLimitError("task module.greedy went over its worker's memory limit of 300.0 MiB: ...")
    payload, text = failure_payload(error)
    h.processor_finishes()
    result = ProcessorResult(task_id(1), m.TaskStatus.FAILED, payload, text, None, function="module.greedy")
    h.tell(result._replace(over_memory=True))
    assert h.started == [0, 1] and h.memory_requests == []  # no measure needed
    assert h.running_task() == task_id(2)
    assert isinstance(load_failure(h.results()[0])[0], MemoryLimitError)
    assert h.runner.memory_kills == 1
    assert h.runner.take_memory_kills() == [m.MemoryKill(task_id(1), "module.greedy", 0, refused=True)]


@pytest.mark.parametrize(
    "spec, workers, expected",
    [
        ("auto", 4, 6 << 30),
        ("AUTO", 1, 24 << 30),
        ("50%", 2, 6 << 30),
        ("100%", 3, 8 << 30),
        ("2GiB", 4, 2 << 30),
        ("512M", 1, 512 << 20),
        (1 << 30, 8, 1 << 30),
        ("1073741824", 2, 1 << 30),
        ("none", 4, 0),
    ],
)
def test_memory_limit_specs(spec, workers, expected):
    assert memory_limit_bytes(spec, workers, host=24 << 30) == expected


@pytest.mark.parametrize("spec", ["", "0", "-1G", "0%", "101%", "lots", "%", "12Q"])
def test_a_wrong_memory_limit_is_refused_naming_it(spec):
    with pytest.raises(ValueError, match=f"invalid memory limit {spec!r}"):
        memory_limit_bytes(spec, 1, host=24 << 30)
