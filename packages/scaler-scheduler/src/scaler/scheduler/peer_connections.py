"""Which peer is gone when a connection to the scheduler closes: a peer's session is its connection.

The shell tells the core the connection (file descriptor) of each Hello (`PeerConnection`) and each
connection that closes (`ConnectionClosed`). A peer is gone when the connection of its last Hello closes; a
peer that said Hello again on a new connection is not dropped by the old one's close. A file descriptor is
reused once closed: a Hello from another peer on a known one means the old owner's connection closed, and the
close event still on its way is not the new connection's.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Optional


class PeerConnections:
    def __init__(self) -> None:
        self._owners: Dict[int, bytes] = {}  # connection -> the last peer that said Hello on it
        self._connection_of: Dict[bytes, int] = {}  # peer -> the connection of its last Hello
        self._closes_to_skip: Counter = Counter()  # connection -> close events of its previous owners

    def on_hello(self, source: bytes, connection: int) -> Optional[bytes]:
        """``source`` said Hello on ``connection``; the peer that is gone since (the fd's previous owner)."""
        owner = self._owners.get(connection)
        gone = None
        if owner is not None and owner != source:  # the fd was reused: the owner's connection closed
            self._closes_to_skip[connection] += 1
            gone = self._gone(owner, connection)
        self._owners[connection] = source
        self._connection_of[source] = connection
        return gone

    def on_closed(self, connection: int) -> Optional[bytes]:
        """``connection`` closed; the peer that is gone with it, if any."""
        if self._closes_to_skip[connection] > 0:  # the close of a previous owner of this fd, seen already
            self._closes_to_skip[connection] -= 1
            return None
        del self._closes_to_skip[connection]
        owner = self._owners.pop(connection, None)
        return None if owner is None else self._gone(owner, connection)

    def forget(self, peer_id: bytes) -> None:
        """The peer left otherwise: the close of its connection no longer concerns it."""
        self._connection_of.pop(peer_id, None)

    def _gone(self, peer_id: bytes, connection: int) -> Optional[bytes]:
        if self._connection_of.get(peer_id) != connection:  # it said Hello again on another connection since
            return None
        del self._connection_of[peer_id]
        return peer_id
