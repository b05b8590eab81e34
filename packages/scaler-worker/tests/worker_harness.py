"""Test-side peers for a real worker process: a ROUTER socket playing the scheduler, an object storage
server (the real one when scaler-storage is installed, else a small ROUTER thread speaking the same
protocol), and helpers to start and always stop processes."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle
import psutil
import zmq

from scaler.protocol import codec, object_frames
from scaler.protocol import messages as m
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.ids import IDGenerator, new_client_id
from scaler.protocol.serializer import DefaultSerializer, deserialize_payload
from scaler.protocol.version import PROTOCOL_VERSION

DEADLINE_SECONDS = 30.0


def wait_until(condition: Callable[[], Any], what: str, timeout: float = DEADLINE_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def local_address() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


def hello(role: m.PeerRole = m.PeerRole.CLIENT) -> m.Hello:
    return m.Hello(PROTOCOL_VERSION, role, os.getpid(), "test", m.WorkerInfo())


# ----------------------------------------------------------------------------- processes


def start_process(command: Sequence[str], log_path: Optional[str] = None, **kw: Any) -> subprocess.Popen:
    """Start a process in its own session, so that `stop_process` can end it and everything it started."""
    output = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    finally:
        if log_path:
            output.close()


def stop_process(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """End ``process`` and every process of its session (workers, processors), waiting for them."""
    members = _session_members(process.pid)
    for pid in [process.pid, *(p.pid for p in members)]:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
    for member in members:  # not our children: ended is enough (a zombie waits for its reaper, not for us)
        wait_until(lambda pid=member.pid: pid_gone(pid), f"process {member.pid} to end", timeout=10)


def _session_members(session_id: int) -> List[psutil.Process]:
    members = []
    for candidate in psutil.process_iter():
        try:
            if candidate.pid != session_id and os.getsid(candidate.pid) == session_id:
                members.append(candidate)
        except (OSError, psutil.Error):
            pass
    return members


def worker_command(scheduler_address: str, *options: str) -> List[str]:
    return [sys.executable, "-m", "scaler.worker.worker_main", scheduler_address, *options]


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ----------------------------------------------------------------------------- the scheduler


class FakeScheduler:
    """A ROUTER socket where the scheduler would be; the test decides every answer."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()

    def restart(self) -> None:
        """Close the socket, as a scheduler that dies, and listen again at the same address."""
        self.socket.close(linger=0)
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:  # ZeroMQ's I/O thread lets the port go a moment after the close
            try:
                self.socket.bind(self.address)
                return
            except zmq.ZMQError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def receive(self, timeout: float = DEADLINE_SECONDS) -> Tuple[bytes, Any]:
        if not self.socket.poll(int(timeout * 1000)):
            raise TimeoutError(f"the worker sent nothing to the scheduler within {timeout}s")
        identity, *frames = self.socket.recv_multipart()
        message, _ = codec.decode(frames)
        return identity, message

    def expect(
        self, message_type: type, timeout: float = DEADLINE_SECONDS, skip: Tuple[type, ...] = (m.WorkerHeartbeat,)
    ) -> Tuple[bytes, Any]:
        deadline = time.monotonic() + timeout
        while True:
            identity, message = self.receive(max(0.0, deadline - time.monotonic()))
            if isinstance(message, message_type):
                return identity, message
            if not isinstance(message, skip):
                raise AssertionError(f"expected {message_type.__name__}, got {message!r}")

    def send(self, identity: bytes, message: Any) -> None:
        self.socket.send_multipart([identity, *codec.encode(message)])

    def accept(self, storage_address: str, heartbeat_interval: float = 2.0) -> Tuple[bytes, m.Hello]:
        identity, message = self.expect(m.Hello)
        self.send(identity, m.HelloAck(PROTOCOL_VERSION, storage_address, heartbeat_interval, 60.0))
        return identity, message


# ----------------------------------------------------------------------------- object storage


