"""The worker core driven through `handle` (see `core_harness`): the queue, what tasks need from storage,
results, failures, cancels and balancing, timeouts, a processor's end."""

from __future__ import annotations

from typing import List

import pytest
from core_harness import CLIENT, FUNCTION, Harness, load_failure, make_task, task_id

from scaler.protocol import messages as m
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
    TaskTimeoutError,
)
from scaler.protocol.lifecycle import TransitionError
from scaler.worker.processor_protocol import FUNCTION_CACHE_CAPACITY, ProcessorResult
from scaler.worker.storage_requests import FULL_RETRY_SECONDS
from scaler.worker.task_lifecycle import TASK_LIFECYCLE, TaskEvent, TaskState
from scaler.worker.worker_events import FromScheduler

# ----------------------------------------------------------------------------- queue order


def test_starts_one_processor_and_runs_nothing_until_the_function_arrives():
    h = Harness()
    assert h.started == [0]
    h.assign(make_task(1))
    assert h.running_task() is None
    assert [g.object_ids for g in h.gets] == [[FUNCTION]]
    h.answer_gets()
    assert h.running_task() == task_id(1)
    assert h.top().function == b"function bytes"


def test_higher_priority_first_then_first_come_first_served():
    h = Harness()
    h.assign(make_task(1, priority=0))  # runs first: nothing else was there yet
    h.answer_gets()
    h.assign(make_task(2, priority=0), make_task(3, priority=5), make_task(4, priority=1), make_task(5, priority=5))
    h.assign(make_task(6, priority=9))
    assert h.run_all() == [task_id(n) for n in (1, 6, 3, 5, 4, 2)]


def test_a_task_arriving_with_a_higher_priority_overtakes_staged_tasks():
    h = Harness(prefetch_tasks=4)
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(*(make_task(n) for n in range(2, 6)))  # all staged: the processor is busy
    h.assign(make_task(9, priority=3))
    assert h.run_all() == [task_id(n) for n in (1, 9, 2, 3, 4, 5)]


def test_a_runner_may_take_the_first_task_it_accepts_and_the_others_keep_their_places():
    """`next_ready` with ``accept``: how a runner with a limit takes the tasks allowed past it (Symphony's nested
    tasks) out of queue order."""
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3, priority=1), make_task(4))
    h.answer_gets()
    assert h.running_task() == task_id(3)
    ready = h.core.next_ready(False, lambda task: task.task_id in (task_id(2), task_id(4)))
    assert ready is not None and ready.task.task_id == task_id(2)  # the first accepted, in run order
    assert h.core.task_states()[task_id(2)] == TaskState.RUNNING
    assert h.core.next_ready(False, lambda task: False) is None
    assert [h.core.next_ready(False).task.task_id for _ in range(2)] == [task_id(1), task_id(4)]


def test_function_is_fetched_once_and_sent_to_the_processor_once():
    h = Harness()
    h.assign(*(make_task(n) for n in range(1, 6)))
    h.answer_gets()
    fetched = [object_id for request in h.gets for object_id in request.object_ids]
    sent_bytes = []
    for _ in range(5):
        sent_bytes.append(h.top().function)
        h.finish()
        h.answer_gets()
    assert sent_bytes == [b"function bytes", None, None, None, None]
    assert fetched == []  # no second fetch after the first answer


def test_fetches_of_one_batch_travel_in_one_request():
    h = Harness(prefetch_tasks=3)
    objects = [bytes([n]) * 16 for n in range(1, 4)]
    for object_id in objects:
        h.storage[object_id] = b"payload of " + object_id
    tasks = [make_task(n, arguments=[m.Argument("x", m.ArgumentKind.OBJECT, objects[n - 1])]) for n in range(1, 4)]
    h.assign(*tasks)
    assert len(h.gets) == 1
    assert set(h.gets[0].object_ids) == {FUNCTION, *objects}
    h.answer_gets()
    assert h.top().arguments == [("x", b"payload of " + objects[0], objects[0])]


def test_object_arguments_are_released_once_used():
    h = Harness(prefetch_tasks=1)
    object_id = b"O" * 16
    h.storage[object_id] = b"big"
    h.assign(make_task(1, arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)]))
    h.answer_gets()
    assert h.top().arguments == [("", b"big", object_id)]
    assert h.core.held_object_count == 0
    assert h.core.pending_fetch_count == 0


