"""Peers made by hand (a pyzmq DEALER and the codec) for tests that send what no Scaler client or worker would:
damaged tasks, fuzzed frames, a worker that loses what it is sent."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Callable, List, Optional, Tuple

import cloudpickle
import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.ids import IDGenerator
from scaler.protocol.security import NO_SECURITY, SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

DEADLINE_SECONDS = 60.0

_identities = itertools.count(1)


def identity(kind: str) -> bytes:
    """A fresh peer identity: ``kind`` is ``C`` (client) or ``W`` (worker)."""
    return f"{kind}|raw|{os.getpid()}|{next(_identities):06d}".encode()


class RawPeer:
    """A DEALER at ``address`` under ``peer_id``, with the keys of ``security``; closed by `close` (the test's
    ``finally``)."""

    def __init__(
        self, context: zmq.Context, address: str, peer_id: bytes, security: SecurityConfig = NO_SECURITY
    ) -> None:
        self.peer_id = peer_id
        self.socket = new_socket(context, zmq.DEALER, peer_keys(security))
        self.socket.setsockopt(zmq.IDENTITY, peer_id)
        self.socket.connect(address)

    def close(self) -> None:
        self.socket.close(linger=0)

    def send(self, message: Any, blobs: Tuple[Any, ...] = ()) -> None:
        self.socket.send_multipart(codec.encode(message, blobs))

    def send_frames(self, frames: List[bytes]) -> None:
        self.socket.send_multipart(frames)

    def receive(self, timeout: float = DEADLINE_SECONDS) -> Optional[Tuple[Any, List[Any]]]:
        """The next message and its blobs, or None if none came within ``timeout``."""
        if not self.socket.poll(int(timeout * 1000)):
            return None
        return codec.decode(self.socket.recv_multipart())

    def expect(self, message_type: type, timeout: float = DEADLINE_SECONDS) -> Any:
        """The next message of ``message_type``, skipping others (echoes, ...)."""
        deadline = time.monotonic() + timeout
        while True:
            received = self.receive(max(0.0, deadline - time.monotonic()))
            if received is None:
                raise TimeoutError(f"no {message_type.__name__} within {timeout}s")
            if type(received[0]) is message_type:
                return received[0]

    def hello(self, role: m.PeerRole, queue_capacity: int = 10) -> Any:
        """Say Hello; the answer (HelloAck or Refusal)."""
        info = m.WorkerInfo(slots=1, queue_capacity=queue_capacity)
        self.send(m.Hello(PROTOCOL_VERSION, role, os.getpid(), "raw", info))
        received = self.receive()
        assert received is not None, "no answer to Hello"
        return received[0]


class RawClient:
    """A client made by hand: its tasks are built here (function put in storage, arguments pickled inline); with
    the keys of ``security``."""

    def __init__(
        self, context: zmq.Context, scheduler_address: str, storage_address: str, security: SecurityConfig = NO_SECURITY
    ) -> None:
        self.peer_id = identity("C")
        self.scheduler = RawPeer(context, scheduler_address, self.peer_id, security)
        self.storage = RawPeer(context, storage_address, self.peer_id, security)
        self._ids = IDGenerator()
        self._functions: dict = {}

    def connect(self) -> None:
        assert type(self.scheduler.hello(m.PeerRole.CLIENT)) is m.HelloAck
        assert type(self.storage.hello(m.PeerRole.CLIENT)) is m.HelloAck

    def close(self) -> None:
        self.scheduler.close()
        self.storage.close()

    def task(self, function: Callable, *args: Any) -> m.Task:
        function_id = self._functions.get(function)
        if function_id is None:
            function_id = self._functions[function] = self._ids.next_id()
            request = m.ObjectRequest(1, m.ObjectRequestKind.PUT, self.peer_id, [function_id])
            self.storage.send(request, (cloudpickle.dumps(function),))
            response = self.storage.expect(m.ObjectResponse)
            assert response.statuses == [m.ObjectStatus.OK], response
        arguments = [m.Argument("", m.ArgumentKind.INLINE, cloudpickle.dumps(value)) for value in args]
        return m.Task(task_id=self._ids.next_id(), client_id=self.peer_id, function_id=function_id, arguments=arguments)

    def results(self, count: int, timeout: float = DEADLINE_SECONDS) -> dict:
        """The next ``count`` results, by task ID (a second result for a task fails the test)."""
        found: dict = {}
        deadline = time.monotonic() + timeout
        while len(found) < count:
            batch = self.scheduler.expect(m.TaskResultBatch, max(0.0, deadline - time.monotonic()))
            for result in batch.results:
                assert result.task_id not in found, f"a second result for task {result.task_id.hex()}"
                found[result.task_id] = result
        return found


def value_of(result: m.TaskResult) -> Any:
    assert result.status == m.TaskStatus.SUCCESS, (result.status, result.error_text)
    assert result.payload_kind == m.PayloadKind.INLINE
    return cloudpickle.loads(result.payload)


def without_nul(frame: bytes, text: bytes) -> bytes:
    """``frame`` with the NUL byte that ends the text field ``text`` replaced: a task no reader can read."""
    damaged = bytearray(frame)
    end = damaged.index(text + b"\x00") + len(text)
    damaged[end] = ord("x")
    return bytes(damaged)
