"""Drives the worker core (`WorkerCore` with a `ProcessorRunner`) through `handle`: no sockets, no processes.

The harness plays the scheduler, the storage server and the processor. Its processor model reads its pipe
when the real one does (when idle, between two tasks, or inside a task's wait), keeps the tasks sent ahead
in a FIFO that it runs in order at the top of its stack, and answers a Drop of a task still in its FIFO, so
the tests see the same interleavings as a real worker, including a task sent just before the processor asks
to resume a waiting task. The clock moves only when a test moves it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cloudpickle

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.ids import IDGenerator
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_protocol import Drop, Dropped, ProcessorResult, ProcessorTask, TaskWaiting, WaitEnded
from scaler.worker.processor_runner import (
    ProcessorEnded,
    ProcessorOutput,
    ProcessorRunner,
    SendToProcessor,
    StartProcessor,
)
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_core import WorkerCore
from scaler.worker.worker_events import (
    ConnectStorage,
    Exit,
    FromRunner,
    FromScheduler,
    FromStorage,
    MeasureUsage,
    SendToScheduler,
    SendToStorage,
    Start,
    Tick,
    UsageMeasured,
    WakeAt,
    WorkerIdentity,
)

SCHEDULER = "tcp://127.0.0.1:2345"
STORAGE = "tcp://127.0.0.1:2346"
CLIENT = b"C|test|1|000000000000"
FUNCTION = b"F" * 16
WORKER_ID = b"W|test|1|000000000000"


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


def load_failure(result: m.TaskResult) -> Tuple[BaseException, str]:
    assert result.status == m.TaskStatus.FAILED
    assert result.payload_kind == m.PayloadKind.INLINE
    return cloudpickle.loads(result.payload)


class _Frame:
    """A task on the model processor's stack: running, waiting (in its wait loop) or resuming (asked to
    resume, reading its pipe until WaitEnded)."""

    def __init__(self, task: ProcessorTask) -> None:
        self.task = task
        self.state = "running"
        self.wait_ended = False  # resuming, and WaitEnded came (read by a wait of a task above)


class Harness:
    """A connected worker core; the scheduler's, the storage server's and the processor's parts by hand."""

    def __init__(
        self,
        *,
        inline_threshold_bytes: int = 64 * 1024,
        storage_timeout_seconds: float = 60.0,
        prefetch_tasks: int = 4,
        pipeline_depth: int = 0,  # one task at a time, as before the pipeline; tests of it say so
        object_cache_bytes: int = 256 * 1024 * 1024,
        result_batch_seconds: float = 0.0,  # results leave at the end of each event; tests of batching say so
        connect: bool = True,
    ) -> None:
        config = WorkerConfig(
            SCHEDULER, task_inline_threshold=inline_threshold_bytes, worker_timeout_seconds=storage_timeout_seconds
        )
        self.runner = ProcessorRunner(pipeline_depth, object_cache_bytes)
        identity = WorkerIdentity(WORKER_ID, 1, "test", IDGenerator())
        self.core = WorkerCore(
            config, identity, self.runner, prefetch_tasks=prefetch_tasks, result_batch_seconds=result_batch_seconds
        )
        self.now = 0.0
        self.storage: Dict[bytes, Any] = {FUNCTION: b"function bytes"}
        self.processor = -1
        self.pipe: List[Any] = []  # sent to the model processor, not read yet
        self.stack: List[_Frame] = []  # the model processor's stack, the top one last
        self.fifo: List[ProcessorTask] = []  # the tasks sent ahead, not started
        self.notices: List[Any] = []  # Dropped notices written by the model processor, not handed over yet
        self.messages: List[Any] = []  # every Pipe message the model processor read
        self.hold = False  # the model processor does not read its pipe (to stage races)
        self.started: List[int] = []
        self.wake = math.inf  # when the core asked to be woken
        self.exit_code: Optional[int] = None
        self.storage_address: Optional[str] = None
        self.to_scheduler: List[Any] = []
        self.to_storage: List[Any] = []  # other than object requests
        self.gets: List[m.ObjectRequest] = []
        self.puts: List[Tuple[m.ObjectRequest, List[Any]]] = []
        self.handle(Start())
        if connect:
            self.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0)))
            self.take(m.Hello)
            self.take(m.WorkerHeartbeat)

    # --- events in, effects out

    def handle(self, event: Any) -> None:
        self.perform(self.core.handle(event, self.now))

    def perform(self, effects: List[Any]) -> None:
        for effect in effects:
            kind = type(effect)
            if kind is StartProcessor:
                assert effect.processor_id not in self.started, "processor IDs are not reused"
                self.started.append(effect.processor_id)
                self.processor = effect.processor_id
                self.pipe, self.stack, self.fifo, self.notices = [], [], [], []  # the old one is killed
            elif kind is SendToProcessor:
                assert effect.processor_id == self.processor
                self.pipe.append(effect.message)
            elif kind is SendToScheduler:
                self.to_scheduler.append(effect.message)
            elif kind is SendToStorage:
                if type(effect.message) is not m.ObjectRequest:
                    self.to_storage.append(effect.message)
                elif effect.message.kind == m.ObjectRequestKind.GET:
                    self.gets.append(effect.message)
                else:
                    self.puts.append((effect.message, effect.blobs))
            elif kind is WakeAt:
                self.wake = effect.when
            elif kind is MeasureUsage:
                self.perform(self.core.handle(UsageMeasured(1.0, 100, 2.0, 200), self.now))
            elif kind is ConnectStorage:
                self.storage_address = effect.address
            elif kind is Exit:
                self.exit_code = effect.code
            else:
                raise AssertionError(f"unknown effect {effect!r}")
        self.pump()

    def tick(self, now: float) -> None:
        """The clock reads ``now``: the core is woken (it does what is due, if anything)."""
        self.now = now
        self.handle(Tick())

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

    # --- the scheduler and the storage server

    def assign(self, *tasks: m.Task) -> None:
        self.handle(FromScheduler(m.TaskBatch(list(tasks))))

    def cancel(self, *numbers: int) -> m.TaskCancelConfirm:
        self.handle(FromScheduler(m.TaskCancel([task_id(n) for n in numbers])))
        [confirm] = self.take(m.TaskCancelConfirm)
        return confirm

    def balance(self, count: int) -> List[bytes]:
        self.handle(FromScheduler(m.BalanceRequest(count)))
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
            self.handle(FromStorage(response, blobs))

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
            self.handle(FromStorage(response, []))

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
        self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: Any = b"ok", text: str = ""
    ) -> ProcessorResult:
        """The top task returns: its result, not handed to the agent yet."""
        frame = self.stack[-1]
        assert frame.state == "running", "only a running task finishes"
        self.stack.pop()
        self._resume_top()
        return ProcessorResult(frame.task.task_id, status, payload, text, None)

    def tell(self, message: Any, processor: Optional[int] = None) -> None:
        self.handle(FromRunner(ProcessorOutput(self.processor if processor is None else processor, message)))

    def finish(self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: Any = b"ok", text: str = "") -> None:
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

    def die(self, cause: str, last: Sequence[Any] = (), processor: Optional[int] = None) -> None:
        which = self.processor if processor is None else processor
        self.handle(FromRunner(ProcessorEnded(which, cause, list(last))))

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
