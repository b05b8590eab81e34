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
from typing import Any, List, Optional, Protocol

import zmq
import zmq.asyncio

from scaler.protocol import codec
from scaler.protocol.connection_events import ConnectionWatch
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.security import NO_KEYS, Keys, new_socket

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

    def __init__(self, context: Optional[zmq.asyncio.Context] = None, keys: Keys = NO_KEYS) -> None:
        self._owned = context is None
        self._context = context if context is not None else zmq.asyncio.Context()
        self._keys = keys

    def __call__(self, address: str, identity: bytes, zero_copy: bool) -> PeerConnection:
        try:
            sock = new_socket(self._context, zmq.DEALER, self._keys)
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
    def __init__(self, sock: zmq.asyncio.Socket, watch: ConnectionWatch, address: str, copy: bool) -> None:
        self._socket = sock
        self._watch = watch
        self._address = address
        self._copy = copy
        self.refusal: Optional[str] = None

    def send(self, frames: List[Any]) -> None:
        sent: Any = self._socket.send_multipart(frames, copy=False)  # an asyncio Future with zmq.asyncio
        sent.add_done_callback(self._check_sent)

    def _check_sent(self, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            logger.warning(f"could not send to {self._address}: {error}")

    async def receive(self) -> List[Any]:
        try:
            frames = await self._socket.recv_multipart(copy=self._copy)
        except zmq.ZMQError as error:
            raise DisconnectedError(f"connection to {self._address} closed: {error}") from None
        if self._copy:
            return frames
        return [frames[0], *codec.received_blobs(frames[1:])]  # large payloads stay in the frame they came in

    async def change(self) -> str:
        while True:
            try:
                frames = await self._watch.monitor.recv_multipart()
            except zmq.ZMQError as error:
                raise DisconnectedError(f"connection to {self._address} closed: {error}") from None
            change = self._watch.change(frames)
            if change is not None:
                self.refusal = self._watch.refusal
                return change

    def close(self, linger_seconds: float) -> None:
        self._watch.close()
        self._socket.close(linger=int(linger_seconds * 1000))
