"""Typed identifiers.

Client and worker IDs are readable (``C|host|pid|hex``) because they appear in
logs and in the monitor; they are also the ZeroMQ identities of those peers.
A client made while a task runs (inside `clients_made_in`) says so at the end
of its ID (``C|host|pid|hex|in:TASK``), so that whatever runs that task knows
the tasks the client submits are nested in it (`made_in`).
Task and object IDs are 16 bytes: 8 random bytes per generator plus an 8-byte
counter, so generating one costs a single concatenation.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import socket
from typing import Iterator, NewType

ClientID = NewType("ClientID", bytes)
WorkerID = NewType("WorkerID", bytes)
TaskID = NewType("TaskID", bytes)
ObjectID = NewType("ObjectID", bytes)


def _peer_id(kind: str) -> bytes:
    return f"{kind}|{socket.gethostname()}|{os.getpid()}|{os.urandom(6).hex()}".encode()


_MADE_IN = b"|in:"
_made_in: contextvars.ContextVar[bytes] = contextvars.ContextVar("scaler_client_made_in", default=b"")


def new_client_id() -> ClientID:
    return ClientID(_peer_id("C") + _made_in.get())


@contextlib.contextmanager
def clients_made_in(task: str) -> Iterator[None]:
    """Clients made inside this block (in this thread or context) name ``task``, the task running here, in
    their IDs: the runner of that task then recognises the tasks they submit as nested in it."""
    token = _made_in.set(_MADE_IN + task.encode())
    try:
        yield
    finally:
        _made_in.reset(token)


def made_in(client_id: bytes) -> str:
    """The task a client was made in (`clients_made_in`), or "" for a client made outside any task."""
    _, found, task = client_id.rpartition(_MADE_IN)
    return task.decode(errors="replace") if found else ""


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


def show_group(group_id: bytes) -> str:
    """Printable form of a worker group's ID (worker managers make them of text)."""
    return group_id.decode(errors="replace")


def show(identifier: bytes) -> str:
    """Printable form of any ID, for logs and error messages."""
    if identifier[:2] in (b"C|", b"W|", b"S|", b"M|"):
        return identifier.decode(errors="replace")
    return identifier.hex()
