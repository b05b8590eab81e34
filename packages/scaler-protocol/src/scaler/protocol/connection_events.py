"""What happens to the connection of a socket that connects (DEALER, SUB), from its ZeroMQ socket monitor.

ZeroMQ reconnects by itself and says nothing to the socket's user; its socket monitor does. `ConnectionWatch`
turns the monitor's events into three that a core can act on:

- ``UP``: connected, and the ZeroMQ handshake is done (messages flow);
- ``DOWN``: an established connection closed (the peer died, closed its socket, or the network dropped it);
- ``REFUSED``: a connection closed before its handshake completed: what listens at the address is not a
  socket this one can talk to (e.g. a client's DEALER at a scheduler's monitor port, an XPUB), or the
  handshake failed. When the handshake failed over keys (CurveZMQ: the peer refused this key, or one side has
  keys and the other none), `ConnectionWatch.refusal` says why (`security.handshake_failure`); a core treats
  that as the peer refusing this process, not as a wrong address.

A process without keys cannot always tell a wrong address from a server with keys. A server with keys
drops it, and on a busy host may close before its own greeting, which names its mechanism, is out: the
connection then just closes during the handshake, which ZeroMQ reports without detail and tries again by
itself 100 ms later (as it does not after a mismatch this side found). A server with keys names its mechanism
on one of the next tries; a socket of another kind never does. So a handshake that closed without detail is
``REFUSED`` only after `UNEXPLAINED_CLOSES` in a row; even so, a busy server with keys may close so quickly that
this side finds nothing to say, and `closed_in_handshake` words the error for both.

The shells (client agent, worker agent, monitors) read the monitor socket beside the socket it watches and
hand each change to their core; the cores decide what it means. The peer that answers a Hello says what it
is (`HelloAck.role`, protocol 1.5): `role_name` words it for the error of a peer that is not the one wanted.
"""

from __future__ import annotations

from typing import Any, List, Optional

import zmq
from zmq.utils.monitor import parse_monitor_message

from scaler.protocol.messages import PeerRole
from scaler.protocol.security import NO_KEYS, Keys, handshake_failure

UP = "up"
DOWN = "down"
REFUSED = "refused"


def closed_in_handshake(address: str, wanted: str) -> str:
    """The error of a connection to ``address`` that closed during its handshake without saying why (`REFUSED`
    with no `ConnectionWatch.refusal`): not ``wanted`` (e.g. "a scheduler"), or a server with keys (see above)."""
    return (
        f"{address} is not {wanted}, or it requires CurveZMQ keys: it closed the connection during the ZeroMQ "
        "handshake, as a socket of another kind does (a scheduler's monitor address, its port + 2, for one), and "
        "as a server with keys may do to a process without them (docs/security.md)"
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


UNEXPLAINED_CLOSES = 5

_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | _HANDSHAKE_FAILED


class ConnectionWatch:
    """The monitor of ``socket`` (call before it connects); `change` reads one monitor message. ZeroMQ allows
    one monitor per socket: this is the only one, for connections and their handshakes alike. ``keys`` and
    ``peer`` (e.g. "the scheduler at tcp://...") word the reason of a handshake refused over keys."""

    def __init__(self, socket: Any, keys: Keys = NO_KEYS, peer: str = "the peer") -> None:
        self._socket = socket
        self._keys = keys
        self._peer = peer
        self.monitor: Any = socket.get_monitor_socket(_EVENTS)  # a PAIR socket of the same context
        self._phase = "idle"  # idle (no connection), handshaking, up
        self._unexplained = 0  # handshakes in a row that ended without saying why
        self.refusal: Optional[str] = None  # why the last REFUSED handshake failed over keys; None: not over keys

    def change(self, frames: List[Any]) -> Optional[str]:
        """The change one monitor message means (UP, DOWN, REFUSED), or None."""
        event = parse_monitor_message(frames)["event"]
        phase = self._phase
        if event == zmq.EVENT_CONNECTED:
            self._phase = "handshaking"
            return None
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._phase = "up"
            self._unexplained = 0
            return UP
        self._phase = "idle"  # closed, or about to be (a failed handshake)
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self._keys.own is None:  # unexplained: see above
            self._unexplained += 1
            if self._unexplained < UNEXPLAINED_CLOSES:
                return None
        elif event & _HANDSHAKE_FAILED:
            self.refusal = handshake_failure(frames, self._keys, self._peer)
            self._unexplained = 0
            return REFUSED
        elif phase != "handshaking":
            return DOWN if phase == "up" and event == zmq.EVENT_DISCONNECTED else None
        # closed by this side over the peer's answer (ZeroMQ does not try again then), or unexplained too often
        self._unexplained = 0
        self.refusal = None
        return REFUSED

    def close(self) -> None:
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:  # the watched socket is closed already
            pass
        self.monitor.close(linger=0)