def test_each_get_reads_for_the_scope_of_the_tasks_that_need_it():
    h = Harness(prefetch_tasks=3)
    nested = b"C|test|2|nested"
    h.assign(make_task(1), make_task(2, client_id=nested, scope_id=CLIENT), make_task(3, client_id=nested))
    assert [(request.owner_id, request.object_ids) for request in h.gets] == [
        (CLIENT, [FUNCTION]),
        (nested, [FUNCTION]),
    ]
    h.answer_gets()
    for number in (1, 2, 3):
        assert h.running_task() == task_id(number)
        h.finish()


def test_what_the_worker_holds_for_one_client_is_fetched_again_for_another_and_refused_if_not_its():
    h = Harness(prefetch_tasks=1)
    other, other_function, shared = b"C|test|2|other", b"G" * 16, b"O" * 16
    h.storage.update({shared: b"the first client's object", other_function: b"the other client's function"})
    h.readers.update({FUNCTION: CLIENT, shared: CLIENT})  # what storage lets each scope read
    needs_shared = [m.Argument("", m.ArgumentKind.OBJECT, shared)]
    h.assign(make_task(1, arguments=needs_shared))
    h.answer_gets()
    assert h.top().function == b"function bytes" and h.top().arguments == [("", b"the first client's object", shared)]
    h.finish()
    assert [result.status for result in h.results()] == [m.TaskStatus.SUCCESS]
    # the processor holds the first client's function and object: a task of another client names them
    for number, function_id, arguments in ((2, FUNCTION, []), (3, other_function, needs_shared)):
        h.assign(make_task(number, function_id=function_id, arguments=arguments, client_id=other))
        (request,) = h.gets  # asked for anyway, for that client
        assert request.owner_id == other and request.object_ids == [function_id, *(a.data for a in arguments)]
        h.answer_gets()
        [result] = h.results()
        error, _ = load_failure(result)
        assert isinstance(error, ObjectNotFoundError) and f"the tasks of client {other.decode()}" in str(error)
        assert b"the first client's" not in result.payload
    h.assign(make_task(4, arguments=needs_shared))  # the first client's again: granted, nothing is fetched
    assert h.gets == [] and h.top().function is None and h.top().arguments == [("", None, shared)]


def test_serializer_is_fetched_and_sent_once():
    h = Harness()
    serializer_id = b"S" * 16
    h.storage[serializer_id] = b"serializer bytes"
    h.assign(make_task(1, serializer_id=serializer_id), make_task(2, serializer_id=serializer_id))
    h.answer_gets()
    assert h.top().serializer == b"serializer bytes"
    h.finish()
    h.answer_gets()
    assert h.top().serializer_id == serializer_id
    assert h.top().serializer is None


def test_processor_function_cache_mirror_sends_evicted_functions_again():
    h = Harness()
    functions = [bytes([n]) * 16 for n in range(FUNCTION_CACHE_CAPACITY + 1)]
    for function_id in functions:
        h.storage[function_id] = b"code of " + function_id
    number = 0
    for function_id in [*functions, functions[0]]:  # the first one was evicted from the processor's cache
        number += 1
        h.assign(make_task(number, function_id=function_id))
        h.answer_gets()
        assert h.top().function == b"code of " + function_id
        h.finish()
    number += 1
    h.assign(make_task(number, function_id=functions[0]))  # now it is cached again
    h.answer_gets()
    assert h.top().function is None


# ----------------------------------------------------------------------------- results


def test_results_echo_the_attempt():
    h = Harness()
    h.assign(make_task(1, attempt=7))
    h.answer_gets()
    h.finish(payload=b"v")
    [batch] = h.take(m.TaskResultBatch)
    [result] = batch.results
    assert (result.task_id, result.attempt, result.status) == (task_id(1), 7, m.TaskStatus.SUCCESS)
    assert (result.payload_kind, result.payload) == (m.PayloadKind.INLINE, b"v")


def test_while_tasks_are_queued_results_wait_a_little_for_company_then_travel_in_one_batch():
    h = Harness(result_batch_seconds=0.005)
    h.assign(*(make_task(n) for n in range(1, 5)))
    h.answer_gets()
    h.finish(payload=b"one")
    assert h.results() == [] and h.wake == 0.005  # tasks 3 and 4 are queued: the result waits for company
    h.now = 0.001
    h.finish(payload=b"two")
    assert h.results() == []
    h.tick(0.004)
    assert h.results() == []
    h.tick(0.005)
    [batch] = h.take(m.TaskResultBatch)
    assert [(r.task_id, r.payload) for r in batch.results] == [(task_id(1), b"one"), (task_id(2), b"two")]


