"""What the scheduler's shell tells its core (events) and what the core asks the shell to do (effects).

`SchedulerCore.handle(event, now)` takes one event and returns a list of effects, which the shell in
`server.py` carries out in order. Peers are named by their ZeroMQ identity; `STORAGE` names the object
storage server in `Send.to`. `FromStorage` and `Tick` are every core's (`scaler.protocol.core_events`), named here
too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping

from scaler.protocol.core_events import FromStorage, Tick  # noqa: F401 - named here too
from scaler.protocol.ids import show
from scaler.protocol.security import OPEN, Credential

STORAGE = b""

# ----------------------------------------------------------------------------- events


@dataclass(slots=True)
class Start:
    """The shell opened its sockets: the core begins its conversation with the object storage server."""


@dataclass(slots=True)
class FromPeer:
    """One decoded message from a client or worker (tasks and results as `routed.ReceivedItems`), and
    who sent it: the credential of the key ZeroMQ authenticated (`OPEN` without security)."""

    source: bytes
    message: Any
    credential: Credential = OPEN


@dataclass(slots=True)
class Burst:
    """Messages read together (a `FromPeer`, or the `PeerConnection` of a Hello, each, in the order read), handled
    one after the other as one event: what they make goes out together (one batch of results per client, of
    tasks per worker), and queued tasks are dispatched once, after all of them. ``more``: the shell stopped
    reading at its limit, more messages wait (the scheduler is behind)."""

    events: List[Any]
    more: bool = False


@dataclass(slots=True)
class PeerConnection:
    """Peer ``source`` said Hello on ``connection`` (the ID the shell gave its connection; the Hello follows)."""

    source: bytes
    connection: int


@dataclass(slots=True)
class ConnectionClosed:
    """A connection of a client or worker closed (its peer died, left, or the network dropped it), by its ID."""

    connection: int


@dataclass(slots=True)
class AuthorizedKeysRead:
    """The authorized keys were read again and changed: every authorized key's credential now (an unknown key
    has none: it holds no role)."""

    credentials: Mapping[str, Credential]


@dataclass(slots=True)
class StorageConnected:
    """The connection to the object storage server is up (again)."""


@dataclass(slots=True)
class StorageLost:
    """The connection to the object storage server went down (ZeroMQ reconnects by itself)."""


@dataclass(slots=True)
class StorageRefused:
    """The object storage server refused the scheduler's key during the CurveZMQ handshake (``reason``: why)."""

    reason: str


@dataclass(slots=True)
class CannotForward:
    """Items of a `TaskBatch` or `TaskResultBatch` for ``to`` that cannot be encoded (the rest was sent).

    Only a crafted message gets there: its struct cannot be copied on. ``reasons[i]`` says why for
    ``items[i]``."""

    to: bytes
    message_type: type
    items: List[Any]
    reasons: List[str]


@dataclass(slots=True)
class MonitorSubscription:
    """A monitor subscribed (``+1``) or left (``-1``) the snapshot socket."""

    change: int


@dataclass(slots=True)
class Continue:
    """The shell read its sockets since the core asked for it (`MoreToDo`): the core takes what waits, in turn."""


# ----------------------------------------------------------------------------- effects


@dataclass(slots=True)
class Send:
    to: bytes  # a peer's identity, or STORAGE
    message: Any


@dataclass(slots=True)
class StartStorage:
    """Start an object storage server at ``address`` (no server answered there)."""

    address: str


@dataclass(slots=True)
class StartServing:
    """The object storage server answered: read clients and workers, and the monitor socket."""


@dataclass(slots=True)
class StartFailed:
    """The scheduler cannot run: stop, and say why."""

    reason: str


@dataclass(slots=True)
class Publish:
    """A snapshot of the scheduler; the shell adds the process's CPU, memory and message counts, keeps it for
    ``--metrics-port`` if that serves, and sends it on the monitor socket if ``to_monitors``."""

    snapshot: Any
    to_monitors: bool


@dataclass(slots=True)
class MoreToDo:
    """Messages wait in the core (a large message is taken a slice at a time): read every socket once more, then
    hand the core `Continue`."""


@dataclass(slots=True)
class Shutdown:
    """Stop, once the messages already sent have left."""

    reason: str


def describe(event: Any) -> str:
    """An event, in a log line."""
    if type(event) is FromPeer:
        return f"{type(event.message).__name__} from {show(event.source)}"
    return type(event).__name__
