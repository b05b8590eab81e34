"""Which peer is gone when a connection to a daemon (the scheduler, the object storage server) closes: a peer's
session is its connection. Sans-I/O: the daemons' cores keep one each.

The shell tells the core the connection of each Hello and each connection that closes, by an ID of its own for
each accepted connection (a file descriptor is reused once closed, so it does not name a connection:
`connection_events.AcceptedConnections`). A peer is gone when the connection of its last Hello closes; a peer
that said Hello again on a new connection is not dropped by the old one's close.
"""

from __future__ import annotations

from typing import Dict, Optional


class PeerConnections:
    def __init__(self) -> None:
        self._owners: Dict[int, bytes] = {}  # connection -> the peer that said Hello on it
        self._connection_of: Dict[bytes, int] = {}  # peer -> the connection of its last Hello

    def on_hello(self, source: bytes, connection: int) -> None:
        """``source`` said Hello on ``connection``."""
        self._owners[connection] = source
        self._connection_of[source] = connection

    def on_closed(self, connection: int) -> Optional[bytes]:
        """``connection`` closed; the peer that is gone with it, if any."""
        owner = self._owners.pop(connection, None)
        if owner is None or self._connection_of.get(owner) != connection:  # none, or it said Hello again since
            return None
        del self._connection_of[owner]
        return owner

    def forget(self, peer_id: bytes) -> None:
        """The peer left otherwise: the close of its connection no longer concerns it."""
        self._connection_of.pop(peer_id, None)
