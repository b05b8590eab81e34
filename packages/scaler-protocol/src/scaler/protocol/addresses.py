"""Addresses of the processes, and the defaults derived from the scheduler's."""

from __future__ import annotations

import socket

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


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
