"""The worker agent's sans-I/O core, driven directly: no sockets, no processes."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import cloudpickle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError, ObjectNotFoundError, ObjectStorageRefusedError
from scaler.worker.processor_protocol import FUNCTION_CACHE_CAPACITY, ProcessorBlocked, ProcessorResult
from scaler.worker.worker_state import (
    RunTask,
    SendToScheduler,
    SendToStorage,
    StartProcessor,
    StartTaskTimer,
    StopProcessor,
    WorkerState,
)

CLIENT = b"C|test|1|000000000000"
FUNCTION = b"F" * 16


def task_id(number: int) -> bytes:
    return number.to_bytes(16, "big")


def make_task(
    number: int,
    priority: int = 0,
    attempt: int = 1,
    function_id: bytes = FUNCTION,
    arguments: Sequence[m.Argument] = (),
    serializer_id: bytes = b"",
    timeout_seconds: float = 0.0,
) -> m.Task:
    return m.Task(
        task_id=task_id(number),
        client_id=CLIENT,
        function_id=function_id,
        arguments=list(arguments) or [m.Argument("", m.ArgumentKind.INLINE, cloudpickle.dumps(number))],
        priority=priority,
        attempt=attempt,
        serializer_id=serializer_id,
        timeout_seconds=timeout_seconds,
    )


class Harness:
    """Drives a WorkerState and plays the storage server's and the processor's parts by hand."""

    def __init__(self, **options: Any) -> None:
        self.state = WorkerState(**options)
        self.now = 0.0
        self.storage: Dict[bytes, bytes] = {FUNCTION: b"function bytes"}
        self.running: Dict[int, RunTask] = {}
        self.started: List[int] = []
        self.stopped: List[Tuple[int, bool]] = []
        self.timers: List[StartTaskTimer] = []
        self.to_scheduler: List[Any] = []
        self.gets: List[m.ObjectRequest] = []
        self.puts: List[Tuple[m.ObjectRequest, List[bytes]]] = []
        self.perform(self.state.start())

    def perform(self, effects: List[Any]) -> None:
        for effect in effects:
            if isinstance(effect, StartProcessor):
                self.started.append(effect.processor_id)
                self.running.pop(effect.processor_id, None)
            elif isinstance(effect, StopProcessor):
                assert effect.processor_id in self.started
                self.stopped.append((effect.processor_id, effect.kill))
                assert effect.kill or effect.processor_id not in self.running, "a busy processor is only killed"
                self.running.pop(effect.processor_id, None)
            elif isinstance(effect, RunTask):
                assert effect.processor_id not in self.running, "two tasks at once on one processor"
                self.running[effect.processor_id] = effect
            elif isinstance(effect, StartTaskTimer):
                self.timers.append(effect)
            elif isinstance(effect, SendToScheduler):
                self.to_scheduler.append(effect.message)
            elif isinstance(effect, SendToStorage):
                if effect.message.kind == m.ObjectRequestKind.GET:
                    self.gets.append(effect.message)
                else:
                    self.puts.append((effect.message, effect.blobs))
            else:
                raise AssertionError(f"unknown effect {effect!r}")

    def flush(self) -> None:
        self.perform(self.state.flush(self.now))

    def step(self, effects: List[Any]) -> None:
        """Perform an event's effects, then the end-of-turn flush, as the shell does."""
        self.perform(effects)
        self.flush()

    def assign(self, *tasks: m.Task) -> None:
        self.step(self.state.on_task_batch(m.TaskBatch(list(tasks))))

    def answer_gets(self) -> None:
        """The storage server answers every get request sent so far."""
        while self.gets:
            request = self.gets.pop(0)
            statuses = [
                m.ObjectStatus.OK if i in self.storage else m.ObjectStatus.NOT_FOUND for i in request.object_ids
            ]
            blobs = [self.storage[i] for i in request.object_ids if i in self.storage]
            response = m.ObjectResponse(request.request_id, m.ObjectRequestKind.GET, request.object_ids, statuses)
            self.step(self.state.on_object_response(response, blobs))

    def answer_puts(self, status: m.ObjectStatus = m.ObjectStatus.OK, reason: str = "") -> None:
        while self.puts:
            request, blobs = self.puts.pop(0)
            if status == m.ObjectStatus.OK:
                for object_id, blob in zip(request.object_ids, blobs, strict=True):
                    self.storage[object_id] = blob
            statuses = [status] * len(request.object_ids)
            response = m.ObjectResponse(
                request.request_id, m.ObjectRequestKind.PUT, request.object_ids, statuses, reason=reason
            )
            self.step(self.state.on_object_response(response, []))

    def running_task(self, processor_id: int = 0) -> Optional[bytes]:
        run = self.running.get(processor_id)
        return run.task.task_id if run is not None else None

    def finish(
        self, processor_id: int = 0, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: bytes = b"ok", text=""
    ) -> None:
        run = self.running.pop(processor_id)
        result = ProcessorResult(run.task.task_id, status, payload, text, None)
        self.step(self.state.on_processor_result(processor_id, result))

    def block(self, processor_id: int = 0, blocked: bool = True) -> None:
        notice = ProcessorBlocked(self.running[processor_id].task.task_id, blocked)
        self.step(self.state.on_processor_message(processor_id, notice))

    def results(self) -> List[m.TaskResult]:
        found = [r for message in self.to_scheduler if isinstance(message, m.TaskResultBatch) for r in message.results]
        self.to_scheduler = [message for message in self.to_scheduler if not isinstance(message, m.TaskResultBatch)]
        return found

    def take(self, message_type: type) -> List[Any]:
        found = [message for message in self.to_scheduler if isinstance(message, message_type)]
        self.to_scheduler = [message for message in self.to_scheduler if not isinstance(message, message_type)]
        return found

    def run_all(self) -> List[bytes]:
        """Answer fetches and finish tasks until nothing is left; the order the tasks ran in."""
        order = []
        for _ in range(1000):
            self.answer_gets()
            if self.running_task() is None:
                break
            order.append(self.running_task())
            self.finish()
        return order


