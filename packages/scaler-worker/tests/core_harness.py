"""Drives the worker core (`WorkerCore` with a `ProcessorRunner`) through `handle`: no sockets, no processes.

The harness plays the scheduler, the storage server and the processor. Its processor model reads its pipe
when the real one does (idle, message by message, and all that is there before a task sent ahead starts; and
between two switches: as a task ends or waits, before it says so, and not again before the next task
starts), keeps the tasks sent in a FIFO whose head it starts whenever no task
runs, switches out the tasks that wait, resumes a task whose wait is over when no task runs and its FIFO is
empty, and answers a Drop of a task still in its FIFO (its ``Dropped`` goes with the next thing it says), so
the tests see the same interleavings as a real worker, including a task sent just as the processor resumes a
waiting task. The clock moves only when a test moves it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cloudpickle

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.ids import IDGenerator
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_memory import MeasureMemory, MemoryMeasured
from scaler.worker.processor_protocol import Drop, Dropped, ProcessorResult, ProcessorTask, TaskWaiting
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
    CarryOutCall,
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
    client_id: bytes = CLIENT,
    scope_id: bytes = b"",
) -> m.Task:
    return m.Task(
        task_id=task_id(number),
        client_id=client_id,
        scope_id=scope_id,
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
        max_message_size: int = 0,  # what the scheduler's HelloAck says it takes (0: an older one, not said)
        memory_limit: int = 0,  # bytes, 0: none
        tiny_tasks_depth: int = 0,  # no deeper pipeline for tiny tasks; tests of it say so
    ) -> None:
        config = WorkerConfig(
            SCHEDULER,
            task_inline_threshold=inline_threshold_bytes,
            worker_timeout_seconds=storage_timeout_seconds,
            memory_limit=memory_limit or "none",
        )
        self.runner = ProcessorRunner(pipeline_depth, object_cache_bytes, memory_limit, tiny_tasks_depth)
        identity = WorkerIdentity(WORKER_ID, 1, "test", IDGenerator())
        self.core = WorkerCore(
            config, identity, self.runner, prefetch_tasks=prefetch_tasks, result_batch_seconds=result_batch_seconds
        )
        self.now = 0.0
        self.storage: Dict[bytes, Any] = {FUNCTION: b"function bytes"}
        self.readers: Dict[bytes, bytes] = {}  # object ID -> the only scope a get may read it for (absent: any)
        self.processor = -1
        self.pipe: List[Any] = []  # sent to the model processor, not read yet
        self.current: Optional[ProcessorTask] = None  # the task the model processor runs
        self.waiting: List[ProcessorTask] = []  # switched out, waiting (in the order they began)
        self.resumable: List[ProcessorTask] = []  # their wait is over: resumed when nothing runs, in this order
        self.fifo: List[ProcessorTask] = []  # the tasks sent, not started
        self.notices: List[Any] = []  # written by the model processor, not handed over yet (Dropped, resumes)
        self.messages: List[Any] = []  # every Pipe message the model processor read
        self.hold = False  # the model processor does not read its pipe (to stage races)
        self.drained = False  # it read its pipe as the last task ended or waited: the next starts without reading
        self.started: List[int] = []
        self.wake = math.inf  # when the core asked to be woken
        self.exit_code: Optional[int] = None
        self.calls: List[m.WorkerCall] = []  # what the shell was asked to run or save (CarryOutCall)
        self.storage_address: Optional[str] = None
        self.to_scheduler: List[Any] = []
        self.to_storage: List[Any] = []  # other than object requests
        self.gets: List[m.ObjectRequest] = []
        self.memory_requests: List[int] = []  # the processors whose memory the runner asked to measure (MeasureMemory)
        self.puts: List[Tuple[m.ObjectRequest, List[Any]]] = []
        self.handle(Start())
        if connect:
            ack = m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0, max_message_size=max_message_size)
            self.handle(FromScheduler(ack))
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
                self.pipe, self.fifo, self.notices = [], [], []  # the old one is killed
                self.current, self.waiting, self.resumable = None, [], []
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
            elif kind is MeasureUsage:
                self.perform(self.core.handle(UsageMeasured(1.0, 100, 2.0, 200), self.now))
            elif kind is MeasureMemory:
                self.memory_requests.append(effect.processor_id)
            elif kind is ConnectStorage:
                self.storage_address = effect.address
            elif kind is Exit:
                self.exit_code = effect.code
            elif kind is CarryOutCall:
                self.calls.append(effect.call)
            else:
                raise AssertionError(f"unknown effect {effect!r}")
        self.pump()
        self.wake = self.core.next_wakeup

    def tick(self, now: float) -> None:
        """The clock reads ``now``: the core is woken (it does what is due, if anything)."""
        self.now = now
        self.handle(Tick())

    def pump(self) -> None:
        """While no task runs, the model processor starts the head of its FIFO, or resumes a task whose wait is over
        (telling the agent), having read its pipe unless it did as the last task ended or waited; with nothing
        to start it reads its pipe message by message. What it wrote reaches the agent when it idles or
        resumes a task."""
        resumed = False
        while self.current is None:
            if not self.fifo and not self.resumable:
                if not self.pipe or self.hold:
                    self.drained = False  # idle: it reads its pipe before it resumes a task
                    break
                self._read_one()
                self.drained = bool(self.fifo) and not self.fifo[0].sent_ahead
                continue
            if not self.drained:
                self._drain()
            self.drained = False
            if self.fifo:
                self.current = self.fifo.pop(0)
            elif self.resumable:  # (even while it does not read its pipe: a task sent may cross the resume)
                self.current = self.resumable.pop(0)
                self.notices.append(TaskWaiting(self.current.task_id, False))
                resumed = True
        if self.notices and (self.current is None or resumed):  # written together, read together
            notices, self.notices = self.notices, []
            self.tell(notices if len(notices) > 1 else notices[0])

    def _drain(self) -> None:
        """Read whatever is in the pipe (nothing while it holds)."""
        while self.pipe and not self.hold:
            self._read_one()

    def _read_one(self) -> None:
        message = self.pipe.pop(0)
        self.messages.append(message)
        assert isinstance(message, list), message
        for each in message:
            self._read(each)

    def _read(self, message: Any) -> None:
        if isinstance(message, Drop):
            found = [task for task in self.fifo if task.task_id == message.task_id]
            if found:
                self.fifo.remove(found[0])
                self.notices.append(Dropped(message.task_id))
        else:
            assert isinstance(message, ProcessorTask)
            self.fifo.append(message)

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
        """The storage server answers every get request sent so far (for the scope it names, `readers`)."""
        while self.gets:
            request = self.gets.pop(0)
            readable = [
                i in self.storage and self.readers.get(i, request.owner_id) == request.owner_id
                for i in request.object_ids
            ]
            statuses = [m.ObjectStatus.OK if ok else m.ObjectStatus.NOT_FOUND for ok in readable]
            found = [i for i, ok in zip(request.object_ids, readable, strict=True) if ok]
            blobs, counts = object_frames.pack([self.storage[i] for i in found])
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
        """The task the processor runs."""
        return self.current

    def fifo_ids(self) -> List[bytes]:
        return [task.task_id for task in self.fifo]

    def running_task(self) -> Optional[bytes]:
        """The task that runs, if any."""
        return self.current.task_id if self.current is not None else None

    def waiting_ids(self) -> List[bytes]:
        return [task.task_id for task in self.waiting]

    def started_ids(self) -> List[bytes]:
        """The tasks started on the processor: running, waiting, or resumable."""
        started = [*self.waiting, *self.resumable] + ([self.current] if self.current is not None else [])
        return sorted(task.task_id for task in started)

    def processor_finishes(
        self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: Any = b"ok", text: str = ""
    ) -> ProcessorResult:
        """The running task returns, and the processor reads its pipe: its result, not handed to the agent yet."""
        task = self.current
        assert task is not None, "only a running task finishes"
        self.current = None
        self._drain()
        self.drained = True
        return ProcessorResult(task.task_id, status, payload, text, None)

    def tell(self, message: Any, processor: Optional[int] = None) -> None:
        """The processor (the current one, unless ``processor``) says ``message``, after what it wrote before."""
        if (processor is None or processor == self.processor) and self.notices:
            notices, self.notices = self.notices, []
            message = [*notices, *(message if isinstance(message, list) else [message])]
        self.handle(FromRunner(ProcessorOutput(self.processor if processor is None else processor, message)))

    def finish(self, status: m.TaskStatus = m.TaskStatus.SUCCESS, payload: Any = b"ok", text: str = "") -> None:
        self.tell(self.processor_finishes(status, payload, text))

    def processor_waits(self) -> TaskWaiting:
        """The running task waits inside the client: it is switched out, the processor is free and reads its
        pipe; what it says of it, not handed to the agent yet."""
        task = self.current
        assert task is not None, "only a running task waits"
        self.current = None
        self.waiting.append(task)
        self._drain()
        self.drained = True
        return TaskWaiting(task.task_id, True)

    def wait(self) -> None:
        self.tell(self.processor_waits())

    def resume(self, number: Optional[int] = None) -> None:
        """What a waiting task (task ``number``, or the last to begin waiting) waits for is done: the processor
        resumes it once no task runs."""
        task = self.waiting[-1] if number is None else [t for t in self.waiting if t.task_id == task_id(number)][0]
        self.waiting.remove(task)
        self.resumable.append(task)
        self.pump()

    def measure(self, resident_bytes: int, processor: Optional[int] = None) -> None:
        """The host measured the processor's memory (the current one's, unless ``processor``)."""
        which = self.processor if processor is None else processor
        self.handle(FromRunner(MemoryMeasured(which, resident_bytes)))

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
