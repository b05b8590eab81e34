"""The attacks of the hostile-peer tests, written once: raw pyzmq peers (the codec and a DEALER, no `Client`), and
raw TCP peers that speak ZeroMQ's greeting, that send what no Scaler client or worker would, each checking what
the daemons answer. The test of each attack runs it alone (`test_hostile_peers.py`, `test_message_limits.py`,
`test_object_isolation.py`, `test_task_output_isolation.py`, `test_revocation.py`); `hostile_scene.py` runs them
all at once beside a legitimate client (`test_hostile_neighbours.py`, `benchmarks/hostile_neighbours.py`)."""

from __future__ import annotations

import os
import select
import socket
import struct
import sys
import time
from typing import Any, List, Sequence

import cloudpickle
import pytest
import zmq
from keyed_clusters import RawPeer
from raw_peers import RawClient

from scaler.monitor.subscription import SnapshotSubscription
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.connection_events import DOWN, ConnectionWatch
from scaler.protocol.errors import ObjectNotFoundError, ProtocolError
from scaler.protocol.ids import IDGenerator, new_client_id
from scaler.protocol.security import SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

ANSWER_SECONDS = 30.0  # the bound of each wait for a daemon's answer
NOWHERE = [m.Capability("nowhere", -1)]  # no worker offers it: such a task stays queued (capability policy)
ids = IDGenerator()
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module: `echo` goes whole


# --- connection churn ------------------------------------------------------------------------------------------

IN_FLIGHT = 500  # Hellos not answered yet, at most


def churn_identity(index: int, tag: str = "churn") -> bytes:
    return f"C|{tag}|{os.getpid()}|{index:06d}".encode()


def hello_then_close(address: str, security: SecurityConfig, count: int, wave: int, tag: str = "churn") -> None:
    """``count`` raw client connections to ``address`` (identities `churn_identity`), each of which says Hello
    and, once answered, waits for the rest of its wave of ``wave`` connections; then the wave closes at once."""
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, wave + IN_FLIGHT + 1024)  # closed sockets count until ZeroMQ reaps them
    keys = peer_keys(security)
    hello = codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, os.getpid(), "churn", m.WorkerInfo()))
    poller = zmq.Poller()
    waiting: List[zmq.Socket] = []  # Hello sent, no answer yet
    answered: List[zmq.Socket] = []  # the rest of the wave
    started = 0
    try:
        while started < count or waiting:
            while started < count and len(waiting) < IN_FLIGHT and len(waiting) + len(answered) < wave:
                peer = new_socket(context, zmq.DEALER, keys)
                peer.setsockopt(zmq.IDENTITY, churn_identity(started, tag))
                peer.connect(address)
                peer.send_multipart(hello)
                poller.register(peer, zmq.POLLIN)
                waiting.append(peer)
                started += 1
            ready = dict(poller.poll(int(ANSWER_SECONDS * 1000)))
            assert ready, f"{address} stopped answering Hellos after {started - len(waiting)} of {count}"
            for peer in [each for each in waiting if each in ready]:
                answer, _ = codec.decode(peer.recv_multipart())
                assert type(answer) is m.HelloAck, answer
                poller.unregister(peer)
                waiting.remove(peer)
                answered.append(peer)
            if len(answered) == wave or (started == count and not waiting):
                for peer in answered:
                    peer.close()
                answered.clear()
    finally:
        for peer in waiting + answered:
            peer.close()
        context.term()


# --- frames over the limit, handshakes that stall ----------------------------------------------------------------

ANNOUNCED = 1 << 31  # the frame size the attacker's header claims
STREAMED_MIB = 160  # what it then sends, if it may
PORT_OFFSETS = {"scheduler": 0, "object storage server": 1, "monitor feed": 2}  # from the scheduler's port