def load_failure(result: m.TaskResult) -> Tuple[BaseException, str]:
    assert result.status == m.TaskStatus.FAILED
    assert result.payload_kind == m.PayloadKind.INLINE
    return cloudpickle.loads(result.payload)


# ----------------------------------------------------------------------------- queue order


def test_starts_one_processor_and_runs_nothing_until_the_function_arrives():
    h = Harness()
    assert h.started == [0]
    h.assign(make_task(1))
    assert h.running_task() is None
    assert [g.object_ids for g in h.gets] == [[FUNCTION]]
    h.answer_gets()
    assert h.running_task() == task_id(1)
    assert h.running[0].task.function == b"function bytes"


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


def test_function_is_fetched_once_and_sent_to_the_processor_once():
    h = Harness()
    h.assign(*(make_task(n) for n in range(1, 6)))
    h.answer_gets()
    fetched = [object_id for request in h.gets for object_id in request.object_ids]
    sent_bytes = []
    for _ in range(5):
        sent_bytes.append(h.running[0].task.function)
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
    assert h.running[0].task.arguments == [("x", b"payload of " + objects[0])]


def test_object_arguments_are_released_once_used():
    h = Harness(prefetch_tasks=1)
    object_id = b"O" * 16
    h.storage[object_id] = b"big"
    h.assign(make_task(1, arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)]))
    h.answer_gets()
    assert h.running[0].task.arguments == [("", b"big")]
    assert h.state.cached_object_count == 0
    assert h.state.pending_fetch_count == 0


def test_serializer_is_fetched_and_sent_once():
    h = Harness()
    serializer_id = b"S" * 16
    h.storage[serializer_id] = b"serializer bytes"
    h.assign(make_task(1, serializer_id=serializer_id), make_task(2, serializer_id=serializer_id))
    h.answer_gets()
    assert h.running[0].task.serializer == b"serializer bytes"
    h.finish()
    h.answer_gets()
    assert h.running[0].task.serializer_id == serializer_id
    assert h.running[0].task.serializer is None


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
        assert h.running[0].task.function == b"code of " + function_id
        h.finish()
    number += 1
    h.assign(make_task(number, function_id=functions[0]))  # now it is cached again
    h.answer_gets()
    assert h.running[0].task.function is None


