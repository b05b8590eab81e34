"""The worker agent's sans-I/O core, driven directly: no sockets, no processes.

The harness plays the storage server and the processor. Its processor model
reads its pipe when the real one does (when idle, between two tasks, or inside
a task's wait), keeps the tasks sent ahead in a FIFO that it runs in order at
the top of its stack, and answers a Drop of a task still in its FIFO, so the
tests see the same interleavings as a real worker, including a task sent just
before the processor asks to resume a waiting task.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import cloudpickle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.client.serializer import DefaultSerializer, serialize_payload
from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
    TaskTimeoutError,
)
from scaler.worker.lru_cache import SizedLRUCache
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    Drop,
    Dropped,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
    WaitEnded,
)
from scaler.worker.worker_state import (
    SendToProcessor,
    SendToScheduler,
    SendToStorage,
    StartProcessor,
    StartTaskTimer,
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


class _Frame:
    """A task on the model processor's stack: running, waiting (in its wait loop) or resuming (asked to
    resume, reading its pipe until WaitEnded)."""

    def __init__(self, task: ProcessorTask) -> None:
        self.task = task
        self.state = "running"
        self.wait_ended = False  # resuming, and WaitEnded came (read by a wait of a task above)


class Harness:
    """Drives a WorkerState and plays the storage server's and the processor's parts by hand."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("pipeline_depth", 0)  # one task at a time, as before the pipeline; tests of it say so
        self.state = WorkerState(**options)
        self.now = 0.0
        self.storage: Dict[bytes, bytes] = {FUNCTION: b"function bytes"}
        self.processor = -1
        self.pipe: List[Any] = []  # sent to the model processor, not read yet
        self.stack: List[_Frame] = []  # the model processor's stack, the top one last
        self.fifo: List[ProcessorTask] = []  # the tasks sent ahead, not started
        self.notices: List[Any] = []  # Dropped notices written by the model processor, not handed over yet
        self.messages: List[Any] = []  # every Pipe message the model processor read
        self.hold = False  # the model processor does not read its pipe (to stage races)
        self.started: List[int] = []
        self.timers: List[StartTaskTimer] = []
        self.to_scheduler: List[Any] = []
        self.gets: List[m.ObjectRequest] = []
        self.puts: List[Tuple[m.ObjectRequest, List[bytes]]] = []
        self.perform(self.state.start())

    # --- effects

    def perform(self, effects: List[Any]) -> None:
        for effect in effects:
            if isinstance(effect, StartProcessor):
                assert effect.processor_id not in self.started, "processor IDs are not reused"
                self.started.append(effect.processor_id)
                self.processor = effect.processor_id
                self.pipe, self.stack, self.fifo, self.notices = [], [], [], []  # the old one is killed
            elif isinstance(effect, SendToProcessor):
                assert effect.processor_id == self.processor
                self.pipe.append(effect.message)
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
        self.pump()

    def pump(self) -> None:
        """The model processor reads its pipe while it can (idle, between two tasks, or inside a task's wait)
        and starts the head of its FIFO when idle; then the notices it wrote reach the agent."""
        while True:
            if self.pipe and not self.hold and (not self.stack or self.stack[-1].state != "running"):
                message = self.pipe.pop(0)
                self.messages.append(message)
                for each in message if isinstance(message, list) else [message]:
                    self._read(each, ahead=isinstance(message, list))
            elif not self.stack and self.fifo:
                self.stack.append(_Frame(self.fifo.pop(0)))
            else:
                break
        if self.notices:  # written together, read together
            notices, self.notices = self.notices, []
            self.tell(notices if len(notices) > 1 else notices[0])

    def _read(self, message: Any, ahead: bool) -> None:
        if isinstance(message, WaitEnded):
            [frame] = [frame for frame in self.stack if frame.task.task_id == message.task_id]
            assert frame.state == "resuming", message
            frame.wait_ended = True
            self._resume_top()
        elif isinstance(message, Drop):
            found = [task for task in self.fifo if task.task_id == message.task_id]
            if found:
                self.fifo.remove(found[0])
                self.notices.append(Dropped(message.task_id))
        else:
            assert isinstance(message, ProcessorTask)
            if ahead or not self.stack:
                self.fifo.append(message)
            else:
                self.stack.append(_Frame(message))  # a single task in a wait: it runs nested

    def _resume_top(self) -> None:
        if self.stack and self.stack[-1].wait_ended:
            self.stack[-1].state, self.stack[-1].wait_ended = "running", False

    def flush(self) -> None:
        self.perform(self.state.flush(self.now))

    def step(self, effects: List[Any]) -> None:
        """Perform an event's effects, then the end-of-turn flush, as the shell does."""
        self.perform(effects)
        self.flush()

    # --- the scheduler and the storage server

    def assign(self, *tasks: m.Task) -> None:
        self.step(self.state.on_task_batch(m.TaskBatch(list(tasks))))

    def cancel(self, *numbers: int) -> m.TaskCancelConfirm:
        self.step(self.state.on_task_cancel(m.TaskCancel([task_id(n) for n in numbers])))
        [confirm] = self.take(m.TaskCancelConfirm)
        return confirm

    def balance(self, count: int) -> List[bytes]:
        self.step(self.state.on_balance_request(m.BalanceRequest(count)))
        [response] = self.take(m.BalanceResponse)
        return response.task_ids

    def answer_gets(self) -> None:
        """The storage server answers every get request sent so far."""
        while self.gets:
            request = self.gets.pop(0)
            statuses = [
                m.ObjectStatus.OK if i in self.storage else m.ObjectStatus.NOT_FOUND for i in request.object_ids
            ]
            blobs, counts = object_frames.pack([self.storage[i] for i in request.object_ids if i in self.storage])
            response = m.ObjectResponse(request.request_id, m.ObjectRequestKind.GET, request.object_ids, statuses)
            response.frame_counts = counts
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

    # --- the processor

    def top(self) -> Optional[ProcessorTask]:
        return self.stack[-1].task if self.stack else None

    def fifo_ids(self) -> List[bytes]:
        return [task.task_id for task in self.fifo]

    def running_task(self) -> Optional[bytes]:
        """The task that runs (on top of the stack, not waiting), if any."""
        if self.stack and self.stack[-1].state == "running":
            return self.stack[-1].task.task_id
        return None

    def stack_ids(self) -> List[bytes]:
        return [frame.task.task_id for frame in self.stack]

    def processor_finishes(
        self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: bytes = b"ok", text: str = ""
    ) -> ProcessorResult:
        """The top task returns: its result, not handed to the agent yet."""
        frame = self.stack[-1]
        assert frame.state == "running", "only a running task finishes"
        self.stack.pop()
        self._resume_top()
        return ProcessorResult(frame.task.task_id, status, payload, text, None)

    def tell(self, message: Any) -> None:
        self.step(self.state.on_processor_message(self.processor, message))

    def finish(self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: bytes = b"ok", text: str = "") -> None:
        self.tell(self.processor_finishes(status, payload, text))

    def wait(self) -> None:
        """The top task waits inside the client: it can take another task."""
        frame = self.stack[-1]
        assert frame.state == "running"
        frame.state = "waiting"
        self.tell(TaskWaiting(frame.task.task_id, True))

    def resume(self) -> None:
        """What the top task waited for is done: it asks to resume."""
        frame = self.stack[-1]
        assert frame.state == "waiting"
        frame.state = "resuming"
        self.tell(TaskWaiting(frame.task.task_id, False))

    def die(self, cause: str, last: Sequence[Any] = ()) -> None:
        self.step(self.state.on_processor_died(self.processor, cause, last))

    def fire_timer(self, number: int) -> None:
        [timer] = [t for t in self.timers if t.task_id == task_id(number)]
        self.step(self.state.on_task_timer(timer.task_id, timer.run))

    # --- what the scheduler received

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
    assert h.state.cached_object_count == 0
    assert h.state.pending_fetch_count == 0


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


