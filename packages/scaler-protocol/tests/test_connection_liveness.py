"""Every socket made by `new_socket` has the TCP options that find a vanished host in seconds (checked on the
operating system's sockets of a real connection, both ends); tests/test_vanished_hosts.py shows what they do
across network namespaces."""

from __future__ import annotations

import socket as os_socket
import sys

import pytest
import zmq

from scaler.protocol.connection_liveness import DEAD_PEER_SECONDS, KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS
from scaler.protocol.security import NO_KEYS, new_socket


@pytest.mark.skipif(sys.platform != "linux", reason="TCP_USER_TIMEOUT and TCP_KEEPIDLE are Linux's")
def test_both_ends_of_a_connection_probe_an_idle_peer_and_give_up_on_an_unanswering_one() -> None:
    context = zmq.Context()
    server = new_socket(context, zmq.ROUTER, NO_KEYS)
    client = new_socket(context, zmq.DEALER, NO_KEYS)
    try:
        port = server.bind_to_random_port("tcp://127.0.0.1")
        client.connect(f"tcp://127.0.0.1:{port}")
        client.send(b"hello")
        assert server.poll(10_000)
        _, frame = server.recv_multipart(copy=False)
        accepted = frame.get(zmq.SRCFD)
        client.send(b"again")  # the connecting end: its only TCP socket in this process besides the accepted one
        assert server.poll(10_000)
        server.recv_multipart()
        for fd in (accepted, _the_other_tcp_fd(accepted)):
            with os_socket.socket(fileno=os_socket.dup(fd)) as tcp:
                assert tcp.getsockopt(os_socket.SOL_SOCKET, os_socket.SO_KEEPALIVE) == 1
                assert tcp.getsockopt(os_socket.IPPROTO_TCP, os_socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE_SECONDS
                assert tcp.getsockopt(os_socket.IPPROTO_TCP, os_socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL_SECONDS
                assert tcp.getsockopt(os_socket.IPPROTO_TCP, os_socket.TCP_USER_TIMEOUT) == DEAD_PEER_SECONDS * 1000
    finally:
        client.close(linger=0)
        server.close(linger=0)
        context.term()


def _the_other_tcp_fd(accepted: int) -> int:
    """The connecting end's file descriptor: the connected TCP socket of this process that is not ``accepted``
    (and not the listening one)."""
    import os

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == accepted:
            continue
        try:
            with os_socket.socket(fileno=os_socket.dup(fd)) as candidate:
                if candidate.type != os_socket.SOCK_STREAM or candidate.family != os_socket.AF_INET:
                    continue
                candidate.getpeername()  # a listening socket has no peer
                return fd
        except OSError:
            continue
    raise AssertionError("no connecting TCP socket found")
