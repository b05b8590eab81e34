"""What a connecting socket's monitor says of its connection, with real sockets."""

from __future__ import annotations

import time
from typing import List

import pytest
import zmq

from scaler.protocol.connection_events import DOWN, REFUSED, UP, ConnectionWatch, role_name
from scaler.protocol.messages import PeerRole


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


def test_roles_are_named_for_people():
    assert role_name(PeerRole.OBJECT_STORAGE) == "an object storage server"
    assert role_name(PeerRole.SCHEDULER) == "a scheduler"