def test_results_echo_the_attempt_and_travel_in_one_batch_per_flush():
    h = Harness()
    h.assign(make_task(1, attempt=7))
    h.answer_gets()
    h.perform(h.state.on_processor_message(0, h.processor_finishes(payload=b"v")))
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
    [timer] = h.timers
    assert timer.seconds == 0.5
    h.step(h.state.on_task_timer(timer.task_id, timer.run))
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, TaskTimeoutError)
    assert str(error) == f"task {task_id(1).hex()} exceeded its timeout of 0.5 seconds"
    assert h.started == [0, 1] and h.running_task() == task_id(2)


def test_timer_of_a_finished_task_does_nothing():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=1), make_task(2, timeout_seconds=1))
    h.answer_gets()
    first = h.timers[0]
    h.finish()
    h.step(h.state.on_task_timer(first.task_id, first.run))  # task 2 runs now: must not be touched
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
    h.perform(h.state.on_processor_message(0, h.processor_finishes()))
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


def test_a_waiting_task_frees_the_slot_and_the_next_task_runs_on_top_of_it():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    assert h.running_task() == task_id(1) and h.state.queued_count == 1
    h.wait()
    assert h.stack_ids() == [task_id(1), task_id(2)] == h.state.stack
    assert h.top().function is None  # the same processor: it has the function already
    assert (h.state.running_count, h.state.suspended_count, h.state.queued_count) == (1, 1, 0)
    h.finish()
    assert (h.state.running_count, h.state.suspended_count) == (0, 1)  # task 1 still waits
    h.resume()
    assert h.pipe == [] and h.running_task() == task_id(1)
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(1)]
    assert h.started == [0]  # never another processor