def test_the_last_result_goes_at_once():
    h = Harness(result_batch_seconds=0.005)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.finish()
    assert h.results() == []  # task 3 is queued
    h.finish()  # task 3 runs, nothing is queued: both results go now
    assert [r.task_id for r in h.results()] == [task_id(1), task_id(2)]


def test_results_wait_for_at_most_256_others():
    h = Harness(result_batch_seconds=0.005, pipeline_depth=0)
    h.assign(*(make_task(n) for n in range(1, 300)))
    h.answer_gets()
    for _ in range(255):
        h.finish()
    assert h.results() == []
    h.finish()
    assert len(h.results()) == 256


def test_reassigned_task_answers_the_new_attempt():
    h = Harness()
    h.assign(make_task(1, attempt=1))
    h.assign(make_task(1, attempt=2))
    h.answer_gets()
    h.finish()
    [result] = h.results()
    assert result.attempt == 2


def test_large_result_goes_through_storage_owned_by_the_client():
    h = Harness(inline_threshold_bytes=10)
    h.assign(make_task(1, attempt=3))
    h.answer_gets()
    h.finish(payload=b"x" * 11)
    assert h.results() == []  # not before storage said ok
    [(request, blobs)] = h.puts
    assert request.owner_id == CLIENT and blobs == [b"x" * 11]
    h.answer_puts()
    [result] = h.results()
    assert (result.status, result.payload_kind, result.attempt) == (m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT, 3)
    assert h.storage[result.payload] == b"x" * 11


def test_store_result_puts_even_a_small_result_in_storage():
    h = Harness()
    task = make_task(1)
    task.store_result = True
    h.assign(task)
    h.answer_gets()
    h.finish(payload=b"tiny")
    h.answer_puts()
    [result] = h.results()
    assert result.payload_kind == m.PayloadKind.OBJECT and h.storage[result.payload] == b"tiny"


def test_store_result_does_not_store_failures():
    h = Harness()
    task = make_task(1)
    task.store_result = True
    h.assign(task)
    h.answer_gets()
    h.finish(status=m.TaskStatus.FAILED, payload=b"pickled exception")
    [result] = h.results()
    assert result.payload_kind == m.PayloadKind.INLINE and h.puts == []


def test_result_at_the_threshold_stays_inline():
    h = Harness(inline_threshold_bytes=10)
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=b"x" * 10)
    [result] = h.results()
    assert result.payload_kind == m.PayloadKind.INLINE and h.puts == []


def test_storage_refusing_a_result_fails_the_task():
    h = Harness(inline_threshold_bytes=0)
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=b"too big")
    h.answer_puts(m.ObjectStatus.TOO_LARGE, reason="over the maximum object size")
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ObjectStorageRefusedError)
    assert "too_large" in str(error) and "over the maximum object size" in str(error)


def test_a_result_refused_by_a_full_storage_server_is_held_and_put_again_and_no_new_task_starts_meanwhile():
    h = Harness(inline_threshold_bytes=0)
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=b"result 1")
    h.answer_puts(m.ObjectStatus.STORAGE_FULL, reason="storage holds ...")
    h.assign(make_task(2))
    h.answer_gets()
    assert h.results() == [] and h.running_task() is None  # held, and task 2 waits: nothing more is made
    assert h.wake == FULL_RETRY_SECONDS
    h.tick(FULL_RETRY_SECONDS)
    [(request, blobs)] = h.puts
    assert blobs == [b"result 1"]
    h.answer_puts()
    [result] = h.results()
    assert result.status == m.TaskStatus.SUCCESS and h.storage[result.payload] == b"result 1"
    assert h.running_task() == task_id(2)


def test_a_result_refused_by_a_full_storage_server_for_the_whole_storage_timeout_fails_its_task():
    h = Harness(inline_threshold_bytes=0, storage_timeout_seconds=2.0)
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=b"result 1")
    now = 0.0
    results: List[m.TaskResult] = []
    while not results:
        h.answer_puts(m.ObjectStatus.STORAGE_FULL, reason="storage holds ...")
        now += FULL_RETRY_SECONDS
        h.tick(now)
        results = h.results()
    assert 2.0 <= now < 3.0
    [result] = results
    error, _ = load_failure(result)
    assert isinstance(error, ObjectStorageRefusedError) and "storage_full" in str(error)


