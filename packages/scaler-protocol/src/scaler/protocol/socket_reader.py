"""How every shell reads a ZeroMQ socket: in bursts, each message turned into an event, a bad one dropped.

`SocketReader.read` takes what waits on one socket, up to a burst (`BURST` messages: then the other sockets,
timers and callbacks of the shell take their turn), turns each message into an event (``to_event``: None
for no event, a list for several; without one, the frames are the event) and says whether more may wait.
The error rule is here, once: a message that ``to_event`` cannot turn into an event is dropped and logged
(with its sender, on a ROUTER), and the reader goes on; `decoder` makes the usual ``to_event``, which logs
a message that does not decode (`ProtocolError`) as malformed, naming the peer, and drops it. After each
message, ``ZMQ_EVENTS`` says whether another waits (about 1 µs): cheaper than a read that fails (pyzmq
raises `zmq.Again`, several µs), which happens only when woken with nothing to read.

Two kinds of shell drive it, and stay two: the daemons and the worker's and the worker manager's agents run
an asyncio loop, and read each socket when its file descriptor says so (`LoopReader`: ``add_reader``, a burst
per callback, another callback soon while more waits; not zmq.asyncio, whose Future and loop turn per message
cost about 30 µs each); the client's agent is a thread of the user's process, which has no loop of its own to
lend, and waits on a `zmq.Poller` with the wake-up socket of the user's threads, then reads each socket
that is ready with the same `read`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, List, MutableSequence, Optional

import zmq

from scaler.protocol import codec
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import show

logger = logging.getLogger(__name__)

BURST = 256  # messages read per wake-up before the shell's other sockets, timers and callbacks run


class SocketReader:
    """One socket, read a burst at a time into events (see the module)."""

    __slots__ = ("socket", "to_event", "copy", "burst", "name", "routed")

    def __init__(
        self,
        socket: Any,
        to_event: Optional[Callable[[List[Any]], Any]] = None,
        *,
        copy: bool = True,
        burst: Optional[int] = None,
        name: str = "",
        routed: bool = False,
    ) -> None:
        self.socket = socket
        self.to_event = to_event
        self.copy = copy  # False: frames (large ones stay where ZeroMQ received them; frames carry properties)
        self.burst = BURST if burst is None else burst
        self.name = name  # who reads, for the log
        self.routed = routed  # a ROUTER's: the first frame names the sender

    def read(self, events: MutableSequence[Any]) -> bool:
        """Append the events of what waits, up to a burst; whether more may wait. A `zmq.ZMQError` other than
        nothing to read (the socket or its context closed) is raised."""
        sock, to_event, copy = self.socket, self.to_event, self.copy
        for _ in range(self.burst):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=copy)
            except zmq.Again:  # woken with nothing to read
                return False
            if to_event is None:
                events.append(frames)
            else:
                try:
                    event = to_event(frames)
                except Exception:  # noqa: BLE001 - one message that cannot be read must not stop the reader
                    logger.exception(f"{self.name}: dropped a message{self._sender(frames)} it failed to read "
                                     f"({getattr(to_event, '__name__', 'to_event')})")  # fmt: skip
                    event = None
                if event is not None:
                    if type(event) is list:
                        events.extend(event)
                    else:
                        events.append(event)
            if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return False
        return True

    def readable(self) -> bool:
        """Whether a message waits (reading ``ZMQ_EVENTS`` also resets the file descriptor's edge: what a send
        consumed of it is seen again)."""
        return bool(self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)

    def _sender(self, frames: List[Any]) -> str:
        if not self.routed or not frames:
            return ""
        first = frames[0]
        return f" from {show(first if isinstance(first, bytes) else getattr(first, 'bytes', b''))}"


def decoder(make_event: Callable[[Any, List[Any]], Any], name: str, peer: str) -> Callable[[List[Any]], Any]:
    """A ``to_event`` that decodes a message (`codec.decode`) and makes its event, ``make_event(message,
    blobs)``; a malformed one is logged as such, naming ``peer``, and dropped."""

    def decoded(frames: List[Any]) -> Any:
        try:
            message, blobs = codec.decode(frames)
        except ProtocolError as error:
            logger.warning(f"{name}: dropped malformed message from {peer}: {error}")
            return None
        return make_event(message, blobs)

    decoded.__name__ = f"decode from {peer}"
    return decoded


class LoopReader:
    """A `SocketReader` read by an asyncio loop when its socket's file descriptor says so: each burst's events
    go to ``deliver(events, more)`` (``more``: the burst was full), and while more waits the loop reads again
    after its other callbacks."""

    __slots__ = ("reader", "deliver", "_loop", "_descriptor")

    def __init__(self, reader: SocketReader, deliver: Callable[[List[Any], bool], None]) -> None:
        self.reader = reader
        self.deliver = deliver
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._descriptor: Optional[int] = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read from now on; what came before anyone watched the descriptor is read soon."""
        self._loop = loop
        self._descriptor = self.reader.socket.getsockopt(zmq.FD)
        loop.add_reader(self._descriptor, self.drain)
        loop.call_soon(self.drain)

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and self._descriptor is not None:
            try:
                loop.remove_reader(self._descriptor)
            except (OSError, ValueError, RuntimeError):  # the loop is closed already
                pass

    def drain(self) -> None:
        """A burst, delivered; another soon while more waits (sending can consume the descriptor's edge of
        what came meanwhile: `readable` after delivering finds it)."""
        reader = self.reader
        if reader.socket.closed:
            return
        events: List[Any] = []
        more = reader.read(events)
        if events:
            self.deliver(events, more)
            more = more or (not reader.socket.closed and reader.readable())
        if more:
            asyncio.get_running_loop().call_soon(self.drain)
