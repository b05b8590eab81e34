"""Typed identifiers.

Client and worker IDs are readable (``C|host|pid|hex``) because they appear in
logs and in the monitor; they are also the ZeroMQ identities of those peers.
Task and object IDs are 16 bytes: 8 random bytes per generator plus an 8-byte
counter, so generating one costs a single concatenation.
"""

from __future__ import annotations

import itertools
import os
import socket
from typing import NewType

ClientID = NewType("ClientID", bytes)
WorkerID = NewType("WorkerID", bytes)
TaskID = NewType("TaskID", bytes)
ObjectID = NewType("ObjectID", bytes)


def _peer_id(kind: str) -> bytes:
    return f"{kind}|{socket.gethostname()}|{os.getpid()}|{os.urandom(6).hex()}".encode()


def new_client_id() -> ClientID:
    return ClientID(_peer_id("C"))


def new_worker_id() -> WorkerID:
    return WorkerID(_peer_id("W"))


class IDGenerator:
    """Generates 16-byte task or object IDs that are unique across processes."""

    __slots__ = ("_prefix", "_counter")

    def __init__(self) -> None:
        self._prefix = os.urandom(8)
        self._counter = itertools.count(1)

    def next_id(self) -> bytes:
        return self._prefix + next(self._counter).to_bytes(8, "big")


def show(identifier: bytes) -> str:
    """Printable form of any ID, for logs and error messages."""
    if identifier[:2] in (b"C|", b"W|", b"S|", b"M|"):
        return identifier.decode(errors="replace")
    return identifier.hex()