def test_missing_function_fails_the_task_and_the_next_one_runs():
    h = Harness()
    missing = b"M" * 16
    h.assign(make_task(1, function_id=missing), make_task(2))
    h.answer_gets()
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ObjectNotFoundError)
    assert str(error) == (
        f"object {missing.hex()} is not in object storage, or not one the tasks of client {CLIENT.decode()} may read"
    )
    assert h.running_task() == task_id(2)


def test_missing_object_argument_fails_the_task():
    h = Harness()
    missing = b"N" * 16
    h.assign(make_task(1, arguments=[m.Argument("", m.ArgumentKind.OBJECT, missing)]))
    h.answer_gets()
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ObjectNotFoundError) and missing.hex() in str(error)
    assert h.running_task() is None


def test_a_function_object_of_several_frames_fails_its_task_naming_the_object():
    h = Harness()
    h.storage[FUNCTION] = [b"pickle", b"buffer"]  # a value sent as an object, named as a function
    h.assign(make_task(1))
    h.answer_gets()
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ProtocolError) and FUNCTION.hex() in str(error) and "several frames" in str(error)
    assert h.running_task() is None


def test_unanswered_fetch_fails_its_tasks_after_the_storage_timeout():
    h = Harness(storage_timeout_seconds=5)
    h.assign(make_task(1))
    h.now = 4.9
    h.tick(h.now)
    assert h.results() == []
    h.now = 5.0
    h.tick(h.now)
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, DisconnectedError)
    h.gets.clear()
    h.assign(make_task(2))  # fetched again, not considered pending forever
    assert [g.object_ids for g in h.gets] == [[FUNCTION]]


def test_task_argument_referring_to_another_task_is_refused():
    h = Harness()
    h.assign(make_task(1, arguments=[m.Argument("x", m.ArgumentKind.TASK, task_id(99))]))
    [result] = h.results()
    error, _ = load_failure(result)
    assert "refers to task" in str(error)


# ----------------------------------------------------------------------------- processor ends


def test_processor_death_reports_worker_died_and_a_new_processor_runs_the_next_task():
    h = Harness()
    h.assign(make_task(1, attempt=2), make_task(2))
    h.answer_gets()
    h.die("processor exited with code 3")
    [result] = h.results()
    assert (result.task_id, result.status, result.attempt) == (task_id(1), m.TaskStatus.WORKER_DIED, 2)
    assert result.error_text == "processor exited with code 3"
    assert h.started == [0, 1]
    assert h.running_task() == task_id(2)
    assert h.top().function == b"function bytes"  # the new processor has an empty cache


def test_results_written_before_the_processor_died_count():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    last = [ProcessorResult(h.top().task_id, m.TaskStatus.SUCCESS, b"done", "", None)]
    h.die("processor was killed by signal SIGKILL", last)
    [result] = h.results()
    assert (result.task_id, result.status) == (task_id(1), m.TaskStatus.SUCCESS)
    assert h.running_task() == task_id(2)  # on the new processor, not blamed for the old one's death


def test_timeout_kills_the_processor_and_fails_the_task():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=0.5), make_task(2))
    h.answer_gets()
    assert h.wake == 0.5  # task 1 started at 0
    h.tick(0.49)
    assert h.results() == [] and h.started == [0]
    h.tick(0.5)
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, TaskTimeoutError)
    assert str(error) == f"task {task_id(1).hex()} exceeded its timeout of 0.5 seconds"
    assert h.started == [0, 1] and h.running_task() == task_id(2)


def test_timer_of_a_finished_task_does_nothing():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=1), make_task(2, timeout_seconds=1))
    h.answer_gets()  # task 1 starts at 0: its time is up at 1
    h.now = 0.5
    h.finish()  # task 2 starts at 0.5
    h.results()
    h.tick(1.0)  # task 1's time: task 2 runs now and must not be touched
    assert h.started == [0] and h.results() == []
    assert h.running_task() == task_id(2)
    h.tick(1.5)
    [result] = h.results()
    assert result.task_id == task_id(2) and isinstance(load_failure(result)[0], TaskTimeoutError)


# ----------------------------------------------------------------------------- cancel and balance


