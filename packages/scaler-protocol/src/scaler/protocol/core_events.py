"""The events that every core is told alike by its shell, declared once.

A core (the scheduler's, the storage server's, the worker's, the worker manager's, the client's) is handed
what its shell read and the time: a decoded message of the scheduler or of the object storage server, a
change of a connection as its ZeroMQ socket monitor says it, a handshake refused over keys, and a `Tick` once
the time the core asked for came (the one wake-up rule: each core says when it next wants a `Tick` as its
``next_wakeup``, monotonic seconds on the clock of ``now``, ``math.inf`` for never; its shell reads it after
each event it handed the core and delivers a `Tick` no later). Each core dispatches on these types; its own
events module re-exports the ones it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(slots=True)
class FromScheduler:
    """One decoded message of the scheduler (`scaler.protocol.messages`)."""

    message: Any


def from_scheduler(message: Any, blobs: Sequence[Any]) -> FromScheduler:
    """The event of a decoded message of the scheduler (its frames carry no payload): for `socket_reader.decoder`."""
    return FromScheduler(message)


@dataclass(slots=True)
class FromStorage:
    """One decoded message of the object storage server; ``blobs``: the payload frames after it."""

    message: Any
    blobs: Sequence[Any] = ()


@dataclass(slots=True)
class ConnectionChanged:
    """The connection to the scheduler (``to_storage`` False) or to the storage server changed, as its socket
    monitor says: ``change`` is `connection_events.UP`, ``DOWN`` or ``REFUSED``."""

    to_storage: bool
    change: str


@dataclass(slots=True)
class HandshakeFailed:
    """The scheduler (or the object storage server) refused this peer's connection in the CurveZMQ handshake:
    no key, an unknown key, or the wrong server key (``reason`` says which)."""

    reason: str
    from_storage: bool


@dataclass(slots=True)
class Tick:
    """The time the core asked for (its ``next_wakeup``) came or passed, or its shell's turn ended. ``caught_up``:
    the shell had read everything that waited on its sockets (the scheduler judges its peers' silence only
    then)."""

    caught_up: bool = True


TICK = Tick()  # a Tick that says nothing more: shells that send many hand the core this one
