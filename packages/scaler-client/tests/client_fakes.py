"""Test-side peers for the client: a ROUTER playing the scheduler and one playing object storage.

Real ZeroMQ sockets on free ports and the real Cap'n Proto codec; each runs in
its own thread and records what it receives, with a sequence number shared by
both so tests can check ordering across the two connections. The fake
scheduler can also run tasks itself (``execute=True``), reading functions and
arguments from the fake storage, which lets tests exercise whole round trips
without the real scheduler or worker.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
import traceback
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import cloudpickle
import zmq

from scaler.client.serializer import DefaultSerializer, deserialize_payload
from scaler.protocol import codec, object_frames
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.messages import (
    ArgumentKind,
    ClientHeartbeat,
    ClientHeartbeatEcho,
    ClientShutdownRequest,
    ClientShutdownResponse,
    DisconnectRequest,
    DisconnectResponse,
    Hello,
    HelloAck,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    Refusal,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION, incompatibility

_sequence = itertools.count(1)
_sequence_lock = threading.Lock()


def next_sequence() -> int:
    with _sequence_lock:
        return next(_sequence)


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Peer:
    """A ROUTER in its own thread: records (sequence, identity, message, blobs) and answers via ``_handle``."""

    def __init__(self) -> None:
        self.address = f"tcp://127.0.0.1:{free_tcp_port()}"
        self.received: List[Tuple[int, bytes, Any, List[bytes]]] = []
        self._lock = threading.Lock()
        self._outbox: Deque[Tuple[bytes, Any, List[bytes]]] = collections.deque()
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._bound.wait(10), "fake peer did not bind"

    def send(self, identity: bytes, message: Any, blobs: List[bytes] = ()) -> None:
        self._outbox.append((identity, message, list(blobs)))

    def send_raw(self, identity: bytes, frames: List[bytes]) -> None:
        """Frames that are not an encoded message (for malformed-input tests)."""
        self._outbox.append((identity, None, list(frames)))

    def messages(self, message_type: type) -> List[Any]:
        with self._lock:
            return [message for _, _, message, _ in self.received if isinstance(message, message_type)]

    def records(self, message_type: type) -> List[Tuple[int, bytes, Any, List[bytes]]]:
        with self._lock:
            return [record for record in self.received if isinstance(record[2], message_type)]

    def wait_for(self, message_type: type, count: int = 1, timeout: float = 10.0) -> List[Any]:
        return wait_until(
            lambda: (lambda found: found if len(found) >= count else None)(self.messages(message_type)),
            timeout,
            f"{count} {message_type.__name__}",
        )

    def identities(self) -> List[bytes]:
        with self._lock:
            return list(dict.fromkeys(identity for _, identity, _, _ in self.received))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        context = zmq.Context()
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(self.address)
        self._bound.set()
        try:
            while not self._stop.is_set():
                while self._outbox:
                    identity, message, blobs = self._outbox.popleft()
                    frames = blobs if message is None else codec.encode(message, blobs)
                    router.send_multipart([identity, *frames])
                if not router.poll(5):
                    continue
                while True:
                    try:
                        identity, *frames = router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    message, blobs = codec.decode(frames)
                    with self._lock:
                        self.received.append((next_sequence(), identity, message, [bytes(b) for b in blobs]))
                    for reply in self._handle(identity, message, [bytes(b) for b in blobs]):
                        self._outbox.append(reply)
        finally:
            router.close(linger=0)
            context.term()

    def _handle(self, identity: bytes, message: Any, blobs: List[bytes]) -> List[Tuple[bytes, Any, List[bytes]]]:
        return []


class FakeStorage(_Peer):
    """Object storage: answers Hello, put, get, delete and clearOwner like the real server would."""

    def __init__(self) -> None:
        self.objects: Dict[bytes, Any] = {}  # object ID -> payload: bytes, or a list of frames
        self.put_status: Optional[ObjectStatus] = None  # answer every put with this status instead of ok
        self.answer = True  # False: receive but never answer
        self.put_acks: List[Tuple[int, List[bytes]]] = []  # (sequence, object IDs) of each ok put answered
        super().__init__()

    def _handle(self, identity: bytes, message: Any, blobs: List[bytes]) -> List[Tuple[bytes, Any, List[bytes]]]:
        if isinstance(message, Hello):
            return [(identity, HelloAck(version=PROTOCOL_VERSION), [])]
        if not isinstance(message, ObjectRequest) or not self.answer:
            return []
        ids = list(message.object_ids)
        response = ObjectResponse(request_id=message.request_id, kind=message.kind, object_ids=ids)
        out_blobs: List[bytes] = []
        if message.kind == ObjectRequestKind.PUT:
            status = self.put_status or ObjectStatus.OK
            split = object_frames.split(message.frame_counts, len(ids), blobs)
            payloads = [frames[0] if len(frames) == 1 else frames for frames in split]
            for object_id, payload in zip(ids, payloads, strict=False):
                if status == ObjectStatus.OK:
                    self.objects[object_id] = payload
            response.statuses = [status] * len(ids)
            response.sizes = [object_frames.size(payload) for payload in payloads]
            if status != ObjectStatus.OK:
                response.reason = "the fake storage is configured to refuse"
            with self._lock:
                self.put_acks.append((next_sequence(), ids))
        elif message.kind == ObjectRequestKind.GET:
            found = []
            for object_id in ids:
                if object_id in self.objects:
                    response.statuses.append(ObjectStatus.OK)
                    found.append(self.objects[object_id])
                else:
                    response.statuses.append(ObjectStatus.NOT_FOUND)
            out_blobs, response.frame_counts = object_frames.pack(found)
        elif message.kind == ObjectRequestKind.DELETE:
            response.statuses = [
                ObjectStatus.OK if self.objects.pop(object_id, None) is not None else ObjectStatus.NOT_FOUND
                for object_id in ids
            ]
        return [(identity, response, out_blobs)]

    def put_sequence(self, object_id: bytes) -> Optional[int]:
        with self._lock:
            for sequence, ids in self.put_acks:
                if object_id in ids:
                    return sequence
        return None


class FakeScheduler(_Peer):
    """The scheduler's side of the client conversations, scripted by attributes.

    ``hello``: "ack" | "refuse" | "silent"; ``echo``: answer heartbeats;
    ``execute``: run tasks in this thread and answer with their results;
    ``cancel_answer``: "confirm" (cancelled=True), "refuse" (cancelled=False),
    "result" (a success result instead of a confirmation) or "none";
    ``shutdown_accept``: the answer to ClientShutdownRequest.
    """

    def __init__(self, storage: Optional[FakeStorage] = None, hello: str = "ack", execute: bool = False) -> None:
        self.storage = storage
        self.hello = hello
        self.echo = True
        self.execute = execute
        self.cancel_answer = "confirm"
        self.answer_disconnect = True
        self.shutdown_accept = True
        self.result_kind = PayloadKind.INLINE  # OBJECT: executed results go through the fake storage
        super().__init__()

    def _handle(self, identity: bytes, message: Any, blobs: List[bytes]) -> List[Tuple[bytes, Any, List[bytes]]]:
        if isinstance(message, Hello):
            if self.hello == "ack":
                storage_address = self.storage.address if self.storage else ""
                return [(identity, HelloAck(version=PROTOCOL_VERSION, object_storage_address=storage_address), [])]
            if self.hello == "refuse":
                theirs = message.version
                ours = Version(major=theirs.major + 1, minor=0)
                return [(identity, Refusal(version=ours, reason=incompatibility(theirs, ours)), [])]
            return []
        if isinstance(message, ClientHeartbeat) and self.echo:
            return [(identity, ClientHeartbeatEcho(), [])]
        if isinstance(message, DisconnectRequest) and self.answer_disconnect:
            return [(identity, DisconnectResponse(), [])]
        if isinstance(message, ClientShutdownRequest):
            reason = "" if self.shutdown_accept else "the scheduler is protected"
            return [(identity, ClientShutdownResponse(accepted=self.shutdown_accept, reason=reason), [])]
        if isinstance(message, TaskCancel) and self.cancel_answer != "none":
            ids = list(message.task_ids)
            if self.cancel_answer == "result":
                results = [
                    TaskResult(
                        task_id=i,
                        status=TaskStatus.SUCCESS,
                        payload_kind=PayloadKind.INLINE,
                        payload=cloudpickle.dumps("finished first"),
                    )
                    for i in ids
                ]
                return [(identity, TaskResultBatch(results=results), [])]
            confirmed = self.cancel_answer == "confirm"
            return [(identity, TaskCancelConfirm(task_ids=ids, cancelled=[confirmed] * len(ids)), [])]
        if isinstance(message, TaskBatch) and self.execute:
            results = [self.run(task) for task in message.tasks]
            return [(identity, TaskResultBatch(results=results), [])]
        return []

    def run(self, task: Task) -> TaskResult:
        """What a worker does with a task, reading from the fake storage."""
        assert self.storage is not None
        objects = self.storage.objects
        serializer = cloudpickle.loads(objects[task.serializer_id]) if task.serializer_id else DefaultSerializer()
        dumps = serializer.serialize
        try:
            function = cloudpickle.loads(objects[task.function_id])
            args, kwargs = [], {}
            for argument in task.arguments:
                data = objects[argument.data] if argument.kind == ArgumentKind.OBJECT else argument.data
                value = deserialize_payload(serializer, data)
                if argument.name:
                    kwargs[argument.name] = value
                else:
                    args.append(value)
            payload = dumps(function(*args, **kwargs))
            status = TaskStatus.SUCCESS
        except Exception as error:
            payload = cloudpickle.dumps((error, traceback.format_exc()))
            status = TaskStatus.FAILED
        kind = PayloadKind.INLINE
        if self.result_kind == PayloadKind.OBJECT:
            object_id = b"result-" + task.task_id
            objects[object_id] = payload
            payload, kind = object_id, PayloadKind.OBJECT
        return TaskResult(task_id=task.task_id, status=status, payload_kind=kind, payload=payload)