# ----------------------------------------------------------------------------- results


def test_results_echo_the_attempt_and_travel_in_one_batch_per_flush():
    h = Harness()
    h.assign(make_task(1, attempt=7))
    h.answer_gets()
    run = h.running.pop(0)
    effects = h.state.on_processor_result(0, ProcessorResult(run.task.task_id, m.TaskStatus.SUCCESS, b"v", "", None))
    h.perform(effects)
    assert h.results() == []  # nothing leaves before the flush
    h.flush()
    [batch] = h.take(m.TaskResultBatch)
    [result] = batch.results
    assert (result.task_id, result.attempt, result.status) == (task_id(1), 7, m.TaskStatus.SUCCESS)
    assert (result.payload_kind, result.payload) == (m.PayloadKind.INLINE, b"v")


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


def test_missing_function_fails_the_task_and_the_next_one_runs():
    h = Harness()
    missing = b"M" * 16
    h.assign(make_task(1, function_id=missing), make_task(2))
    h.answer_gets()
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ObjectNotFoundError)
    assert str(error) == f"object {missing.hex()} not found in object storage"
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


def test_unanswered_fetch_fails_its_tasks_after_the_storage_timeout():
    h = Harness(storage_timeout_seconds=5)
    h.assign(make_task(1))
    h.now = 4.9
    h.step(h.state.on_tick(h.now))
    assert h.results() == []
    h.now = 5.0
    h.step(h.state.on_tick(h.now))
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
    h.step(h.state.on_processor_died(0, "processor exited with code 3"))
    [result] = h.results()
    assert (result.task_id, result.status, result.attempt) == (task_id(1), m.TaskStatus.WORKER_DIED, 2)
    assert result.error_text == "processor exited with code 3"
    assert h.started == [0, 0]
    assert h.running_task() == task_id(2)
    assert h.running[0].task.function == b"function bytes"  # the new processor has an empty cache


def test_results_written_before_the_processor_died_count():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    run = h.running.pop(0)
    last = [ProcessorResult(run.task.task_id, m.TaskStatus.SUCCESS, b"done", "", None)]
    h.step(h.state.on_processor_died(0, "processor was killed by signal SIGKILL", last))
    [result] = h.results()
    assert (result.task_id, result.status) == (task_id(1), m.TaskStatus.SUCCESS)
    assert h.running_task() == task_id(2)  # on the new processor, not blamed for the old one's death


def test_timeout_kills_the_processor_and_fails_the_task():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=0.5), make_task(2))
    h.answer_gets()
    [timer] = h.timers
    assert timer.seconds == 0.5
    h.step(h.state.on_task_timer(timer.processor_id, timer.run))
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, TimeoutError)
    assert h.started == [0, 0] and h.running_task() == task_id(2)


def test_timer_of_a_finished_task_does_nothing():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=1), make_task(2, timeout_seconds=1))
    h.answer_gets()
    first = h.timers[0]
    h.finish()
    h.step(h.state.on_task_timer(first.processor_id, first.run))  # task 2 runs now: must not be touched
    assert h.started == [0]
    assert h.running_task() == task_id(2)


# ----------------------------------------------------------------------------- cancel and balance


def test_cancel_queued_running_unknown_and_finished_tasks():
    h = Harness(inline_threshold_bytes=0, prefetch_tasks=1)
    h.assign(make_task(1), make_task(2), make_task(3), make_task(4))
    h.answer_gets()
    h.finish(payload=b"result")  # task 1 is now being stored: finished
    h.answer_gets()
    assert h.running_task() == task_id(2)
    ids = [task_id(n) for n in (2, 4, 1, 77)]
    h.step(h.state.on_task_cancel(m.TaskCancel(ids)))
    [confirm] = h.take(m.TaskCancelConfirm)
    assert confirm.task_ids == ids
    assert confirm.cancelled == [True, True, False, False]
    assert h.started == [0, 0]  # the processor running task 2 was replaced
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
    assert h.state.cached_object_count == 1
    h.step(h.state.on_task_cancel(m.TaskCancel([task_id(2)])))
    assert h.state.cached_object_count == 0


