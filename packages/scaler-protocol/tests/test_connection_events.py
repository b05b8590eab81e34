"""What a connecting socket's monitor says of its connection, with real sockets."""

from __future__ import annotations

import errno
import struct
import time
from collections import Counter
from typing import List

import pytest
import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.protocol.connection_events import (
    DOWN,
    REFUSED,
    UNEXPLAINED_CLOSES,
    UP,
    ConnectionWatch,
    monitor_socket,
    role_name,
)
from scaler.protocol.messages import PeerRole
from scaler.protocol.security import KeyPair, Keys


def changes_until(watch: ConnectionWatch, wanted: List[str], timeout: float = 10.0) -> List[str]:
    """The changes the monitor reports, until they are ``wanted`` (or the bound is reached)."""
    seen: List[str] = []
    deadline = time.monotonic() + timeout
    while seen != wanted and time.monotonic() < deadline:
        if watch.monitor.poll(100):
            change = watch.change(watch.monitor.recv_multipart())
            if change is not None:
                seen.append(change)
    return seen


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.term()


def test_a_connection_comes_up_and_goes_down_when_the_peer_closes(context):
    server = context.socket(zmq.ROUTER)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    dealer = context.socket(zmq.DEALER)
    watch = ConnectionWatch(dealer)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        assert changes_until(watch, [UP]) == [UP]
        server.close(linger=0)
        assert changes_until(watch, [DOWN]) == [DOWN]
    finally:
        watch.close()
        dealer.close(linger=0)


def test_a_peer_of_a_socket_type_that_cannot_talk_to_ours_refuses_the_handshake(context):
    publisher = context.socket(zmq.XPUB)  # a scheduler's monitor address
    port = publisher.bind_to_random_port("tcp://127.0.0.1")
    dealer = context.socket(zmq.DEALER)
    watch = ConnectionWatch(dealer)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        assert changes_until(watch, [REFUSED]) == [REFUSED]
    finally:
        watch.close()
        dealer.close(linger=0)
        publisher.close(linger=0)


def _event(kind: int, value: int) -> List[bytes]:
    return [struct.pack("=hi", kind, value), b"tcp://127.0.0.1:2345"]


def test_a_handshake_closed_without_a_word_is_refused_only_when_the_next_tries_say_nothing_either(context):
    """A server with keys may close before its greeting is out (a busy host): a later try says it has keys."""
    connected = _event(zmq.EVENT_CONNECTED, 0)
    unexplained = _event(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.EPIPE)
    mismatch = _event(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
    closed = _event(zmq.EVENT_DISCONNECTED, 0)
    watch = ConnectionWatch(context.socket(zmq.DEALER))
    try:
        for _ in range(UNEXPLAINED_CLOSES - 1):
            assert [watch.change(connected), watch.change(unexplained), watch.change(closed)] == [None] * 3
        assert [watch.change(connected), watch.change(mismatch)] == [None, REFUSED]
        assert watch.refusal is not None and "requires CurveZMQ keys" in watch.refusal
        for _ in range(UNEXPLAINED_CLOSES - 1):  # a socket of another kind, on a busy host: nothing is ever said
            assert [watch.change(connected), watch.change(unexplained), watch.change(closed)] == [None] * 3
        assert [watch.change(connected), watch.change(unexplained)] == [None, REFUSED]
        assert watch.refusal is None
        # closed by this side, which found the peer's socket type wrong (ZeroMQ does not try again): at once
        assert [watch.change(connected), watch.change(closed)] == [None, REFUSED]
        assert watch.refusal is None
    finally:
        watch.close()


def test_with_keys_a_peer_killed_during_the_handshake_is_not_taken_for_a_refusal_over_keys(context):
    """A scheduler killed while this side's handshake was under way resets it (no detail) once, then refuses
    connections (no handshake): not a wrong key. Only closes without a word on every try are a refusal."""
    public, secret = zmq.curve_keypair()
    keys = Keys(own=KeyPair(public, secret), server_public=public)
    connected = _event(zmq.EVENT_CONNECTED, 0)
    reset = _event(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.ECONNRESET)
    watch = ConnectionWatch(context.socket(zmq.DEALER), keys, "the scheduler at tcp://127.0.0.1:2345")
    try:
        assert [watch.change(connected), watch.change(reset)] == [None, None]
        assert [watch.change(connected), watch.change(_event(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0))] == [None, UP]
        for _ in range(UNEXPLAINED_CLOSES - 1):
            assert [watch.change(connected), watch.change(reset)] == [None, None]
        assert [watch.change(connected), watch.change(reset)] == [None, REFUSED]
        assert watch.refusal is not None and "is not its public key" in watch.refusal
    finally:
        watch.close()


def test_roles_are_named_for_people():
    assert role_name(PeerRole.OBJECT_STORAGE) == "an object storage server"
    assert role_name(PeerRole.SCHEDULER) == "a scheduler"


def test_a_monitor_nobody_reads_never_stops_the_sockets_of_its_context(context):
    """libzmq's I/O thread waits while a monitor's queue is full (1,000 events by default): an unread monitor of a
    listening socket would stop every socket of the context after some hundreds of connections. The monitor of
    `monitor_socket` queues without limit, so the listener serves on while nobody reads it."""
    context.set(zmq.MAX_SOCKETS, 4096)
    listener = context.socket(zmq.ROUTER)
    port = listener.bind_to_random_port("tcp://127.0.0.1")
    monitor = monitor_socket(listener, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    peers = zmq.Context()
    try:
        for served in range(1500):  # 3,000 events: accepted and closed for each
            peer = peers.socket(zmq.DEALER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.connect(f"tcp://127.0.0.1:{port}")
            peer.send(b"ping")
            assert listener.poll(10_000), f"the listener stopped after {served} connections"
            listener.recv_multipart()
            peer.close()
        reports: Counter = Counter()
        while sum(reports.values()) < 3000 and monitor.poll(10_000):  # every report is there
            reports[parse_monitor_message(monitor.recv_multipart())["event"]] += 1
        assert reports == {zmq.EVENT_ACCEPTED: 1500, zmq.EVENT_DISCONNECTED: 1500}
    finally:
        while monitor.poll(100):  # a monitor that blocked ZeroMQ's I/O thread lets it go: the close can then end
            monitor.recv_multipart()
        listener.disable_monitor()
        monitor.close(linger=0)
        listener.close(linger=0)
        peers.term()