class StorageClient:
    """A DEALER speaking to the object storage server: put, get, admit. It says Hello as the scheduler, which may
    put and read the objects of any owner (a client may only its own), and admits the clients it serves (a worker
    puts results only for those)."""

    def __init__(self, address: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, new_client_id())
        self.socket.connect(address)
        self._request_ids = itertools.count(1)
        self.socket.send_multipart(codec.encode(hello(m.PeerRole.SCHEDULER)))
        self._receive()

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()

    def _receive(self) -> Tuple[Any, List[bytes]]:
        if not self.socket.poll(int(DEADLINE_SECONDS * 1000)):
            raise TimeoutError("the object storage server did not answer")
        return codec.decode(self.socket.recv_multipart())

    def put(self, object_id: bytes, data: bytes, owner_id: bytes = b"C|test|0|owner") -> None:
        request = m.ObjectRequest(next(self._request_ids), m.ObjectRequestKind.PUT, owner_id, [object_id])
        self.socket.send_multipart(codec.encode(request, [data]))
        response, _ = self._receive()
        assert response.statuses == [m.ObjectStatus.OK], response

    def admit(self, client_id: bytes) -> None:
        self.socket.send_multipart(codec.encode(m.ObjectRequest(0, m.ObjectRequestKind.ADMIT, client_id)))
        response, _ = self._receive()
        assert response.kind == m.ObjectRequestKind.ADMIT, response

    def get(self, object_id: bytes) -> Any:
        """The object's payload: bytes, or a list of frames; None when not found."""
        request = m.ObjectRequest(next(self._request_ids), m.ObjectRequestKind.GET, b"", [object_id])
        self.socket.send_multipart(codec.encode(request))
        response, blobs = self._receive()
        return object_frames.found(response, blobs)[0]