def test_balance_gives_back_lowest_priority_newest_first_never_the_running_task():
    h = Harness()
    h.assign(make_task(1, priority=0))
    h.answer_gets()
    h.assign(make_task(2, priority=0), make_task(3, priority=2), make_task(4, priority=0), make_task(5, priority=1))
    h.step(h.state.on_balance_request(m.BalanceRequest(3)))
    [response] = h.take(m.BalanceResponse)
    assert response.task_ids == [task_id(4), task_id(2), task_id(5)]
    assert h.state.queued_count == 1
    assert h.run_all() == [task_id(1), task_id(3)]


def test_balance_with_nothing_waiting_answers_an_empty_list():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.step(h.state.on_balance_request(m.BalanceRequest(5)))
    [response] = h.take(m.BalanceResponse)
    assert response.task_ids == []
    assert h.running_task() == task_id(1)


def test_results_leave_before_the_cancel_confirm_of_the_same_turn():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    run = h.running.pop(0)
    h.perform(h.state.on_processor_result(0, ProcessorResult(run.task.task_id, m.TaskStatus.SUCCESS, b"v", "", None)))
    h.perform(h.state.on_task_cancel(m.TaskCancel([task_id(1)])))
    h.flush()
    kinds = [type(message) for message in h.to_scheduler]
    assert kinds == [m.TaskResultBatch, m.TaskCancelConfirm]


def test_counts_for_heartbeats():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    assert (h.state.queued_count, h.state.running_count) == (3, 0)
    h.answer_gets()
    assert (h.state.queued_count, h.state.running_count) == (2, 1)
    h.run_all()
    assert (h.state.queued_count, h.state.running_count) == (0, 0)


# ----------------------------------------------------------------------------- nested tasks


def test_a_blocked_task_frees_the_slot_for_the_next_one_on_a_new_processor():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    assert h.running_task(0) == task_id(1) and h.started == [0]
    h.block(0)
    assert h.started == [0, 1]
    assert h.running_task(1) == task_id(2)
    assert h.running[1].task.function == b"function bytes"  # a new processor: its cache is empty
    assert (h.state.running_count, h.state.blocked_count, h.state.queued_count) == (2, 1, 0)
    h.finish(1)
    assert h.stopped == []  # one idle processor is kept
    h.block(0, blocked=False)
    h.finish(0)
    assert h.stopped == [(1, False)]  # the second idle one is stopped
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(1)]


def test_nested_tasks_of_any_depth_progress_on_one_worker():
    """A parent waits for its child, which waits for its child...: each waiting task frees the slot."""
    h = Harness()
    depth = 10
    h.assign(make_task(0))
    h.answer_gets()
    for level in range(1, depth):
        processor = next(p for p, run in h.running.items() if run.task.task_id == task_id(level - 1))
        h.block(processor)  # the task of this level submitted its child and waits for it
        h.assign(make_task(level))
        h.answer_gets()
        assert task_id(level) in {run.task.task_id for run in h.running.values()}
    assert h.state.blocked_count == depth - 1
    for level in reversed(range(depth)):  # the deepest finishes first, then each parent in turn
        processor = next(p for p, run in h.running.items() if run.task.task_id == task_id(level))
        if level < depth - 1:
            h.block(processor, blocked=False)
        h.finish(processor)
    assert len(h.results()) == depth
    assert len(h.started) - len(h.stopped) == 1  # back to one processor


def test_blocked_processors_are_bounded():
    h = Harness(max_processors=2)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.block(0)
    h.block(1)
    assert h.started == [0, 1]
    assert h.state.queued_count == 1  # waits for a processor


