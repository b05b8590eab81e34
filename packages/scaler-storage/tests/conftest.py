"""Real object storage server processes on free ports, and raw pyzmq peers that talk to them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import pytest
import zmq

from scaler.protocol import codec
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.messages import Hello, HelloAck, ObjectRequest, ObjectRequestKind, ObjectResponse, PeerRole
from scaler.protocol.version import PROTOCOL_VERSION

START_TIMEOUT_SECONDS = 30.0
REPLY_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 15.0


def storage_command(*arguments: str) -> List[str]:
    return [sys.executable, "-m", "scaler.storage", *arguments]


class StorageProcess:
    """One ``python -m scaler.storage`` process, its address and its log file."""

    def __init__(self, address: str, arguments: Sequence[str], log_path: Path, pass_address: bool = True) -> None:
        self.address = address
        self.log_path = log_path
        self._log_file = open(log_path, "wb")
        command = storage_command(address, *arguments) if pass_address else storage_command(*arguments)
        self.process = subprocess.Popen(command, stdout=self._log_file, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = REPLY_TIMEOUT_SECONDS) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log()
            if text in log:
                return log
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in the server log:\n{self.log()}")

    def signal(self, signum: int) -> int:
        """Send ``signum`` and return the exit code."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server did not exit on signal {signum}:\n{self.log()}") from None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()


class Peer:
    """A DEALER socket speaking the protocol with raw frames."""

    def __init__(self, context: zmq.Context, address: str, identity: bytes, receive_hwm: int = 1000) -> None:
        self.identity = identity
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, identity)
        self.socket.setsockopt(zmq.RCVHWM, receive_hwm)  # before connect: libzmq applies it to new pipes
        self.socket.connect(address)
        self._next_request_id = 1

    def send(self, message: Any, blobs: Sequence[Any] = ()) -> None:
        self.send_raw(codec.encode(message, blobs))

    def send_raw(self, frames: Sequence[Any]) -> None:
        self.socket.send_multipart(list(frames), copy=False)

    def receive(self, timeout: float = REPLY_TIMEOUT_SECONDS) -> Tuple[Any, List[Any]]:
        if not self.socket.poll(int(timeout * 1000)):
            raise AssertionError(f"no reply within {timeout} seconds")
        return codec.decode(self.socket.recv_multipart())

    def request(self, message: Any, blobs: Sequence[Any] = ()) -> Tuple[Any, List[Any]]:
        self.send(message, blobs)
        return self.receive()

    def hello(self, role: PeerRole = PeerRole.SCHEDULER) -> Any:
        """Hello, by default as the scheduler: it may touch the objects of every owner (what each role may do
        is tested on the core, in test_object_store_access.py)."""
        reply, _ = self.request(Hello(version=PROTOCOL_VERSION, role=role, pid=os.getpid(), hostname="test"))
        return reply

    def object_request(
        self,
        kind: ObjectRequestKind,
        object_ids: Sequence[bytes] = (),
        owner_id: bytes = b"",
        blobs: Sequence[Any] = (),
    ) -> Tuple[ObjectResponse, List[bytes]]:
        request_id = self._next_request_id
        self._next_request_id += 1
        request = ObjectRequest(request_id=request_id, kind=kind, owner_id=owner_id, object_ids=list(object_ids))
        reply, reply_blobs = self.request(request, blobs)
        assert isinstance(reply, ObjectResponse), reply
        assert reply.request_id == request_id and reply.kind == kind, reply
        return reply, reply_blobs

    def put(self, owner_id: bytes, objects: Sequence[Tuple[bytes, bytes]]) -> ObjectResponse:
        ids = [object_id for object_id, _ in objects]
        return self.object_request(ObjectRequestKind.PUT, ids, owner_id, [payload for _, payload in objects])[0]

    def get(self, object_ids: Sequence[bytes]) -> Tuple[ObjectResponse, List[bytes]]:
        return self.object_request(ObjectRequestKind.GET, object_ids)

    def delete(self, object_ids: Sequence[bytes], owner_id: bytes) -> ObjectResponse:
        return self.object_request(ObjectRequestKind.DELETE, object_ids, owner_id)[0]

    def clear_owner(self, owner_id: bytes) -> ObjectResponse:
        return self.object_request(ObjectRequestKind.CLEAR_OWNER, owner_id=owner_id)[0]

    def close(self) -> None:
        self.socket.close(linger=0)


