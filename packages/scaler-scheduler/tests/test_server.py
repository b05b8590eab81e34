"""The scheduler's shell around its core: its effects without the event loop, and its storage connection with it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, List

import zmq
import zmq.asyncio

from scaler.protocol import codec, connection_events, routed, socket_reader
from scaler.protocol import messages as m
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.connection_events import AcceptedConnections
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_events import (
    Burst,
    ConnectionClosed,
    FromPeer,
    FromStorage,
    Publish,
    Send,
    Shutdown,
    Start,
)
from scaler.scheduler.server import SchedulerServer

CLIENT = b"C|host|1|aa"
WORKER = b"W|host|2|aa"
# what the storage servers of these tests say: older than 1.8, they admit no client, so a client's HelloAck leaves
# at once (tests/test_object_isolation.py runs the admissions with real processes)
NOT_ADMITTING = m.Version(1, 7)


class _SentFrames:
    """Stands in for the ROUTER socket: keeps what would have been sent, decoded."""

    def __init__(self) -> None:
        self.sent: List[Any] = []

    def send_multipart(self, frames: List[Any], flags: int = 0) -> None:
        self.sent.append((frames[0], codec.decode(frames[1:])[0]))


def test_a_task_that_cannot_be_copied_on_is_rejected_to_its_client_and_the_others_go():
    server = SchedulerServer("tcp://127.0.0.1:1")  # its sockets are made by run(), which is not called
    try:
        router = server._router = _SentFrames()
        server.core.handle(Start(), 0.0)
        server.core.handle(FromStorage(m.HelloAck(NOT_ADMITTING)), 0.0)  # as if its storage server answered
        for peer, role in ((CLIENT, m.PeerRole.CLIENT), (WORKER, m.PeerRole.WORKER)):
            server._feed(FromPeer(peer, m.Hello(PROTOCOL_VERSION, role, 1, "host", m.WorkerInfo(1, 10, []))))
        tasks = [m.Task(task_id=bytes([i]) * 16, function_id=b"f") for i in range(3)]
        batch, _ = routed.decode_routed(codec.encode(m.TaskBatch(tasks)))
        batch.tasks[1]._index = 10**6  # its struct can no longer be found in the message it came in
        router.sent.clear()
        server._feed(FromPeer(CLIENT, batch))

        to_worker = [message for to, message in router.sent if to == WORKER and type(message) is m.TaskBatch]
        assert [t.task_id for batch in to_worker for t in batch.tasks] == [tasks[0].task_id, tasks[2].task_id]
        to_client = [message for to, message in router.sent if to == CLIENT and type(message) is m.TaskResultBatch]
        (rejected,) = [r for batch in to_client for r in batch.results]
        assert rejected.task_id == tasks[1].task_id
        assert rejected.status == m.TaskStatus.REJECTED
        assert "could not forward this task" in rejected.error_text
        assert server.core.task_count == 2
    finally:
        server._context.term()


class _Queued:
    """Stands in for a socket that has ``messages`` waiting to be read."""

    closed = False

    def __init__(self, messages: List[Any]) -> None:
        self.messages = list(messages)

    def recv_multipart(self, flags: int = 0, copy: bool = True) -> Any:
        if not self.messages:
            raise zmq.Again()
        return self.messages.pop(0)

    def getsockopt(self, option: int) -> int:
        assert option == zmq.EVENTS
        return zmq.POLLIN if self.messages else 0


def test_messages_read_in_one_wake_up_reach_the_core_together_up_to_the_burst_limit(monkeypatch):
    server = SchedulerServer("tcp://127.0.0.1:1")
    fed: List[Any] = []
    monkeypatch.setattr(server, "_feed", fed.append)
    monkeypatch.setattr(socket_reader, "BURST", 3)
    to_event = lambda frames: FromPeer(CLIENT, frames)  # noqa: E731 - the message is what was read

    async def drain(messages: List[Any]) -> None:
        server._reader(_Queued(messages), to_event, True, True).drain()
        for _ in range(5):  # the drains it asked for
            await asyncio.sleep(0)

    try:
        asyncio.run(drain(["a", "b", "c", "d", "e"]))
        assert [type(event) for event in fed] == [Burst, Burst]
        assert [[e.message for e in burst.events] for burst in fed] == [["a", "b", "c"], ["d", "e"]]
        assert [burst.more for burst in fed] == [True, False]  # the first stopped at the limit: more waited
        fed.clear()
        asyncio.run(drain(["alone"]))
        assert [type(event) for event in fed] == [FromPeer]  # a message alone is an event of its own
    finally:
        server._context.term()


def test_an_error_reading_one_message_or_carrying_out_one_effect_stops_no_reader(monkeypatch, caplog):
    """A message that cannot be read is dropped, an effect that cannot be carried out is dropped: the reader reads
    on, and the effects after it are carried out (each failure logged with what it was)."""
    server = SchedulerServer("tcp://127.0.0.1:1")
    router = server._router = _SentFrames()
    performed: List[Any] = []

    def shutdown(effect: Any) -> None:
        raise RuntimeError("cannot carry this out")

    monkeypatch.setitem(server._performers, Shutdown, shutdown)
    monkeypatch.setitem(server._performers, Publish, performed.append)
    effects = [Shutdown("test"), Send(CLIENT, m.ClientHeartbeatEcho()), Publish(m.StateSnapshot(), False)]
    monkeypatch.setattr(server.core, "handle", lambda event, now: effects if event == "act" else [])

    def to_event(frames: Any) -> Any:
        if frames == "unreadable":
            raise ValueError("no such message")
        return frames

    async def drain() -> None:
        server._reader(_Queued(["unreadable", "act"]), to_event).drain()
        for _ in range(3):
            await asyncio.sleep(0)

    try:
        with caplog.at_level(logging.ERROR):
            asyncio.run(drain())
        assert [type(message) for _, message in router.sent] == [m.ClientHeartbeatEcho]
        assert [type(effect) for effect in performed] == [Publish]
        assert "dropped a message it failed to read (to_event)" in caplog.text
        assert "failed to carry out Shutdown" in caplog.text and "cannot carry this out" in caplog.text
    finally:
        server._context.term()


def test_what_a_peer_sent_before_its_connection_closed_reaches_the_core_before_the_close(monkeypatch):
    """A leaving worker sends DisconnectRequest and closes; the ROUTER's monitor may be read first. The ROUTER is
    read before the close is told, so the core sees the worker leave (not vanish, which it warns of)."""
    server = SchedulerServer("tcp://127.0.0.1:1")
    fed: List[Any] = []
    monkeypatch.setattr(server, "_feed", fed.append)
    monkeypatch.setattr(server, "_router_event", lambda frames: FromPeer(WORKER, frames))
    monkeypatch.setattr(socket_reader, "BURST", 2)
    monkeypatch.setattr(connection_events, "parse_monitor_message", lambda frames: frames)  # the test's reports
    listener = server._context.socket(zmq.ROUTER)  # whose monitor is not read: the test reports instead
    server._connections = AcceptedConnections(listener)

    async def reported(router: _Queued, *events: int) -> None:
        server._router = router
        server._router_reader = server._reader(router, server._router_event, False, True)
        for event in events:
            server._router_connection_event({"event": event, "value": 7})  # descriptor 7

    try:
        asyncio.run(reported(_Queued(["hello"]), zmq.EVENT_ACCEPTED, zmq.EVENT_DISCONNECTED))
        assert fed == [ConnectionClosed(1)]  # not serving yet: the ROUTER is not read
        fed.clear()
        server._serving = True
        asyncio.run(reported(_Queued(["a", "b", "goodbye"]), zmq.EVENT_ACCEPTED, zmq.EVENT_DISCONNECTED))
        assert [[e.message for e in burst.events] for burst in fed[:1]] == [["a", "b"]]
        assert [e.message for e in fed[1:2]] == ["goodbye"]
        assert fed[2:] == [ConnectionClosed(2)]  # the second connection on descriptor 7: an ID of its own
    finally:
        server._connections.close()
        listener.close(linger=0)
        server._context.term()


async def bind_once_free(socket: Any, address: str, timeout: float = 10.0) -> None:
    """Bind ``address`` once the socket closed there has let it go (ZeroMQ closes a listener in its own thread)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            socket.bind(address)
            return
        except zmq.ZMQError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.01)


