"""What the object storage server's shell tells its core (events) and what the core asks it to send (effects).

`ObjectStore.handle(event, now)` takes one event and returns the replies, which the shell in `server.py`
sends in order. Connections are named by the IDs the shell gives them (`connection_events.AcceptedConnections`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from scaler.protocol.security import OPEN, Credential


@dataclass(slots=True)
class FromPeer:
    """One decoded message from a peer (a client, a worker, the scheduler), with its payload frames and who
    sent it (`OPEN` without security)."""

    peer_id: bytes
    message: Any
    blobs: Sequence[Any] = ()
    credential: Credential = OPEN


@dataclass(slots=True)
class PeerConnection:
    """Peer ``peer_id`` said Hello on ``connection`` (the Hello follows, as a `FromPeer`)."""

    peer_id: bytes
    connection: int


@dataclass(slots=True)
class ConnectionClosed:
    """A connection closed (its peer left or died, or the network dropped it)."""

    connection: int


@dataclass(slots=True)
class Reply:
    """One message for the shell to send: to ``peer_id``, ``message`` followed by ``blobs``."""

    peer_id: bytes
    message: Any
    blobs: Sequence[Any] = field(default_factory=tuple)