def test_on_top_of_a_waiting_task_the_newest_task_runs_first():
    h = Harness(prefetch_tasks=1)
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3, priority=1), make_task(4))  # 4 is the newest at priority 0
    h.wait()
    h.answer_gets()
    assert h.running_task() == task_id(3)  # priority first
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(4)  # then the newest: most likely what task 1 waits for
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(2)


def test_recursion_of_depth_50_runs_on_one_processor():
    """Each level submits its child and waits for it: each child runs on top of its parent."""
    h = Harness()
    depth = 50
    h.assign(make_task(0))
    h.answer_gets()
    for level in range(1, depth):
        h.assign(make_task(level))  # submitted by the running level - 1...
        h.wait()  # ...which now waits for it
        assert h.running_task() == task_id(level)
    assert h.state.suspended_count == depth - 1 and len(h.stack) == depth
    for level in reversed(range(depth)):  # the deepest returns first, then each parent resumes and returns
        if level < depth - 1:
            h.resume()
        assert h.running_task() == task_id(level)
        h.finish(payload=bytes([level]))
    results = h.results()
    assert [r.task_id for r in results] == [task_id(n) for n in reversed(range(depth))]
    assert [r.payload for r in results] == [bytes([n]) for n in reversed(range(depth))]
    assert h.started == [0] and h.state.stack == []


def test_a_task_sent_just_before_the_resume_notice_runs_first_then_the_waiting_task_resumes():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.wait()
    h.hold = True  # the processor is busy checking its future...
    h.assign(make_task(2))  # ...when the agent sends it a task
    assert [type(message) for message in h.pipe] == [ProcessorTask]
    h.resume()  # then it finds its future done and asks to resume
    assert [type(message) for message in h.pipe] == [ProcessorTask, WaitEnded]
    h.assign(make_task(3))  # the slot is taken again: nothing more is sent
    assert len(h.pipe) == 2
    h.hold = False
    h.pump()
    assert h.running_task() == task_id(2)  # it runs above the resuming task
    h.finish()
    assert h.running_task() == task_id(1) and h.pipe == []  # WaitEnded read: task 1 goes on
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(3)
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(n) for n in (2, 1, 3)]


def test_a_task_sent_before_the_resume_notice_may_wait_and_nest_in_turn():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.wait()
    h.hold = True
    h.assign(make_task(2))
    h.resume()
    h.hold = False
    h.pump()
    h.assign(make_task(3))
    assert h.running_task() == task_id(2)
    h.wait()  # task 2 waits: WaitEnded of task 1 is still in the pipe, then task 3 comes
    assert h.stack_ids() == [task_id(1), task_id(2), task_id(3)] == h.state.stack
    h.finish()
    h.resume()
    h.finish()
    assert h.running_task() == task_id(1)
    h.finish()
    assert sorted(r.task_id for r in h.results()) == [task_id(n) for n in (1, 2, 3)]


def test_results_of_nested_tasks_answer_their_own_attempts():
    h = Harness()
    h.assign(make_task(1, attempt=3))
    h.answer_gets()
    h.assign(make_task(2, attempt=5))
    h.wait()
    h.finish(payload=b"child")
    h.resume()
    h.finish(payload=b"parent")
    assert [(r.task_id, r.attempt, r.payload) for r in h.results()] == [
        (task_id(2), 5, b"child"),
        (task_id(1), 3, b"parent"),
    ]


