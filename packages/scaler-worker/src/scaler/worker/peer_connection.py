"""How the worker agent reaches its peers: the scheduler, and the object storage server the scheduler names.

`PeerConnection` is all the agent needs of a connection: send the frames of a message without waiting on
the peer, receive the frames of the next message, say when the connection comes up or goes down (and why
the peer refused it in the transport's handshake: a key it does not know, keys it requires), close.
`Connect` makes one for an address. The command line uses `ZmqConnect`: a DEALER socket per peer
(`security.new_socket`: CurveZMQ with the worker's keys), whose ZeroMQ identity is the worker ID, with a
socket monitor that tells its connection's changes (`scaler.protocol.connection_events`). A program that
embeds a worker (`WorkerAgent(config, connect=...)`) may pass its own, e.g. one on its own ZeroMQ context.
ZeroMQ's errors are translated here into
`DisconnectedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Deque, List, Optional, Protocol

import zmq

from scaler.protocol import codec
from scaler.protocol.connection_events import ConnectionWatch
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.security import NO_KEYS, Keys, new_socket
from scaler.protocol.socket_reader import SocketReader

logger = logging.getLogger(__name__)


class PeerConnection(Protocol):
    def send(self, frames: List[Any]) -> None:
        """Queue a message; never waits on the peer (a failure is logged)."""

    async def receive(self) -> List[Any]:
        """The frames of the next message, bytes-like; raise `DisconnectedError` once it is closed."""

    refusal: Optional[str]  # after a REFUSED change: why, when the peer refused this connection over keys

    async def change(self) -> str:
        """The next change of the connection: `connection_events.UP`, ``DOWN`` or ``REFUSED`` (a connection
        that cannot tell never returns); raise `DisconnectedError` once it is closed."""

    def close(self, linger_seconds: float) -> None:
        """Close it, giving what is queued up to ``linger_seconds`` to go."""


class Connect(Protocol):
    def __call__(self, address: str, identity: bytes, zero_copy: bool) -> PeerConnection:
        """A connection to ``address`` as ``identity``; ``zero_copy``: large received frames are handed out
        where they arrived, not copied (the storage server's payloads). Raise `DisconnectedError` when it
        cannot be made."""


class ZmqConnect:
    """Connections as DEALER sockets of one ZeroMQ context (its own unless one is given), secured by ``keys``."""

    def __init__(self, context: Optional[zmq.Context] = None, keys: Keys = NO_KEYS) -> None:
        self._owned = context is None
        self._context = context if context is not None else zmq.Context()
        self._sockets: Any = zmq.Context.shadow(self._context.underlying)  # plain sockets, read as `_Reader` says
        self._keys = keys

    def __call__(self, address: str, identity: bytes, zero_copy: bool) -> PeerConnection:
        try:
            sock = new_socket(self._sockets, zmq.DEALER, self._keys)
            sock.setsockopt(zmq.IDENTITY, identity)
            sock.setsockopt(zmq.SNDHWM, 0)  # sends never wait on a peer: our own rates bound the queue
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            watch = ConnectionWatch(sock, self._keys, f"the peer at {address}")
            sock.connect(address)
        except zmq.ZMQError as error:
            raise DisconnectedError(f"cannot connect to {address!r}: {error}") from None
        return ZmqConnection(sock, watch, address, copy=not zero_copy)

    def close(self) -> None:
        """End the context, if it is ours (after every connection is closed)."""
        if self._owned:
            self._context.term()


class ZmqConnection:
    def __init__(self, sock: Any, watch: ConnectionWatch, address: str, copy: bool) -> None:
        self._socket = sock
        self._watch = watch
        self._address = address
        self._messages = _Reader(sock, copy, address)
        self._changes = _Reader(watch.monitor, True, address)
        self.refusal: Optional[str] = None

    def send(self, frames: List[Any]) -> None:
        # a DEALER that connected keeps its queue to the peer while the connection is down, with no limit (SNDHWM
        # 0): a send without waiting always takes the message
        try:
            self._socket.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as error:
            logger.warning(f"could not send to {self._address}: {error}")
            return
        self._messages.after_send()

    async def receive(self) -> List[Any]:
        frames = await self._messages.next()
        if self._messages.copy:
            return frames
        return [frames[0], *codec.received_blobs(frames[1:])]  # large payloads stay in the frame they came in

    async def change(self) -> str:
        while True:
            frames = await self._changes.next()
            change = self._watch.change(frames)
            if change is not None:
                self.refusal = self._watch.refusal
                return change

    def close(self, linger_seconds: float) -> None:
        self._messages.close()
        self._changes.close()
        self._watch.close()
        self._socket.close(linger=int(linger_seconds * 1000))


class _Reader:
    """The messages of a plain ZeroMQ socket, read in the event loop when its file descriptor says so, a burst
    at a time (`scaler.protocol.socket_reader`, as every shell reads), and handed out one by one to the
    coroutine that awaits them (`PeerConnection.receive`: a program that embeds a worker may give its own
    connections, which hand out frames): a message that arrives alone costs one Future."""

    def __init__(self, sock: Any, copy: bool, address: str) -> None:
        self._socket = sock
        self.copy = copy
        self._burst = SocketReader(sock, copy=copy)  # the frames of each message, as they are
        self._address = address
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._frames: Deque[List[Any]] = deque()
        self._waiter: Optional[asyncio.Future] = None
        self._closed: Optional[str] = None  # why it can no longer be read

    async def next(self) -> List[Any]:
        """The frames of the next message; raise `DisconnectedError` once it is closed."""
        frames = self._frames
        while not frames:
            if self._closed is not None:
                raise DisconnectedError(f"connection to {self._address} closed: {self._closed}")
            loop = self._loop
            if loop is None:  # the first read: from now on the loop reads it
                loop = self._loop = asyncio.get_running_loop()
                loop.add_reader(self._socket.getsockopt(zmq.FD), self._read)
                self._read()  # what came before: its file descriptor signalled before anyone watched
                continue
            self._waiter = loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return frames.popleft()

    def after_send(self) -> None:
        """Sending may take the file descriptor's signal of a message that arrived meanwhile: read it then."""
        if self._loop is not None and self._socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            self._loop.call_soon(self._read)

    def close(self) -> None:
        if self._closed is None:
            self._closed = "closed here"
        self._unwatch()
        self._wake()

    def _unwatch(self) -> None:
        loop, self._loop = self._loop, None  # (next() raises once it is closed: it never watches again)
        if loop is not None:
            try:
                loop.remove_reader(self._socket.getsockopt(zmq.FD))
            except (zmq.ZMQError, OSError, ValueError, RuntimeError):  # the loop or the socket is closed already
                pass

    def _read(self) -> None:
        if self._closed is not None:
            return
        frames = self._frames
        try:
            if self._burst.read(frames):  # more may wait: after the other callbacks of this turn
                assert self._loop is not None
                self._loop.call_soon(self._read)
        except zmq.ZMQError as error:  # its context ended
            self._closed = str(error)
            self._unwatch()
        if frames or self._closed is not None:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
