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
``REFUSED`` only after `UNEXPLAINED_CLOSES` in a row, with keys too (a peer killed during the handshake, as a
restarting scheduler may be, closes it without detail once, then refuses connections: no refusal over keys);
even so, a busy server with keys may close so quickly that
this side finds nothing to say, and `closed_in_handshake` words the error for both.

The shells (client agent, worker agent, monitors) read the monitor socket beside the socket it watches and
hand each change to their core; the cores decide what it means. The peer that answers a Hello says what it
is (`HelloAck.role`, protocol 1.5): `role_name` words it for the error of a peer that is not the one wanted.

A daemon's listening socket (a ROUTER) has many connections: `AcceptedConnections` gives each an ID of its own
from its monitor's reports, so that its shell can tell its core which connection a Hello came on and which
connections closed (the core decides who is gone). Every monitor is made by `monitor_socket`, whose queue never
fills: see there why that matters.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, List, Optional

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


def monitor_socket(socket: Any, events: int) -> Any:
    """A ZeroMQ socket monitor of ``socket``: a plain PAIR socket of the same context that receives the
    ``events`` of ``socket`` (``zmq.utils.monitor.parse_monitor_message`` reads each), and whose queue never fills.

    libzmq's I/O thread sends each event to the monitor and waits while the monitor's queue is full (1,000
    events by default): a monitor read too slowly (a busy moment while thousands of peers connect and leave, a
    reader that stopped) stops the I/O thread, and with it every socket of the context; a socket's close then
    waits for it forever. With the receiving side's ``ZMQ_RCVHWM`` at 0, ZeroMQ makes the in-process pipe
    unlimited (an inproc pipe's limit is the sum of both sides', or none when one side has none), so the I/O
    thread never waits: what the events not read yet take is memory, a few dozen bytes each."""
    address = f"inproc://monitor.s-{socket.FD}"  # unique while ``socket`` is open (pyzmq's own naming)
    socket.monitor(address, events)
    monitor: Any = zmq.Context.shadow(socket.context.underlying).socket(zmq.PAIR)  # plain, also for an asyncio socket
    monitor.setsockopt(zmq.RCVHWM, 0)
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.connect(address)
    return monitor


def stop_monitor(socket: Any, monitor: Any) -> None:
    """Stop the monitor of ``socket`` made by `monitor_socket`, and close it."""
    try:
        socket.disable_monitor()
    except zmq.ZMQError:  # the watched socket is closed already
        pass
    monitor.close(linger=0)


class AcceptedConnections:
    """The connections a daemon's listening socket (a ROUTER) accepted, each with an ID of its own, from its
    monitor (`monitor`, read by the shell: `note` each message).

    A message comes with the file descriptor of its connection (the frame's ``zmq.SRCFD``); a descriptor is
    reused as soon as its connection closes, and the monitor's report of that close may be read after the next
    connection's Hello, so a descriptor does not name a connection: an accepted connection gets the next ID,
    and a closed one's ID waits in `closed` for the shell to tell its core. The monitor reports a connection
    accepted before its first message can arrive (the context's I/O thread reports it, then reads from it: a
    context of one I/O thread, the default), and closed before its descriptor is reused (it reports, then
    closes the descriptor)."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self.monitor: Any = monitor_socket(socket, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._ids: Dict[int, int] = {}  # file descriptor -> the ID of the connection open on it
        self._next_id = itertools.count(1)
        self.closed: List[int] = []  # IDs of connections closed, not told to the core yet

    def note(self, frames: List[Any]) -> None:
        """One message of the monitor: an accepted connection gets the next ID, a closed one's ID goes to
        `closed`."""
        event = parse_monitor_message(frames)
        descriptor = event["value"]
        if event["event"] == zmq.EVENT_ACCEPTED:
            self._ids[descriptor] = next(self._next_id)
            return
        connection = self._ids.pop(descriptor, None)
        if connection is not None:
            self.closed.append(connection)

    def connection_of(self, descriptor: int) -> int:
        """The ID of the connection a Hello came on (its frame's ``zmq.SRCFD``): what the monitor reported is
        read first, since it reported that connection accepted before the Hello could arrive."""
        monitor = self.monitor
        while True:
            try:
                self.note(monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
        connection = self._ids.get(descriptor)
        if connection is None:  # never reported (the monitor reports every accepted connection): an ID of its own
            connection = self._ids[descriptor] = next(self._next_id)
        return connection

    def take_closed(self) -> List[int]:
        closed, self.closed = self.closed, []
        return closed

    def close(self) -> None:
        stop_monitor(self._socket, self.monitor)


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
        self.monitor: Any = monitor_socket(socket, _EVENTS)
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
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:  # unexplained: see above (with keys, a peer that
            self._unexplained += 1  # died during the handshake says no more than one that refused the greeting)
            if self._unexplained < UNEXPLAINED_CLOSES:
                return None
            self.refusal = handshake_failure(frames, self._keys, self._peer)  # None without keys
            self._unexplained = 0
            return REFUSED
        if event & _HANDSHAKE_FAILED:
            self.refusal = handshake_failure(frames, self._keys, self._peer)
            self._unexplained = 0
            return REFUSED
        if phase != "handshaking":
            return DOWN if phase == "up" and event == zmq.EVENT_DISCONNECTED else None
        # closed by this side over the peer's answer (ZeroMQ does not try again then), or unexplained too often
        self._unexplained = 0
        self.refusal = None
        return REFUSED

    def close(self) -> None:
        stop_monitor(self._socket, self.monitor)