def test_the_scheduler_serves_once_storage_answers_and_says_hello_again_when_storage_comes_back():
    """A ROUTER socket stands in for the object storage server: it answers the scheduler's Hello, goes away,
    and a new one at the same address gets a new Hello (the shell reports the connection to the core)."""
    port = free_tcp_port(count=3)
    address, storage_address = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"

    async def receive(socket: Any) -> Any:
        frames = await asyncio.wait_for(socket.recv_multipart(), timeout=20)
        return frames[0], codec.decode(frames[1:])[0]

    async def scenario() -> None:
        context = zmq.asyncio.Context()
        storage = context.socket(zmq.ROUTER)
        storage.setsockopt(zmq.LINGER, 0)
        storage.bind(storage_address)
        client = context.socket(zmq.DEALER)
        client.setsockopt(zmq.LINGER, 0)
        server = SchedulerServer(
            address, object_storage_address=storage_address, monitor_address=f"tcp://127.0.0.1:{port + 2}"
        )
        running = asyncio.ensure_future(server.run())
        try:
            identity, hello = await receive(storage)
            assert type(hello) is m.Hello and hello.role == m.PeerRole.SCHEDULER
            await storage.send_multipart([identity, *codec.encode(m.HelloAck(NOT_ADMITTING))])
            client.connect(address)
            await client.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host")))
            frames = await asyncio.wait_for(client.recv_multipart(), timeout=20)
            assert type(codec.decode(frames)[0]) is m.HelloAck
            storage.close(linger=0)
            storage = context.socket(zmq.ROUTER)
            storage.setsockopt(zmq.LINGER, 0)
            await bind_once_free(storage, storage_address)
            _, hello = await receive(storage)
            assert type(hello) is m.Hello and hello.role == m.PeerRole.SCHEDULER
        finally:
            server._stop.set()
            await asyncio.wait_for(running, timeout=20)
            client.close(linger=0)
            storage.close(linger=0)
            context.term()

    asyncio.run(scenario())


