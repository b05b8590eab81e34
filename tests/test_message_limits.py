"""Message size limits and handshake time on every listening socket (issue 25, item 2), with real processes.

The attacks are raw TCP peers that speak ZeroMQ's greeting (ZMTP 3.0) and then announce a frame of 2 GiB, as
an unauthenticated peer can: with keys, in the middle of a CurveZMQ handshake; without, anywhere. ZeroMQ
buffers such a frame as it arrives unless the socket caps the message size (``ZMQ_MAXMSGSIZE``); with the cap,
it disconnects the peer on the frame's header. The daemons' memory is measured with psutil. An authenticated
peer learns the limit from the daemon's HelloAck: a `Client` splits what it sends and refuses, naming the limit,
what cannot fit; a raw peer that sends more anyway is disconnected, and the others go on.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Dict, List

import psutil
import pytest
import zmq
from cluster_processes import hello_answered, wait_until, worker_count

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address
from scaler.protocol.connection_events import DOWN, ConnectionWatch
from scaler.protocol.errors import ObjectStorageRefusedError, ProtocolError
from scaler.protocol.ids import new_client_id
from scaler.protocol.keygen import write_cluster_keys
from scaler.protocol.message_limits import HANDSHAKE_SECONDS
from scaler.protocol.security import NO_SECURITY, SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

ANNOUNCED = 1 << 31  # the frame size the attacker's header claims
STREAMED_MIB = 160  # what it then sends, if it may
GROWTH_BOUND = 32 << 20  # what the daemon may grow by meanwhile (without the cap: all that was streamed)
PORT_OFFSETS = {"scheduler": 0, "object storage server": 1, "monitor feed": 2}


@dataclass
class Daemons:
    address: str
    pids: Dict[str, int]  # by what listens at each port offset
    client: SecurityConfig  # a legitimate client's keys
    mechanism: bytes  # what a ZMTP greeting to them says: CURVE with keys, NULL without

    def port(self, target: str) -> int:
        return int(self.address.rpartition(":")[2]) + PORT_OFFSETS[target]


@pytest.fixture(params=[False, True], ids=["without keys", "with keys"])
def daemons(request, processes, address, tmp_path) -> Daemons:
    """A storage server at port + 1 and a scheduler (monitor feed at port + 2), with keys or without."""
    keys = write_cluster_keys(str(tmp_path / "keys")) if request.param else None
    options = keys.server.to_arguments() if keys else []
    client = keys.client if keys else NO_SECURITY
    host, _, port = address.rpartition(":")
    storage = processes.storage(f"{host}:{int(port) + 1}", *options, probe=client)
    scheduler = processes.scheduler(address, *options, probe=client)
    pids = {"scheduler": scheduler.pid, "object storage server": storage.pid, "monitor feed": scheduler.pid}
    return Daemons(address, pids, client, b"CURVE" if keys else b"NULL")


def greeting(mechanism: bytes) -> bytes:
    """A ZMTP 3.0 greeting of a client (signature, version 3.0, mechanism, as-server 0, filler)."""
    return b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + mechanism.ljust(20, b"\x00") + b"\x00" + bytes(31)


def greeted(port: int, mechanism: bytes) -> socket.socket:
    """A TCP connection to ``port`` that exchanged ZMTP greetings (the handshake's commands come next)."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(greeting(mechanism))
    received = b""
    while len(received) < 64:
        chunk = connection.recv(64 - len(received))
        assert chunk, "the daemon closed the connection during the greeting"
        received += chunk
    assert received[12:32].rstrip(b"\x00") == mechanism
    return connection


def stream(connection: socket.socket, mebibytes: int) -> int:
    """Send up to ``mebibytes`` MiB of zeros; how many MiB went before the peer closed the connection."""
    chunk = bytes(1 << 20)
    for sent in range(mebibytes):
        try:
            connection.sendall(chunk)
        except OSError:  # reset, or broken pipe: the daemon disconnected us
            return sent
    return mebibytes


@pytest.mark.parametrize("target", list(PORT_OFFSETS))
def test_a_frame_announced_over_the_limit_is_refused_before_it_is_buffered(daemons, target):
    """A 2 GiB frame announced before (or without) authentication disconnects the peer on its header: the daemon
    does not grow by what follows, and serves a legitimate client after."""
    daemon = psutil.Process(daemons.pids[target])
    before = daemon.memory_info().rss
    connection = greeted(daemons.port(target), daemons.mechanism)
    try:
        connection.sendall(b"\x06" + struct.pack(">Q", ANNOUNCED))  # a long command frame: still handshaking
        sent = stream(connection, STREAMED_MIB)
        grown = daemon.memory_info().rss - before  # measured while the attacker is still connected
    finally:
        connection.close()
    assert grown < GROWTH_BOUND, f"the {target} grew by {grown >> 20} MiB while {sent} MiB were streamed to it"
    assert sent < STREAMED_MIB, f"the {target} took all {sent} MiB of a frame announced as 2 GiB"
    assert hello_answered(daemons.address, timeout=10, security=daemons.client)


def test_a_handshake_that_stalls_is_closed(daemons):
    """A peer that sends its greeting and then nothing is disconnected once the handshake time is over, on
    every listening socket."""
    connections: List[socket.socket] = [greeted(daemons.port(target), daemons.mechanism) for target in PORT_OFFSETS]
    deadline = time.monotonic() + HANDSHAKE_SECONDS + 10
    open_ = list(connections)
    try:
        while open_ and time.monotonic() < deadline:
            readable, _, _ = select.select(open_, [], [], max(0.0, deadline - time.monotonic()))
            for connection in readable:
                try:
                    data = connection.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    open_.remove(connection)
    finally:
        for connection in connections:
            connection.close()
    still = [target for target, connection in zip(PORT_OFFSETS, connections, strict=True) if connection in open_]
    assert not still, f"still open after {HANDSHAKE_SECONDS + 10:g}s of a stalled handshake: {', '.join(still)}"
    assert hello_answered(daemons.address, timeout=10, security=daemons.client)


# --- an authenticated peer ------------------------------------------------------------------------------------

MESSAGE_LIMIT = "1M"  # the scheduler's --max-message-size here
CHUNK = 60 << 10  # an inline argument (the client sends one of up to 64 KiB inline)


def count_arguments(*arguments: bytes) -> int:
    return len(arguments)


@pytest.fixture
def limited(processes, address, tmp_path) -> Daemons:
    """With keys: a storage server taking objects of 2 MiB at most, a scheduler taking messages of 1 MiB at most,
    one worker."""
    keys = write_cluster_keys(str(tmp_path / "keys"))
    host, _, port = address.rpartition(":")
    storage = processes.storage(
        f"{host}:{int(port) + 1}", "--max-object-size", "2M", *keys.server.to_arguments(), probe=keys.client
    )
    options = ("--max-message-size", MESSAGE_LIMIT, *keys.server.to_arguments())
    scheduler = processes.scheduler(address, *options, probe=keys.client)
    processes.cluster(address, 1, *keys.worker.to_arguments())
    monitor = default_monitor_address(address)
    wait_until(lambda: worker_count(monitor, 5, keys.monitor) == 1, 60, "the worker")
    pids = {"scheduler": scheduler.pid, "object storage server": storage.pid, "monitor feed": scheduler.pid}
    return Daemons(address, pids, keys.client, b"CURVE")


def test_a_client_splits_what_fits_and_refuses_what_cannot_naming_the_limit(limited):
    with Client(limited.address, security=limited.client, timeout_seconds=30) as client:
        arguments = [bytes(CHUNK)] * 8  # about 480 KiB inline a task: two tasks do not fit in one message
        assert client.map(count_arguments, [arguments] * 20) == [8] * 20
        with pytest.raises(ProtocolError) as refused:
            client.submit(count_arguments, *([bytes(CHUNK)] * 20)).result(timeout=60)
        assert "the scheduler's message size limit of 1.0 MiB (scaler_scheduler --max-message-size)" in str(
            refused.value
        )
        with pytest.raises(ObjectStorageRefusedError) as refused_object:
            client.send_object(bytes(20 << 20))  # one frame over what the storage server takes
        assert "(scaler_object_storage_server --max-object-size)" in str(refused_object.value)
        assert client.submit(count_arguments, b"still served").result(timeout=60) == 1


def test_a_peer_that_sends_a_message_over_the_limit_anyway_is_disconnected_and_the_others_go_on(limited):
    """A raw peer with a client key: its Hello is answered with the limit; a larger message closes its connection
    (ZeroMQ's ZMQ_MAXMSGSIZE), and a legitimate client goes on."""
    context = zmq.Context()
    keys = peer_keys(limited.client)
    socket = new_socket(context, zmq.DEALER, keys)
    socket.setsockopt(zmq.IDENTITY, new_client_id())
    watch = ConnectionWatch(socket, keys, "the scheduler")
    try:
        with Client(limited.address, security=limited.client, timeout_seconds=30) as client:
            socket.connect(limited.address)
            socket.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, os.getpid(), "raw")))
            assert socket.poll(30_000), "no answer to Hello"
            ack, _ = codec.decode(socket.recv_multipart())
            assert type(ack) is m.HelloAck and ack.max_message_size == 1 << 20
            socket.send_multipart([bytes(2 << 20)])
            changes: List[str] = []
            deadline = time.monotonic() + 30
            while DOWN not in changes and time.monotonic() < deadline:
                if watch.monitor.poll(500):
                    changes.append(watch.change(watch.monitor.recv_multipart()) or "")
            assert DOWN in changes, "the scheduler kept the connection of a peer that sent 2 MiB"
            assert client.submit(count_arguments, b"a", b"b").result(timeout=60) == 2
    finally:
        watch.close()
        socket.close(linger=0)
        context.term()
