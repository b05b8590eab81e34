"""Typed identifiers.

Client and worker IDs are readable (``C|host|pid|hex``) because they appear in
logs and in the monitor; they are also the ZeroMQ identities of those peers.
A client made while a task runs (inside `clients_made_in`) says so at the end
of its ID (``C|host|pid|hex|in:TASK``), so that whatever runs that task knows
the tasks the client submits are nested in it (`made_in`).
Task and object IDs are 16 random bytes (128 bits): nobody can guess another
peer's next ID (to read its objects through a task, or to take the ID first).
The randomness comes from the operating system in blocks of `IDS_PER_DRAW` IDs,
so an ID costs no system call of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
from typing import Callable, Iterator, NewType

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


ID_BYTES = 16
IDS_PER_DRAW = 4096  # IDs drawn from the operating system's random generator at once (64 KiB)


class IDGenerator:
    """Generates task or object IDs: `ID_BYTES` random bytes each, unique across processes and unguessable.
    Safe to share between threads (each ID is taken by one C-level step of a list iterator)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = _drawn_ids()

    def next_id(self) -> bytes:
        try:
            return self._next()
        except StopIteration:
            self._next = _drawn_ids()
            return self._next()


def _drawn_ids() -> Callable[[], bytes]:
    """The next `IDS_PER_DRAW` IDs, one per call, from one draw of the operating system's randomness."""
    block = os.urandom(ID_BYTES * IDS_PER_DRAW)
    return iter([block[start : start + ID_BYTES] for start in range(0, len(block), ID_BYTES)]).__next__


def show_group(group_id: bytes) -> str:
    """Printable form of a worker group's ID (worker managers make them of text)."""
    return group_id.decode(errors="replace")


def show(identifier: bytes) -> str:
    """Printable form of any ID, for logs and error messages."""
    if identifier[:2] in (b"C|", b"W|", b"S|", b"M|"):
        return identifier.decode(errors="replace")
    return identifier.hex()