def test_a_result_that_is_not_the_top_of_the_stack_is_dropped():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.wait()
    h.tell(ProcessorResult(task_id(1), m.TaskStatus.SUCCESS, b"early", "", None))
    assert h.results() == [] and h.state.stack == [task_id(1), task_id(2)]


def test_messages_of_a_replaced_processor_are_dropped():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    old = h.processor
    h.cancel(1)
    h.answer_gets()
    h.step(h.state.on_processor_message(old, ProcessorResult(task_id(2), m.TaskStatus.SUCCESS, b"", "", None)))
    h.step(h.state.on_processor_died(old, "processor was killed by signal SIGKILL"))
    assert h.results() == [] and h.running_task() == task_id(2) and h.started == [0, 1]


def test_processor_death_ends_every_task_on_its_stack_with_worker_died():
    h = Harness()
    h.assign(make_task(1, attempt=2))
    h.answer_gets()
    h.assign(make_task(3), make_task(2, attempt=4))
    h.wait()
    h.die("processor was killed by signal SIGSEGV")
    results = {r.task_id: r for r in h.results()}
    assert set(results) == {task_id(1), task_id(2)}
    assert (results[task_id(2)].status, results[task_id(2)].attempt) == (m.TaskStatus.WORKER_DIED, 4)
    assert results[task_id(2)].error_text == "processor was killed by signal SIGSEGV"
    assert (results[task_id(1)].status, results[task_id(1)].attempt) == (m.TaskStatus.WORKER_DIED, 2)
    assert results[task_id(1)].error_text == (
        f"processor was killed by signal SIGSEGV, while task {task_id(2).hex()} ran above this one"
    )
    assert h.started == [0, 1] and h.running_task() == task_id(3)  # the queued task runs on the new one


def test_cancel_of_a_waiting_task_stops_the_processor_and_the_task_above_dies():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3))
    h.wait()
    assert h.state.stack == [task_id(1), task_id(3)]
    confirm = h.cancel(1)
    assert confirm.cancelled == [True]
    [died] = h.results()
    assert (died.task_id, died.status) == (task_id(3), m.TaskStatus.WORKER_DIED)
    assert died.error_text == f"its processor was stopped to cancel task {task_id(1).hex()}"
    assert h.started == [0, 1] and h.running_task() == task_id(2)


def test_cancel_of_several_tasks_on_one_stack_cancels_them_all_at_once():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2))
    h.wait()
    h.assign(make_task(3))
    h.wait()
    confirm = h.cancel(3, 1)
    assert confirm.cancelled == [True, True]
    [died] = h.results()
    assert died.task_id == task_id(2) and died.status == m.TaskStatus.WORKER_DIED
    assert task_id(1).hex() in died.error_text and task_id(3).hex() in died.error_text
    assert h.started == [0, 1]


def test_timeout_of_a_waiting_task_fails_it_and_the_tasks_above_die():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=2))
    h.answer_gets()
    h.assign(make_task(2))
    h.wait()
    h.fire_timer(1)
    results = {r.task_id: r for r in h.results()}
    error, _ = load_failure(results[task_id(1)])
    assert isinstance(error, TaskTimeoutError) and "timeout of 2 seconds" in str(error)
    assert results[task_id(2)].status == m.TaskStatus.WORKER_DIED
    assert results[task_id(2)].error_text == f"its processor was stopped: {error}"
    assert h.started == [0, 1]


def test_timer_of_a_task_nested_then_finished_does_nothing():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2, timeout_seconds=1))
    h.wait()
    h.finish()
    h.fire_timer(2)
    assert h.started == [0] and [r.task_id for r in h.results()] == [task_id(2)]


def test_balance_gives_back_queued_tasks_never_one_on_the_stack():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3), make_task(4), make_task(5))
    h.wait()  # task 5, the newest, now runs on top of task 1
    assert h.state.stack == [task_id(1), task_id(5)]
    # on top of a waiting task the newest run first, so the oldest would run last: they go back
    assert h.balance(10) == [task_id(2), task_id(3), task_id(4)]
    assert h.state.queued_count == 0
    h.finish()
    h.resume()
    h.finish()
    assert sorted(r.task_id for r in h.results()) == [task_id(1), task_id(5)]