def test_cancel_queued_running_unknown_and_finished_tasks():
    h = Harness(inline_threshold_bytes=0, prefetch_tasks=1)
    h.assign(make_task(1), make_task(2), make_task(3), make_task(4))
    h.answer_gets()
    h.finish(payload=b"result")  # task 1 is now being stored: finished
    h.answer_gets()
    assert h.running_task() == task_id(2)
    ids = [task_id(n) for n in (2, 4, 1, 77)]
    h.handle(FromScheduler(m.TaskCancel(ids)))
    [confirm] = h.take(m.TaskCancelConfirm)
    assert confirm.task_ids == ids
    assert confirm.cancelled == [True, True, False, False]
    assert h.started == [0, 1]  # the processor running task 2 was replaced
    h.answer_gets()
    assert h.running_task() == task_id(3)
    h.finish()
    h.answer_puts()
    finished = {r.task_id for r in h.results()}
    assert finished == {task_id(1), task_id(3)}  # no result for the cancelled tasks


def test_cancelled_staged_task_releases_its_objects():
    h = Harness(prefetch_tasks=2)
    object_id = b"O" * 16
    h.storage[object_id] = b"data"
    h.assign(make_task(1), make_task(2, arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)]))
    h.answer_gets()
    assert h.core.held_object_count == 1
    h.handle(FromScheduler(m.TaskCancel([task_id(2)])))
    assert h.core.held_object_count == 0


def test_balance_gives_back_lowest_priority_newest_first_never_the_running_task():
    h = Harness()
    h.assign(make_task(1, priority=0))
    h.answer_gets()
    h.assign(make_task(2, priority=0), make_task(3, priority=2), make_task(4, priority=0), make_task(5, priority=1))
    h.handle(FromScheduler(m.BalanceRequest(3)))
    [response] = h.take(m.BalanceResponse)
    assert response.task_ids == [task_id(4), task_id(2), task_id(5)]
    assert h.core.queued_count == 1
    assert h.run_all() == [task_id(1), task_id(3)]


def test_balance_with_nothing_waiting_answers_an_empty_list():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.handle(FromScheduler(m.BalanceRequest(5)))
    [response] = h.take(m.BalanceResponse)
    assert response.task_ids == []
    assert h.running_task() == task_id(1)


def test_results_held_for_company_leave_with_a_cancel_confirm_before_it():
    h = Harness(result_batch_seconds=0.005)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.finish()
    assert h.to_scheduler == []  # held: tasks are queued
    h.handle(FromScheduler(m.TaskCancel([task_id(1), task_id(3)])))
    kinds = [type(message) for message in h.to_scheduler]
    assert kinds == [m.TaskResultBatch, m.TaskCancelConfirm]
    assert h.take(m.TaskCancelConfirm) == [m.TaskCancelConfirm([task_id(1), task_id(3)], [False, True])]


def test_counts_for_heartbeats():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    assert (h.core.queued_count, h.runner.running) == (3, 0)
    h.answer_gets()
    assert (h.core.queued_count, h.runner.running) == (2, 1)
    h.run_all()
    assert (h.core.queued_count, h.runner.running) == (0, 0)


# ----------------------------------------------------------------------------- the lifecycle table


def test_every_non_terminal_state_answers_a_cancel_and_a_new_attempt():
    for state in set(TaskState) - TASK_LIFECYCLE.terminal:
        assert TaskEvent.CANCEL in TASK_LIFECYCLE.events_from(state)
        assert TaskEvent.REASSIGNED in TASK_LIFECYCLE.events_from(state)


def test_an_event_a_state_has_no_transition_for_raises_with_the_recent_events():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()  # task 1 runs, task 2 is staged
    expected = f"worker task {task_id(2).hex()}: no transition from staged on result; recent events: stage"
    with pytest.raises(TransitionError, match=expected):
        h.core.finished(task_id(2), m.TaskStatus.SUCCESS, b"", "", None, "", 0.0)  # a result of what never ran


def test_what_a_task_prints_goes_to_its_client_in_one_batch_per_processor_message():
    from scaler.worker.processor_protocol import TaskOutputText

    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    out, err = m.OutputStream.STDOUT, m.OutputStream.STDERR
    h.tell([TaskOutputText(task_id(1), out, "a\n"), TaskOutputText(task_id(1), err, "b\n")])
    (batch,) = h.take(m.TaskOutputBatch)
    assert batch.outputs == [m.TaskOutput(task_id(1), CLIENT, out, "a\n"), m.TaskOutput(task_id(1), CLIENT, err, "b\n")]
    h.finish()
    h.tell(TaskOutputText(task_id(1), out, "printed by a thread after the end\n"))  # dropped: the task is gone
    assert h.take(m.TaskOutputBatch) == [] and [r.task_id for r in h.results()] == [task_id(1)]
