"""What happens to the connection of a socket that connects (DEALER, SUB), from its ZeroMQ socket monitor.

ZeroMQ reconnects by itself and says nothing to the socket's user; its socket monitor does. `ConnectionWatch`
turns the monitor's events into three that a core can act on:

- ``UP``: connected, and the ZeroMQ handshake is done (messages flow);
- ``DOWN``: an established connection closed (the peer died, closed its socket, or the network dropped it);
- ``REFUSED``: a connection closed before its handshake completed: what listens at the address is not a
  socket this one can talk to (e.g. a client's DEALER at a scheduler's monitor port, an XPUB), or the
  handshake failed.

The shells (client agent, worker agent, monitors) read the monitor socket beside the socket it watches and
hand each change to their core; the cores decide what it means. The peer that answers a Hello says what it
is (`HelloAck.role`, protocol 1.3): `role_name` words it for the error of a peer that is not the one wanted.
"""

from __future__ import annotations

from typing import Any, List, Optional

import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.protocol.messages import PeerRole

UP = "up"
DOWN = "down"
REFUSED = "refused"

# why a connection that closed during its handshake was not to the peer wanted
NOT_THE_PEER = (
    "it closed the connection during the ZeroMQ handshake (a scheduler's monitor address, its port + 2, does)"
)

_ROLE_NAMES = {
    PeerRole.SCHEDULER: "a scheduler",
    PeerRole.OBJECT_STORAGE: "an object storage server",
    PeerRole.WORKER: "a worker",
    PeerRole.MONITOR: "a monitor",
    PeerRole.WORKER_MANAGER: "a worker manager",
}


def role_name(role: PeerRole) -> str:
    """``an object storage server``: what a peer of ``role`` is, for an error message."""
    return _ROLE_NAMES.get(role, f"a peer of role {role.name}")


_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | _HANDSHAKE_FAILED


class ConnectionWatch:
    """The monitor of ``socket`` (call before it connects); `change` reads one monitor message."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self.monitor: Any = socket.get_monitor_socket(_EVENTS)  # a PAIR socket of the same context
        self._phase = "idle"  # idle (no connection), handshaking, up

    def change(self, frames: List[Any]) -> Optional[str]:
        """The change one monitor message means (UP, DOWN, REFUSED), or None."""
        event = parse_monitor_message(frames)["event"]
        phase = self._phase
        if event == zmq.EVENT_CONNECTED:
            self._phase = "handshaking"
            return None
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._phase = "up"
            return UP
        self._phase = "idle"  # closed, or about to be (a failed handshake)
        if phase == "handshaking":
            return REFUSED
        if phase == "up" and event == zmq.EVENT_DISCONNECTED:
            return DOWN
        return None

    def close(self) -> None:
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:  # the watched socket is closed already
            pass
        self.monitor.close(linger=0)