def test_a_balance_racing_with_a_result_a_cancel_and_a_death_strands_nothing():
    h = Harness(prefetch_tasks=2)
    h.assign(make_task(1), make_task(2), make_task(3), make_task(4), make_task(5))
    h.answer_gets()
    result = h.processor_finishes()  # task 1 is done; its result is still in the pipe
    assert h.balance(2) == [task_id(5), task_id(4)]  # never task 1, which the agent still sees running
    h.tell(result)
    h.answer_gets()
    assert h.cancel(5, 2) == m.TaskCancelConfirm([task_id(5), task_id(2)], [False, True])  # 5 went back
    assert h.running_task() == task_id(3)  # on the processor that replaced the one task 2 ran on
    h.die("processor was killed by signal SIGKILL")
    assert h.balance(5) == []
    statuses = {r.task_id: r.status for r in h.results()}
    assert statuses == {task_id(1): m.TaskStatus.SUCCESS, task_id(3): m.TaskStatus.WORKER_DIED}
    assert h.state.queued_count == 0 and h.state.stack == []


def test_counts_for_heartbeats_with_a_stack():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.wait()
    assert (h.state.running_count, h.state.suspended_count, h.state.queued_count) == (1, 1, 1)
    h.wait()
    assert (h.state.running_count, h.state.suspended_count, h.state.queued_count) == (1, 2, 0)
    h.wait()
    assert (h.state.running_count, h.state.suspended_count, h.state.queued_count) == (0, 3, 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rng=st.randoms(use_true_random=False))
def test_random_event_sequences_answer_every_task_exactly_once(rng):
    """Whatever happens (tasks waiting and resuming, nested tasks, races with the pipe, deaths, cancels,
    balances, timeouts), every assigned task gets exactly one answer: a result, a cancel confirmation that
    says cancelled, or a place in a balance response; and the agent's view of the processor's stack is
    the processor's own."""
    h = Harness(
        inline_threshold_bytes=rng.choice([0, 4, 1 << 20]),
        prefetch_tasks=rng.randint(1, 4),
        pipeline_depth=rng.choice([0, 1, 2, 4]),
    )
    assigned = set()
    answered: Dict[bytes, int] = {}

    def collect() -> None:
        for result in h.results():
            answered[result.task_id] = answered.get(result.task_id, 0) + 1
        for confirm in h.take(m.TaskCancelConfirm):
            for tid, cancelled in zip(confirm.task_ids, confirm.cancelled, strict=True):
                if cancelled:
                    answered[tid] = answered.get(tid, 0) + 1
        for response in h.take(m.BalanceResponse):
            for tid in response.task_ids:
                answered[tid] = answered.get(tid, 0) + 1

    next_number = 1
    for _ in range(200):
        action = rng.random()
        top = h.stack[-1] if h.stack else None
        if action < 0.25:
            tasks = []
            for _ in range(rng.randint(1, 3)):
                function_id = rng.choice([FUNCTION, FUNCTION, FUNCTION, b"M" * 16])
                timeout = rng.choice([0, 0, 0, 5])
                tasks.append(
                    make_task(next_number, rng.randint(0, 2), function_id=function_id, timeout_seconds=timeout)
                )
                assigned.add(task_id(next_number))
                next_number += 1
            h.assign(*tasks)
        elif action < 0.35:
            h.answer_gets()
        elif action < 0.4:
            h.answer_puts(rng.choice([m.ObjectStatus.OK, m.ObjectStatus.STORAGE_FULL]))
        elif action < 0.55 and top is not None and top.state == "running":
            h.finish(status=rng.choice([m.TaskStatus.SUCCESS, m.TaskStatus.FAILED]), payload=b"abcdef")
        elif action < 0.65 and top is not None and top.state == "running":
            h.wait()
        elif action < 0.72 and top is not None and top.state == "waiting":
            h.resume()
        elif action < 0.76:
            h.hold = not h.hold
            h.pump()
        elif action < 0.78:
            h.die("processor was killed by signal SIGKILL")
        elif action < 0.8 and h.timers:
            timer = rng.choice(h.timers)
            h.step(h.state.on_task_timer(timer.task_id, timer.run))
        elif action < 0.9 and assigned:
            ids = rng.sample(sorted(assigned), min(len(assigned), rng.randint(1, 3)))
            h.step(h.state.on_task_cancel(m.TaskCancel(ids)))
        else:
            h.step(h.state.on_balance_request(m.BalanceRequest(rng.randint(0, 3))))
        collect()
        if not h.hold and not h.pipe:
            assert h.state.stack == h.stack_ids()
            assert h.state.inbox == h.fifo_ids()
    # drain: let everything still here finish
    h.hold = False
    h.pump()
    for _ in range(2000):
        h.answer_gets()
        h.answer_puts()
        if h.stack:
            top = h.stack[-1]
            if top.state == "running":
                h.finish()
            elif top.state == "waiting":
                h.resume()
        collect()
        if not (h.state.queued_count or h.stack or h.state.stack or h.puts or h.gets):
            break
    assert all(count == 1 for count in answered.values()), answered
    assert set(answered) == assigned
    assert h.state.stack == [] and h.pipe == []