def greeting(mechanism: bytes) -> bytes:
    """A ZMTP 3.0 greeting of a client (signature, version 3.0, mechanism, as-server 0, filler)."""
    return b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\x00") + b"\x00" + bytes(31)


def greeted(port: int, mechanism: bytes) -> socket.socket:
    """A TCP connection to ``port`` that exchanged ZMTP greetings (the handshake's commands come next); the
    ``mechanism`` is CURVE with keys (an unauthenticated peer in the middle of its handshake), NULL without."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(greeting(mechanism))
    received = b""
    while len(received) < 64:
        chunk = connection.recv(64 - len(received))
        assert chunk, "the daemon closed the connection during the greeting"
        received += chunk
    assert received[12:32].rstrip(b"\x00") == mechanism
    return connection


def announce_huge_frame(connection: socket.socket) -> None:
    """A long command frame of `ANNOUNCED` bytes: the peer is still handshaking."""
    connection.sendall(b"\x06" + struct.pack(">Q", ANNOUNCED))


def stream(connection: socket.socket, mebibytes: int) -> int:
    """Send up to ``mebibytes`` MiB of zeros; how many MiB went before the peer closed the connection."""
    chunk = bytes(1 << 20)
    for sent in range(mebibytes):
        try:
            connection.sendall(chunk)
        except OSError:  # reset, or broken pipe: the daemon disconnected us
            return sent
    return mebibytes


def still_open(connections: Sequence[socket.socket], seconds: float) -> List[socket.socket]:
    """Those of ``connections`` (each greeted, then silent) the daemons have not closed after ``seconds``."""
    open_ = list(connections)
    deadline = time.monotonic() + seconds
    while open_ and time.monotonic() < deadline:
        readable, _, _ = select.select(open_, [], [], max(0.0, deadline - time.monotonic()))
        for connection in readable:
            try:
                data = connection.recv(4096)
            except OSError:
                data = b""
            if not data:
                open_.remove(connection)
    return open_


def over_the_limit(address: str, security: SecurityConfig) -> int:
    """A raw client (with the keys of ``security``) says Hello, then sends one frame over the limit its HelloAck
    states: its connection must close (ZeroMQ's ZMQ_MAXMSGSIZE). The limit it was told."""
    context = zmq.Context()
    keys = peer_keys(security)
    peer = new_socket(context, zmq.DEALER, keys)
    peer.setsockopt(zmq.IDENTITY, new_client_id())
    watch = ConnectionWatch(peer, keys, "the scheduler")
    try:
        peer.connect(address)
        peer.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, os.getpid(), "raw")))
        assert peer.poll(int(ANSWER_SECONDS * 1000)), "no answer to Hello"
        ack, _ = codec.decode(peer.recv_multipart())
        assert type(ack) is m.HelloAck and ack.max_message_size > 0, ack
        peer.send_multipart([bytes(ack.max_message_size + 1)])
        changes: List[str] = []
        deadline = time.monotonic() + ANSWER_SECONDS
        while DOWN not in changes and time.monotonic() < deadline:
            if watch.monitor.poll(500):
                changes.append(watch.change(watch.monitor.recv_multipart()) or "")
        assert DOWN in changes, f"the scheduler kept the connection of a peer that sent {ack.max_message_size + 1} B"
        return ack.max_message_size
    finally:
        watch.close()
        peer.close(linger=0)
        context.term()


# --- another client's objects and IDs ------------------------------------------------------------------------------


def echo(value: Any) -> Any:
    return value