def test_a_connection_that_closes_without_a_hello_never_drops_the_peer_that_reuses_its_descriptor():
    """A connection that sent only garbage closes, and the next connection gets its file descriptor: the
    scheduler reads the client's Hello on it and the monitor's news of the first one's close in the same turn
    of its loop. That close concerns the first connection only: the client is served on (its heartbeat is
    answered, not refused for want of a Hello)."""
    port = free_tcp_port(count=3)
    address, storage_address = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"

    async def answer(socket: Any) -> Any:
        frames = await asyncio.wait_for(socket.recv_multipart(), timeout=20)
        return codec.decode(frames)[0]

    async def scenario() -> None:
        context = zmq.asyncio.Context()
        storage = context.socket(zmq.ROUTER)
        storage.setsockopt(zmq.LINGER, 0)
        storage.bind(storage_address)
        server = SchedulerServer(
            address, object_storage_address=storage_address, monitor_address=f"tcp://127.0.0.1:{port + 2}"
        )
        running = asyncio.ensure_future(server.run())
        try:
            identity, _ = await asyncio.wait_for(storage.recv_multipart(), timeout=20)
            await storage.send_multipart([identity, *codec.encode(m.HelloAck(NOT_ADMITTING))])
            for attempt in range(10):
                garbage = context.socket(zmq.DEALER)
                garbage.connect(address)
                await garbage.send(b"not a message")
                client = context.socket(zmq.DEALER)
                client.setsockopt(zmq.LINGER, 0)
                try:
                    # the scheduler's loop is held (this is its thread) while ZeroMQ's threads close the first
                    # connection and accept the client's, on the descriptor just freed, and its Hello arrives
                    garbage.close(linger=1000)
                    time.sleep(0.2)
                    client.connect(address)
                    await client.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "h")))
                    time.sleep(0.2)
                    assert type(await answer(client)) is m.HelloAck
                    await client.send_multipart(codec.encode(m.ClientHeartbeat()))
                    reply = await answer(client)
                    assert type(reply) is m.ClientHeartbeatEcho, (attempt, reply)
                    await client.send_multipart(codec.encode(m.DisconnectRequest("done")))
                    assert type(await answer(client)) is m.DisconnectResponse
                finally:
                    client.close(linger=0)
        finally:
            server._stop.set()
            await asyncio.wait_for(running, timeout=20)
            storage.close(linger=0)
            context.term()

    asyncio.run(scenario())