# ----------------------------------------------------------------------------- pipeline to the processor


def pipelined(count: int, depth: int = 2, **options: Any) -> Harness:
    """A worker with ``count`` tasks (numbered from 1) whose first task finished quickly: task 2 runs and
    the next ``depth`` ones are sent ahead."""
    h = Harness(pipeline_depth=depth, **options)
    h.assign(*[make_task(n, timeout_seconds=options.pop("timeout", 0)) for n in range(1, count + 1)])
    h.answer_gets()
    h.finish()
    h.results()
    return h


def test_nothing_is_sent_ahead_before_a_task_was_seen_to_be_quick():
    h = Harness(pipeline_depth=2)
    h.assign(*[make_task(n) for n in range(1, 5)])
    h.answer_gets()
    assert h.running_task() == task_id(1) and h.state.inbox == [] and h.fifo == []


def test_while_a_task_runs_the_next_ones_are_sent_ahead_in_one_message():
    h = pipelined(6, depth=3)
    assert h.running_task() == task_id(2)
    assert h.state.inbox == h.fifo_ids() == [task_id(3), task_id(4), task_id(5)]
    assert h.messages[-1] == [h.stack[0].task, *h.fifo]  # task 2 and the three ahead: one Pipe message
    assert h.state.queued_count == 4 and h.state.phase_of(task_id(3)) == "sent"
    assert h.run_all() == [task_id(n) for n in range(2, 7)]
    assert [r.task_id for r in h.results()] == [task_id(n) for n in range(2, 7)]


def test_with_depth_zero_one_task_at_a_time():
    h = pipelined(4, depth=0)
    assert h.running_task() == task_id(2) and h.state.inbox == [] and h.fifo == []
    assert h.messages[-1] == [h.stack[0].task]


def test_a_slow_task_stops_the_sending_ahead():
    h = pipelined(8, depth=2)
    h.tell(h.processor_finishes()._replace(seconds=5.0))  # task 2 took long: task 3 starts, nothing more
    assert h.state.stack == [task_id(3)] and h.state.inbox == [task_id(4)]
    h.tell(h.processor_finishes())  # task 3 was quick again
    assert h.state.stack == [task_id(4)] and h.state.inbox == [task_id(5), task_id(6)]


def test_results_in_one_message_are_read_one_by_one():
    h = pipelined(6, depth=3)
    first = h.processor_finishes()
    h.pump()  # the processor starts task 3 from its FIFO without the agent
    second = h.processor_finishes()
    h.tell([first, second])
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(3)]
    assert h.state.stack == h.stack_ids() == [task_id(4)]
    assert h.state.inbox == h.fifo_ids() == [task_id(5), task_id(6)]


def test_the_timeout_of_a_task_sent_ahead_counts_from_its_start():
    h = Harness(pipeline_depth=2)
    h.assign(*[make_task(n, timeout_seconds=1.0) for n in range(1, 5)])
    h.answer_gets()
    h.finish()
    assert [t.task_id for t in h.timers] == [task_id(1), task_id(2)]  # tasks 3 and 4 were sent, not started
    h.finish()
    assert [t.task_id for t in h.timers] == [task_id(1), task_id(2), task_id(3)]
    h.fire_timer(3)
    [result] = h.results()[-1:]
    assert result.task_id == task_id(3) and isinstance(load_failure(result)[0], TaskTimeoutError)