def wait_until_serving(
    context: zmq.Context, address: str, exit_code: Callable[[], Optional[int]], log: Callable[[], str]
) -> None:
    """Say Hello until the server at ``address`` answers (the DEALER queues it until the server has bound).

    Fails at once when ``exit_code()`` says the server process has exited.
    """
    peer = Peer(context, address, b"C|test-ready|" + os.urandom(4).hex().encode())
    try:
        peer.send(Hello(version=PROTOCOL_VERSION))
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            code = exit_code()
            if code is not None:
                raise AssertionError(f"server exited with {code}:\n{log()}")
            if peer.socket.poll(100):
                reply, _ = codec.decode(peer.socket.recv_multipart())
                assert isinstance(reply, HelloAck), reply
                return
        raise AssertionError(f"server did not answer Hello within {START_TIMEOUT_SECONDS} seconds:\n{log()}")
    finally:
        peer.close()


@pytest.fixture(scope="session")
def zmq_context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    try:
        yield context
    finally:
        context.destroy(linger=0)


StartStorage = Callable[..., StorageProcess]


def _storage_starter(
    context: zmq.Context, directory: Path
) -> Tuple[Callable[..., StorageProcess], List[StorageProcess]]:
    started: List[StorageProcess] = []

    def start(
        *arguments: str, address: Optional[str] = None, pass_address: bool = True, wait: bool = True
    ) -> StorageProcess:
        """Start ``python -m scaler.storage ADDRESS *arguments`` (without ADDRESS when not ``pass_address``)."""
        if address is None:
            address = f"tcp://127.0.0.1:{free_tcp_port()}"
        server = StorageProcess(address, arguments, directory / f"storage-{len(started)}.log", pass_address)
        started.append(server)
        if wait:
            wait_until_serving(context, address, server.process.poll, server.log)
        return server

    return start, started


@pytest.fixture
def start_storage(zmq_context: zmq.Context, tmp_path: Path) -> Iterator[StartStorage]:
    """Start servers for one test; every one is stopped afterwards, also when the test fails."""
    start, started = _storage_starter(zmq_context, tmp_path)
    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="module")
def storage(zmq_context: zmq.Context, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StorageProcess]:
    """A server shared by a module's tests (each uses its own IDs), with room for a 50 MB object."""
    start, started = _storage_starter(zmq_context, tmp_path_factory.mktemp("storage"))
    try:
        yield start("--max-memory", "256M", "--max-object-size", "128M")
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="module")
def small_storage(zmq_context: zmq.Context, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StorageProcess]:
    """A server with tiny limits: objects up to 1 KiB, 2 KiB in all (a client may take it all)."""
    start, started = _storage_starter(zmq_context, tmp_path_factory.mktemp("small-storage"))
    try:
        yield start(
            "--max-object-size", "1K", "--memory-limit", "2K", "--max-client-memory", "2K", "--spill-directory", "none"
        )
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def connect(zmq_context: zmq.Context) -> Iterator[Callable[..., Peer]]:
    """``connect(server or address, hello=True, identity=None, receive_hwm=1000)`` -> a Peer, closed after the test."""
    peers: List[Peer] = []

    def make(
        server: Union[StorageProcess, str],
        hello: bool = True,
        identity: Optional[bytes] = None,
        receive_hwm: int = 1000,
    ) -> Peer:
        if identity is None:
            identity = b"C|test|" + str(os.getpid()).encode() + b"|" + os.urandom(6).hex().encode()
        peer = Peer(zmq_context, server if isinstance(server, str) else server.address, identity, receive_hwm)
        peers.append(peer)
        if hello:
            reply = peer.hello()
            assert isinstance(reply, HelloAck), reply
        return peer

    try:
        yield make
    finally:
        for peer in peers:
            peer.close()


@pytest.fixture
def wait_serving(zmq_context: zmq.Context) -> Callable[[str, Callable[[], Optional[int]], Callable[[], str]], None]:
    """``wait_serving(address, exit_code, log)``: see `wait_until_serving`."""
    return lambda address, exit_code, log: wait_until_serving(zmq_context, address, exit_code, log)