def test_an_unblocked_task_runs_beside_the_one_that_took_its_slot():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.block(0)
    h.block(0, blocked=False)
    assert set(h.running) == {0, 1}
    h.finish(1)
    assert h.running_task(1) is None  # both were busy: task 3 waits for the slot
    h.finish(0)
    h.answer_gets()
    assert task_id(3) in {run.task.task_id for run in h.running.values()}


def test_cancel_of_a_blocked_task_stops_its_processor_without_replacing_it():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.block(0)
    h.step(h.state.on_task_cancel(m.TaskCancel([task_id(1)])))
    assert h.stopped == [(0, True)]
    assert h.started == [0, 1]
    assert h.running_task(1) == task_id(2)


def test_blocked_notice_of_a_finished_task_is_ignored():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    stale = ProcessorBlocked(task_id(1), True)
    h.finish(0)
    h.answer_gets()
    h.step(h.state.on_processor_message(0, stale))
    assert h.started == [0] and h.state.blocked_count == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_event_sequences_answer_every_task_exactly_once(rng):
    """Whatever happens, every assigned task gets exactly one answer: a result, a cancel confirmation that
    says cancelled, or a place in a balance response; and the worker ends with one idle processor."""
    h = Harness(
        inline_threshold_bytes=rng.choice([0, 4, 1 << 20]),
        prefetch_tasks=rng.randint(1, 4),
        max_processors=rng.randint(1, 4),
    )
    h.storage[b"S" * 16] = b"serializer"
    assigned = set()
    answered: Dict[bytes, int] = {}
    next_number = 1
    for _ in range(150):
        action = rng.random()
        if action < 0.3:
            tasks = []
            for _ in range(rng.randint(1, 4)):
                function_id = rng.choice([FUNCTION, FUNCTION, b"M" * 16])
                tasks.append(make_task(next_number, rng.randint(0, 3), function_id=function_id))
                assigned.add(task_id(next_number))
                next_number += 1
            h.assign(*tasks)
        elif action < 0.5:
            h.answer_gets()
        elif action < 0.6:
            h.answer_puts(rng.choice([m.ObjectStatus.OK, m.ObjectStatus.STORAGE_FULL]))
        elif action < 0.75 and h.running:
            processor = rng.choice(sorted(h.running))
            status = rng.choice([m.TaskStatus.SUCCESS, m.TaskStatus.FAILED])
            h.finish(processor, status=status, payload=b"abcdef")
        elif action < 0.78 and h.running:
            h.block(rng.choice(sorted(h.running)), blocked=rng.random() < 0.7)
        elif action < 0.8:
            processor = rng.choice(h.state.processor_ids)
            h.step(h.state.on_processor_died(processor, "processor was killed by signal SIGKILL"))
        elif action < 0.9 and assigned:
            ids = rng.sample(sorted(assigned), min(len(assigned), 2))
            h.step(h.state.on_task_cancel(m.TaskCancel(ids)))
        else:
            h.step(h.state.on_balance_request(m.BalanceRequest(rng.randint(0, 3))))
        for result in h.results():
            answered[result.task_id] = answered.get(result.task_id, 0) + 1
        for confirm in h.take(m.TaskCancelConfirm):
            for tid, cancelled in zip(confirm.task_ids, confirm.cancelled, strict=True):
                if cancelled:
                    answered[tid] = answered.get(tid, 0) + 1
        for response in h.take(m.BalanceResponse):
            for tid in response.task_ids:
                answered[tid] = answered.get(tid, 0) + 1
    # drain: let everything still here finish
    for _ in range(500):
        h.answer_gets()
        h.answer_puts()
        for processor in sorted(h.running):
            h.finish(processor)
        for result in h.results():
            answered[result.task_id] = answered.get(result.task_id, 0) + 1
        if h.state.queued_count == 0 and h.state.running_count == 0 and not h.puts and not h.gets:
            break
    assert all(count == 1 for count in answered.values()), answered
    assert set(answered) == assigned
    assert len(h.state.processor_ids) == 1 and set(h.started) - {p for p, _ in h.stopped} == set(h.state.processor_ids)