def test_cancel_of_a_task_sent_ahead_is_confirmed_once_the_processor_dropped_it():
    h = pipelined(5, depth=2)
    h.hold = True  # the processor is busy with task 2: it reads the Drop later
    h.step(h.state.on_task_cancel(m.TaskCancel([task_id(4)])))
    assert h.take(m.TaskCancelConfirm) == []  # waits for the processor's answer
    assert h.pipe == [[Drop(task_id(4))]]
    h.hold = False
    h.pump()
    assert h.take(m.TaskCancelConfirm) == []  # the processor reads its pipe between two tasks
    h.finish()
    assert h.take(m.TaskCancelConfirm) == [m.TaskCancelConfirm([task_id(4)], [True])]
    assert h.started == [0]  # no processor was stopped
    assert h.state.stack == h.stack_ids() == [task_id(3)] and h.state.inbox == h.fifo_ids() == [task_id(5)]
    assert h.run_all() == [task_id(3), task_id(5)]
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(3), task_id(5)]


def test_cancel_of_the_next_task_sent_ahead_taken_for_started_but_dropped():
    h = pipelined(5, depth=2)
    h.step(h.state.on_task_cancel(m.TaskCancel([task_id(3)])))
    h.finish()  # the agent takes task 3 for started, then reads that the processor dropped it
    assert h.take(m.TaskCancelConfirm) == [m.TaskCancelConfirm([task_id(3)], [True])]
    assert h.state.stack == h.stack_ids() == [task_id(4)]
    assert h.run_all() == [task_id(4), task_id(5)]
    assert task_id(3) not in [r.task_id for r in h.results()]


def test_cancel_of_a_task_sent_ahead_that_started_meanwhile_is_answered_by_its_result():
    h = pipelined(5, depth=2)
    h.hold = True
    finished = h.processor_finishes()  # task 2 ends; the processor starts task 3 before it reads the Drop
    h.pump()
    assert h.running_task() == task_id(3)
    h.step(h.state.on_task_cancel(m.TaskCancel([task_id(3), task_id(5)])))  # 5: still queued
    assert h.take(m.TaskCancelConfirm) == []
    h.tell(finished)
    assert h.state.stack == [task_id(3)]  # taken for started: it was, the Drop comes too late
    h.hold = False
    h.finish(payload=b"three")
    assert [(r.task_id, r.payload) for r in h.results()] == [(task_id(2), b"ok"), (task_id(3), b"three")]
    assert h.take(m.TaskCancelConfirm) == [m.TaskCancelConfirm([task_id(3), task_id(5)], [False, True])]
    assert h.run_all() == [task_id(4)]


def test_cancel_of_the_running_task_puts_the_tasks_sent_ahead_back_without_a_death():
    h = pipelined(5, depth=2)
    assert h.cancel(2, 4) == m.TaskCancelConfirm([task_id(2), task_id(4)], [True, True])
    assert h.started == [0, 1]
    assert h.results() == []  # no WORKER_DIED for the tasks that had not started
    assert h.state.phase_of(task_id(4)) is None
    h.answer_gets()
    assert h.running_task() == task_id(3)  # first in line again, on the new processor
    assert h.top().function == b"function bytes"  # whose cache is empty
    assert h.run_all() == [task_id(3), task_id(5)]


def test_processor_death_kills_the_running_task_and_puts_the_tasks_sent_ahead_back():
    h = pipelined(5, depth=2)
    done = h.processor_finishes()  # task 2's result is in the pipe when the processor dies running task 3
    h.die("processor was killed by signal SIGKILL", [[done]])
    statuses = [(r.task_id, r.status) for r in h.results()]
    assert statuses == [(task_id(2), m.TaskStatus.SUCCESS), (task_id(3), m.TaskStatus.WORKER_DIED)]
    assert h.started == [0, 1]
    h.answer_gets()
    assert h.run_all() == [task_id(4), task_id(5)]


