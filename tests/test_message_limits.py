"""Message size limits and handshake time on every listening socket (issue 25, item 2), with real processes.

The attacks are raw TCP peers that speak ZeroMQ's greeting (ZMTP 3.0) and then announce a frame of 2 GiB, as
an unauthenticated peer can: with keys, in the middle of a CurveZMQ handshake; without, anywhere. ZeroMQ
buffers such a frame as it arrives unless the socket caps the message size (``ZMQ_MAXMSGSIZE``); with the cap,
it disconnects the peer on the frame's header. The daemons' memory is measured with psutil. An authenticated
peer learns the limit from the daemon's HelloAck: a `Client` splits what it sends and refuses, naming the limit,
what cannot fit; a raw peer that sends more anyway is disconnected, and the others go on. The attacks are
written in `hostile_attacks.py`.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Dict, List

import psutil
import pytest
from cluster_processes import hello_answered, wait_until, worker_count
from hostile_attacks import PORT_OFFSETS, STREAMED_MIB, announce_huge_frame, greeted, over_the_limit, still_open, stream

from scaler import Client
from scaler.protocol.addresses import default_monitor_address
from scaler.protocol.errors import ObjectStorageRefusedError, ProtocolError
from scaler.protocol.keygen import write_cluster_keys
from scaler.protocol.message_limits import HANDSHAKE_SECONDS
from scaler.protocol.security import NO_SECURITY, SecurityConfig

GROWTH_BOUND = 32 << 20  # what the daemon may grow by meanwhile (without the cap: all that was streamed)


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


@pytest.mark.parametrize("target", list(PORT_OFFSETS))
def test_a_frame_announced_over_the_limit_is_refused_before_it_is_buffered(daemons, target):
    """A 2 GiB frame announced before (or without) authentication disconnects the peer on its header: the daemon
    does not grow by what follows, and serves a legitimate client after."""
    daemon = psutil.Process(daemons.pids[target])
    before = daemon.memory_info().rss
    connection = greeted(daemons.port(target), daemons.mechanism)
    try:
        announce_huge_frame(connection)
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
    try:
        open_ = still_open(connections, HANDSHAKE_SECONDS + 10)
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
    (ZeroMQ's ZMQ_MAXMSGSIZE: the daemon neither sees the message nor learns why the connection closed, so no
    refusal can name the limit), and a legitimate client goes on."""
    with Client(limited.address, security=limited.client, timeout_seconds=30) as client:
        assert over_the_limit(limited.address, limited.client) == 1 << 20
        assert client.submit(count_arguments, b"a", b"b").result(timeout=60) == 2
