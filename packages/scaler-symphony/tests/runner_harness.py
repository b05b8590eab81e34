"""Drives the worker core with the Symphony runner (`WorkerCore` + `SymphonyRunner`) through `handle`: no sockets,
no Symphony. The harness plays the scheduler, the storage server (it answers every fetch at once) and the host
(it records what the runner asks and says what Symphony did). The clock moves only when a test moves it."""

from __future__ import annotations

from typing import Any, Dict, List

import cloudpickle

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.ids import IDGenerator
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.symphony.symphony_runner import (
    AbortTask,
    OpenSession,
    SessionOpened,
    SubmitTask,
    Submitted,
    SymphonyRunner,
    TaskAborted,
    TaskOutput,
)
from scaler.symphony.task_payload import task_origin
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_core import WorkerCore
from scaler.worker.worker_events import (
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
CLIENT = b"C|test|1|000000000000"
FUNCTION = b"F" * 16
SESSION = "7"


def task_id(number: int) -> bytes:
    return number.to_bytes(16, "big")


def client_in(symphony_task_id: str, session_id: str = SESSION) -> bytes:
    """The ID of a client made inside Symphony task ``symphony_task_id`` (as `clients_made_in` makes it)."""
    return CLIENT + b"|in:" + task_origin(session_id, symphony_task_id).encode()


def make_task(number: int, client: bytes = CLIENT, timeout_seconds: float = 0.0, priority: int = 0) -> m.Task:
    argument = m.Argument("", m.ArgumentKind.INLINE, cloudpickle.dumps(number))
    return m.Task(task_id(number), client, FUNCTION, [argument], priority, attempt=1, timeout_seconds=timeout_seconds)


class Harness:
    def __init__(self, base_concurrency: int = 2, open_session: bool = True) -> None:
        self.runner = SymphonyRunner(base_concurrency)
        identity = WorkerIdentity(b"W|test|1|000000000000", 1, "test", IDGenerator())
        self.core = WorkerCore(WorkerConfig(SCHEDULER), identity, self.runner, result_batch_seconds=0.0)
        self.now = 0.0
        self.storage: Dict[bytes, Any] = {FUNCTION: cloudpickle.dumps(pow)}
        self.submissions: Dict[int, SubmitTask] = {}  # serial -> what the runner handed the host, not ended yet
        self.aborts: List[int] = []
        self.opens = 0
        self.to_scheduler: List[Any] = []
        self.handle(Start())
        self.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, "tcp://127.0.0.1:2346", 2.0, 60.0)))
        if open_session:
            self.tell(SessionOpened(SESSION))

    def handle(self, event: Any) -> None:
        gets = []
        for effect in self.core.handle(event, self.now):
            kind = type(effect)
            if kind is SubmitTask:
                self.submissions[effect.serial] = effect
            elif kind is AbortTask:
                self.aborts.append(effect.serial)
            elif kind is OpenSession:
                self.opens += 1
            elif kind is SendToScheduler:
                self.to_scheduler.append(effect.message)
            elif kind is SendToStorage and type(effect.message) is m.ObjectRequest:
                gets.append(effect.message)
            elif kind is MeasureUsage:
                self.handle(UsageMeasured(1.0, 100, 0.0, 0))
        for request in gets:  # the storage server answers at once
            blobs, counts = object_frames.pack([self.storage[object_id] for object_id in request.object_ids])
            statuses = [m.ObjectStatus.OK] * len(request.object_ids)
            response = m.ObjectResponse(request.request_id, m.ObjectRequestKind.GET, request.object_ids, statuses)
            response.frame_counts = counts
            self.handle(FromStorage(response, blobs))

    def tell(self, message: Any) -> None:
        self.handle(FromRunner(message))

    def tick(self, now: float) -> None:
        self.now = now
        self.handle(Tick())

    # --- the scheduler

    def assign(self, *tasks: m.Task) -> None:
        self.handle(FromScheduler(m.TaskBatch(list(tasks))))

    def cancel(self, *numbers: int) -> m.TaskCancelConfirm:
        self.handle(FromScheduler(m.TaskCancel([task_id(n) for n in numbers])))
        [confirm] = self.take(m.TaskCancelConfirm)
        return confirm

    def take(self, message_type: type) -> List[Any]:
        found = [message for message in self.to_scheduler if isinstance(message, message_type)]
        self.to_scheduler = [message for message in self.to_scheduler if not isinstance(message, message_type)]
        return found

    def results(self) -> Dict[bytes, m.TaskResult]:
        return {result.task_id: result for batch in self.take(m.TaskResultBatch) for result in batch.results}

    # --- Symphony, through the host

    def serial_of(self, number: int) -> int:
        [serial] = [s for s, submit in self.submissions.items() if submit.ready.task.task_id == task_id(number)]
        return serial

    def in_symphony(self) -> List[int]:
        """The tasks handed to Symphony and not ended, by number, in the order they were handed over."""
        return [int.from_bytes(submit.ready.task.task_id, "big") for submit in self.submissions.values()]

    def accept(self, number: int, symphony_task_id: str) -> None:
        """Symphony takes the task under ``symphony_task_id``."""
        self.tell(Submitted(self.serial_of(number), symphony_task_id))

    def finish(self, number: int, value: Any = "done") -> None:
        serial = self.serial_of(number)
        del self.submissions[serial]
        self.tell(TaskOutput(serial, m.TaskStatus.SUCCESS, cloudpickle.dumps(value), "", "module.function", 0.5))

    def aborted(self, number: int) -> None:
        serial = self.serial_of(number)
        del self.submissions[serial]
        self.tell(TaskAborted(serial))