class Attacker:
    """A client made by hand: a DEALER at the scheduler and one at the storage server, under one identity, with
    the keys of ``security``."""

    def __init__(self, address: str, security: SecurityConfig) -> None:
        self.identity = new_client_id()
        self.scheduler = RawPeer(address, m.PeerRole.CLIENT, security, self.identity)
        assert type(self.scheduler.answer) is m.HelloAck, self.scheduler.answer
        storage_address = self.scheduler.answer.object_storage_address
        self.storage = RawPeer(storage_address, m.PeerRole.CLIENT, security, self.identity)
        self.echo_id = self.put([cloudpickle.dumps(echo)])[0]

    def put(self, payloads: List[bytes], object_ids: Sequence[bytes] = ()) -> List[bytes]:
        """Put objects of the attacker's own, under fresh IDs or ``object_ids``; their IDs."""
        object_ids = list(object_ids) or [ids.next_id() for _ in payloads]
        answer = self.storage.request(m.ObjectRequest(1, m.ObjectRequestKind.PUT, self.identity, object_ids), payloads)
        assert answer.statuses == [m.ObjectStatus.OK] * len(object_ids), answer
        return object_ids

    def task(self, function_id: bytes = b"", arguments: Sequence[m.Argument] = (), task_id: bytes = b"") -> m.Task:
        """A task of the attacker's (its echo function by default), under a fresh ID or ``task_id``."""
        return m.Task(task_id or ids.next_id(), self.identity, function_id or self.echo_id, list(arguments))

    def run(self, task: m.Task) -> m.TaskResult:
        """Submit ``task``; its result (fails the test if none comes within the peer's bound)."""
        self.scheduler.send(m.TaskBatch([task]))
        while True:
            message = self.scheduler.receive()
            if type(message) is m.TaskResultBatch:
                (result,) = message.results
                assert result.task_id == task.task_id
                return result

    def close(self) -> None:
        self.storage.close()
        self.scheduler.close()


def failure(result: m.TaskResult) -> BaseException:
    assert result.status == m.TaskStatus.FAILED, result
    error, _ = cloudpickle.loads(result.payload)
    return error


def read_through_tasks(attacker: Attacker, object_id: bytes, function_id: bytes, secrets: Sequence[bytes]) -> None:
    """Tasks that name another client's object (as an argument) or function fail, revealing none of ``secrets``."""
    by_argument = attacker.task(arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)])
    for task in (by_argument, attacker.task(function_id)):
        result = attacker.run(task)
        error = failure(result)
        assert isinstance(error, ObjectNotFoundError)
        assert f"not one the tasks of client {attacker.identity.decode()} may read" in str(error)
        assert not any(secret in result.payload for secret in secrets)


def following(seen: bytes, count: int) -> List[bytes]:
    """The IDs a generator of 8 random bytes and a counter (as before) would make after ``seen``."""
    counter = int.from_bytes(seen[8:], "big")
    return [seen[:8] + (counter + step).to_bytes(8, "big") for step in range(1, count + 1)]


def squat_guessed_ids(attacker: Attacker, seen_object_id: bytes, count: int = 40) -> None:
    """The attacker takes the IDs it guesses the owner of ``seen_object_id`` makes next: tasks that stay queued
    (capability policy), and objects."""
    guesses = following(seen_object_id, count)
    attacker.scheduler.send(m.TaskBatch([m.Task(guess, attacker.identity, attacker.echo_id, capabilities=NOWHERE)
                                         for guess in guesses]))  # fmt: skip
    attacker.put([b"squatted"] * len(guesses), guesses)


def squat_live_task_id(attacker: Attacker, task_id: bytes) -> None:
    """A task under the ID of another client's live task is refused to the attacker."""
    squatting = attacker.task(arguments=[m.Argument("", m.ArgumentKind.INLINE, b"")], task_id=task_id)
    refused = attacker.run(squatting)
    assert refused.status == m.TaskStatus.REJECTED and "is taken by another task" in refused.error_text, refused


def squat_live_object_id(attacker: Attacker, object_id: bytes) -> None:
    """A put under the ID of another client's object is refused to the attacker."""
    request = m.ObjectRequest(2, m.ObjectRequestKind.PUT, attacker.identity, [object_id])
    taken = attacker.storage.request(request, (b"evil",))
    assert type(taken) is m.Refusal and "not this peer's to replace" in taken.reason, taken