class FakeStorageServer:
    """The object storage protocol in a thread, for when scaler-storage is not installed."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.objects: Dict[bytes, Tuple[bytes, Any]] = {}  # ID -> (owner, payload: bytes or a list of frames)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-storage", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.socket.close(linger=0)
        self.context.term()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.socket.poll(50):
                continue
            identity, *frames = self.socket.recv_multipart()
            message, blobs = codec.decode(frames)
            if isinstance(message, m.Hello):
                reply, out = m.HelloAck(PROTOCOL_VERSION, role=m.PeerRole.OBJECT_STORAGE), []
            elif isinstance(message, m.ObjectRequest) and message.kind == m.ObjectRequestKind.PUT:
                split = object_frames.split(message.frame_counts, len(message.object_ids), blobs)
                for object_id, frames in zip(message.object_ids, split, strict=True):
                    self.objects[object_id] = (message.owner_id, frames[0] if len(frames) == 1 else frames)
                statuses = [m.ObjectStatus.OK] * len(message.object_ids)
                reply, out = m.ObjectResponse(message.request_id, message.kind, message.object_ids, statuses), []
            elif isinstance(message, m.ObjectRequest) and message.kind == m.ObjectRequestKind.ADMIT:
                reply, out = m.ObjectResponse(message.request_id, message.kind), []
            elif isinstance(message, m.ObjectRequest) and message.kind == m.ObjectRequestKind.GET:
                found = [self.objects.get(object_id) for object_id in message.object_ids]
                statuses = [m.ObjectStatus.OK if f else m.ObjectStatus.NOT_FOUND for f in found]
                out, counts = object_frames.pack([f[1] for f in found if f])
                reply = m.ObjectResponse(message.request_id, message.kind, message.object_ids, statuses)
                reply.frame_counts = counts
            else:
                reply, out = m.Refusal(PROTOCOL_VERSION, f"fake storage does not serve {message!r}"), []
            self.socket.send_multipart([identity, *codec.encode(reply, out)])


class RealStorageServer:
    def __init__(self, log_path: str) -> None:
        self.address = local_address()
        self.process = start_process([sys.executable, "-m", "scaler.storage", self.address], log_path)
        try:
            wait_until(lambda: self._answers(), f"object storage server at {self.address}")
        except BaseException:
            self.close()
            raise

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"object storage server exited with code {self.process.returncode}")
        try:
            StorageClient(self.address).close()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        stop_process(self.process, signal.SIGTERM)


def start_storage_server(log_path: str) -> Any:
    try:
        import scaler.storage  # noqa: F401
    except ImportError:
        return FakeStorageServer()
    return RealStorageServer(log_path)


# ----------------------------------------------------------------------------- tasks


class TaskDriver:
    """Builds tasks the way a client would (function and large arguments put in storage first), sends
    them through the fake scheduler to one worker, and collects what the worker answers."""

    def __init__(self, scheduler: FakeScheduler, storage: StorageClient, worker_id: bytes) -> None:
        self.scheduler = scheduler
        self.storage = storage
        self.worker_id = worker_id
        self.client_id = new_client_id()
        storage.admit(self.client_id)  # as the scheduler does when a client says Hello
        self._ids = IDGenerator()
        self._functions: Dict[Any, bytes] = {}
        self.results: Dict[bytes, m.TaskResult] = {}
        self.other: List[Any] = []

    def object(self, data: bytes) -> bytes:
        object_id = self._ids.next_id()
        self.storage.put(object_id, data, self.client_id)
        return object_id

    def task(
        self,
        function: Callable,
        *args: Any,
        priority: int = 0,
        attempt: int = 1,
        timeout_seconds: float = 0.0,
        profiling: bool = False,
        serializer: Any = None,
        object_arguments: bool = False,
        **kwargs: Any,
    ) -> m.Task:
        function_id = self._functions.get(function)
        if function_id is None:
            function_id = self._functions[function] = self.object(cloudpickle.dumps(function))
        serializer_id = self.object(cloudpickle.dumps(serializer)) if serializer is not None else b""
        encode = serializer.serialize if serializer is not None else cloudpickle.dumps
        arguments = []
        for name, value in [*(("", a) for a in args), *kwargs.items()]:
            data = encode(value)
            if object_arguments:
                arguments.append(m.Argument(name, m.ArgumentKind.OBJECT, self.object(data)))
            else:
                arguments.append(m.Argument(name, m.ArgumentKind.INLINE, data))
        return m.Task(
            task_id=self._ids.next_id(),
            client_id=self.client_id,
            function_id=function_id,
            arguments=arguments,
            priority=priority,
            attempt=attempt,
            timeout_seconds=timeout_seconds,
            profiling=profiling,
            serializer_id=serializer_id,
        )

    def send(self, *tasks: m.Task) -> List[bytes]:
        self.scheduler.send(self.worker_id, m.TaskBatch(list(tasks)))
        return [task.task_id for task in tasks]

    def submit(self, function: Callable, *args: Any, **kwargs: Any) -> bytes:
        return self.send(self.task(function, *args, **kwargs))[0]

    def receive(self, timeout: float = DEADLINE_SECONDS) -> Any:
        """The next message from the worker other than a heartbeat; results are also recorded."""
        while True:
            identity, message = self.scheduler.receive(timeout)
            assert identity == self.worker_id, identity
            if isinstance(message, m.WorkerHeartbeat):
                continue
            if isinstance(message, m.TaskResultBatch):
                for result in message.results:
                    assert result.task_id not in self.results, f"second result for task {result.task_id.hex()}"
                    self.results[result.task_id] = result
            return message

    def expect(self, message_type: type, timeout: float = DEADLINE_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            message = self.receive(max(0.0, deadline - time.monotonic()))
            if isinstance(message, message_type):
                return message
            self.other.append(message)

    def result(self, task_id: bytes, timeout: float = DEADLINE_SECONDS) -> m.TaskResult:
        deadline = time.monotonic() + timeout
        while task_id not in self.results:
            message = self.receive(max(0.0, deadline - time.monotonic()))
            if not isinstance(message, m.TaskResultBatch):
                self.other.append(message)
        return self.results[task_id]

    def value(self, task_id: bytes, serializer: Any = None) -> Any:
        result = self.result(task_id)
        assert result.status == m.TaskStatus.SUCCESS, (result.status, result.error_text, _failure(result))
        payload = result.payload
        if result.payload_kind == m.PayloadKind.OBJECT:
            payload = self.storage.get(result.payload)
            assert payload is not None, "result object not in storage"
        return deserialize_payload(serializer or DefaultSerializer(), payload)

    def failure(self, task_id: bytes) -> Tuple[BaseException, str]:
        result = self.result(task_id)
        assert result.status == m.TaskStatus.FAILED, result
        return _failure(result)


def _failure(result: m.TaskResult) -> Any:
    if result.status != m.TaskStatus.FAILED or not result.payload:
        return None
    return cloudpickle.loads(result.payload)