def test_a_waiting_task_takes_back_what_was_sent_ahead_and_nests_one_task_at_a_time():
    h = pipelined(5, depth=2)
    h.wait()  # task 2 waits, maybe on task 3 or 4: they come back and may run nested
    assert h.state.inbox == [] and h.fifo == []
    assert h.state.stack == h.stack_ids() == [task_id(2), task_id(5)]  # newest first on a waiting task
    h.wait()
    assert h.state.stack == h.stack_ids() == [task_id(2), task_id(5), task_id(4)]
    assert isinstance(h.messages[-1], ProcessorTask)  # single tasks, never a list, while nesting
    h.finish()
    assert h.state.inbox == []  # nothing sent ahead above a waiting task
    h.finish()
    assert h.state.stack == [task_id(2), task_id(5)]
    h.resume()
    h.finish()
    h.resume()
    assert h.run_all() == [task_id(2)]
    assert sorted(r.task_id for r in h.results()) == [task_id(n) for n in range(2, 6)]


def test_a_higher_priority_task_takes_back_the_lower_ones_sent_ahead():
    h = pipelined(5, depth=2)
    h.assign(make_task(9, priority=5))
    assert h.pipe == [[Drop(task_id(3)), Drop(task_id(4))]]  # read by the processor between two tasks
    assert h.run_all() == [task_id(2), task_id(9), task_id(3), task_id(4), task_id(5)]


# ----------------------------------------------------------------------------- object cache of the processor


def test_an_object_is_sent_to_the_processor_once_then_by_its_id():
    object_id = b"O" * 16
    h = Harness(pipeline_depth=0)
    h.storage[object_id] = b"shared"
    argument = m.Argument("", m.ArgumentKind.OBJECT, object_id)
    h.assign(make_task(1, arguments=[argument]), make_task(2, arguments=[argument]), make_task(3))
    h.answer_gets()
    assert h.top().arguments == [("", b"shared", object_id)]
    h.finish()
    assert h.top().arguments == [("", None, object_id)]  # the processor holds it
    assert h.gets == []  # and it was fetched once
    h.die("processor was killed by signal SIGKILL")  # task 2 dies; a new processor has an empty cache
    h.assign(make_task(4, arguments=[argument]))
    h.answer_gets()
    h.finish()
    assert h.top().arguments == [("", b"shared", object_id)]


@pytest.mark.parametrize("value", [b"b" * 100_000, bytearray(100_000), "not a pickle"])
def test_an_object_of_several_frames_crosses_to_the_processor_out_of_band_read_only_where_it_is_read(value):
    object_id = b"O" * 16
    if value == "not a pickle":  # a client's bug, or worse: the processor's deserialization will say so
        frames: List[Any] = [b"\x80\x05garbage", bytearray(100_000)]
    else:
        frames = serialize_payload(DefaultSerializer(), value)
    h = Harness(pipeline_depth=0)
    h.storage[object_id] = frames
    h.assign(make_task(1, arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)]))
    h.answer_gets()
    [(_, sent, _)] = h.top().arguments
    assert len(sent) == 2 and sent[0] == frames[0]
    buffer = sent[1].raw()  # what the Pipe writes out of band
    assert bytes(buffer) == bytes(memoryview(frames[1]))
    assert buffer.readonly == isinstance(value, bytes)  # a bytes value is read into bytes, the rest writable


def test_the_object_cache_mirror_is_bounded_by_bytes():
    first, second = b"A" * 16, b"B" * 16
    h = Harness(pipeline_depth=0, object_cache_bytes=10)
    h.storage.update({first: b"123456", second: b"7890ab"})
    tasks = [(1, first), (2, second), (3, first)]
    h.assign(*[make_task(n, arguments=[m.Argument("", m.ArgumentKind.OBJECT, o)]) for n, o in tasks])
    sent = []
    for _ in tasks:
        h.answer_gets()
        sent.append(h.top().arguments[0][1])
        h.finish()
    assert sent == [b"123456", b"7890ab", b"123456"]  # the second evicted the first (6 + 6 > 10 bytes)


def test_sized_lru_cache_evicts_least_recently_used_by_size():
    cache: SizedLRUCache[str, int] = SizedLRUCache(10)
    cache.put("a", 1, 4)
    cache.put("b", 2, 4)
    assert cache.get("a") == 1  # now the most recently used
    cache.put("c", 3, 4)
    assert "b" not in cache and cache.get("a") == 1 and cache.size == 8
    cache.put("big", 4, 11)  # larger than the whole cache: not kept
    assert "big" not in cache and len(cache) == 0 and cache.size == 0