# --- forged task output ------------------------------------------------------------------------------------------

FORGED = "FORGED"  # in every forged line: none may reach the client


def forge_output(forger: RawPeer, client_id: bytes, task_id: bytes) -> None:
    """A worker that does not hold ``task_id`` sends output for it (and for no task) to ``client_id``; returns once
    the scheduler handled it (it handles a peer's messages in order: it answered the heartbeat sent after)."""
    forged = [
        m.TaskOutput(task_id, client_id, m.OutputStream.STDOUT, f"{FORGED} on the client's own task\n"),
        m.TaskOutput(os.urandom(16), client_id, m.OutputStream.STDOUT, f"{FORGED} on no task\n"),
        m.TaskOutput(task_id, client_id, m.OutputStream.STDERR, f"\x1b[2J{FORGED} on stderr\n"),
    ]
    forger.send(m.TaskOutputBatch(forged))
    while type(forger.request(m.WorkerHeartbeat())) is not m.WorkerHeartbeatEcho:
        pass


# --- one huge message --------------------------------------------------------------------------------------------


def chain_graph(client_id: bytes, function_id: bytes, nodes: int) -> m.GraphTask:
    """A chain of ``nodes`` graph nodes in dependency order, whose first needs a capability no worker has: under the
    capability policy nothing of it ever runs."""
    tasks = [m.Task(task_id=ids.next_id(), client_id=client_id, function_id=function_id, capabilities=NOWHERE)]
    for _ in range(nodes - 1):
        needed = m.Argument("", m.ArgumentKind.TASK, tasks[-1].task_id)
        tasks.append(m.Task(task_id=ids.next_id(), client_id=client_id, function_id=function_id, arguments=[needed]))
    return m.GraphTask(graph_id=ids.next_id(), tasks=tasks, targets=[tasks[-1].task_id])


def waiting_batch(client_id: bytes, function_id: bytes, count: int) -> m.TaskBatch:
    """``count`` tasks that need a capability no worker has: under the capability policy they wait in the
    scheduler's queue."""
    return m.TaskBatch([m.Task(task_id=ids.next_id(), client_id=client_id, function_id=function_id,
                               capabilities=NOWHERE) for _ in range(count)])  # fmt: skip


def huge_message_sent(hostile: RawClient, frames: List[bytes]) -> None:
    """The raw client says Hello to the scheduler, sends ``frames`` (one huge message) and a heartbeat after it."""
    assert type(hostile.scheduler.hello(m.PeerRole.CLIENT)) is m.HelloAck
    hostile.scheduler.send_frames(frames)
    hostile.scheduler.send(m.ClientHeartbeat())


def answered(hostile: RawClient, timeout: float = 0.0) -> bool:
    """Whether the scheduler answered, within ``timeout``, the raw client's first heartbeat after its huge message
    (it took the message whole); nothing else comes before (a rejected graph would)."""
    received = hostile.scheduler.receive(timeout)
    assert received is None or type(received[0]) is m.ClientHeartbeatEcho, received
    return received is not None


# --- a revoked monitor key ---------------------------------------------------------------------------------------


def revoked_subscription_ends(monitor_address: str, security: SecurityConfig, key_file: str, within: float) -> None:
    """A monitor of ``security`` receives snapshots; once its authorized public ``key_file`` is removed, its
    subscription ends and its key is refused within ``within`` seconds, and it receives nothing after."""
    with SnapshotSubscription(monitor_address, security) as revoked:
        assert revoked.receive(within) is not None
        os.remove(key_file)
        deadline = time.monotonic() + within
        with pytest.raises(ProtocolError, match="refused key"):  # its subscription closed, its key refused since
            while time.monotonic() < deadline:
                revoked.receive(deadline - time.monotonic())
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                assert revoked.receive(deadline - time.monotonic()) is None
            except ProtocolError:  # refused again, as it connects again
                pass
