"""Addresses of the processes, and the defaults derived from the scheduler's."""

from __future__ import annotations

import errno
import random
import socket
from typing import Tuple

from scaler.protocol.errors import ScalerError


class AddressError(ScalerError, ValueError):
    """An address that is not ``tcp://host:port`` or ``ipc://path``."""


def check_address(address: str) -> str:
    if address.startswith("ipc://") and len(address) > len("ipc://"):
        return address
    if address.startswith("tcp://"):
        host, sep, port = address[len("tcp://") :].rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            return address
    raise AddressError(f"invalid address {address!r}: expected tcp://HOST:PORT or ipc://PATH")


def _offset(address: str, offset: int, suffix: str) -> str:
    check_address(address)
    if address.startswith("ipc://"):
        return f"{address}.{suffix}"
    host, _, port = address[len("tcp://") :].rpartition(":")
    return f"tcp://{host}:{int(port) + offset}"


def default_storage_address(scheduler_address: str) -> str:
    """The object storage server's default address: the scheduler's port + 1."""
    return _offset(scheduler_address, 1, "storage")


def default_monitor_address(scheduler_address: str) -> str:
    """The scheduler's monitor PUB address: the scheduler's port + 2."""
    return _offset(scheduler_address, 2, "monitor")


def free_tcp_port(host: str = "127.0.0.1", count: int = 1) -> int:
    """A port such that ``port .. port + count - 1`` are free now on ``host``.

    Ports are drawn below the kernel's ephemeral range, so that outgoing
    connections made meanwhile cannot take them before they are bound.
    """
    low, high = _ephemeral_range()
    candidates = (10000, low - count) if low - count > 10000 else (high + 1, 65536 - count)
    for _ in range(1000):
        port = random.randrange(*candidates)
        if all(_bindable(host, port + offset) for offset in range(count)):
            return port
    raise AddressError(f"no {count} consecutive free TCP port(s) found on {host}")


def address_in_use(address: str) -> bool:
    """Whether a process listens at ``address`` now: a TCP port that cannot be bound as ZeroMQ binds it
    (``SO_REUSEADDR``: a port a process just left is free), or an ``ipc://`` path that a connection is accepted at
    (ZeroMQ would take over the path of a live one). An unknown host is not in use here: binding it will say why."""
    check_address(address)
    if address.startswith("ipc://"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(address[len("ipc://") :])
            except OSError:
                return False
        return True
    host, _, port = address[len("tcp://") :].rpartition(":")
    host = "" if host in ("*", "0.0.0.0") else host.strip("[]")
    try:
        family, kind, protocol, _, place = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]  # fmt: skip
    except socket.gaierror:
        return False
    with socket.socket(family, kind, protocol) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(place)
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def _ephemeral_range() -> Tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
            low, high = (int(part) for part in file.read().split())
            return low, high
    except (OSError, ValueError):
        return 49152, 65535  # the IANA range, which Windows and macOS use


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
