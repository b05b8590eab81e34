"""The object storage server's asyncio/ZeroMQ shell, and its programmatic entry.

`ObjectStorageServer` binds one ROUTER socket, decodes each ZeroMQ message,
hands it to the sans-I/O `ObjectStore` as an event (`FromPeer`, with the
sender's `Credential`: the roles of the key ZeroMQ authenticated, when the
server has keys) and sends the replies it returns; it decides nothing. With
keys, the ZAP handler (`scaler.protocol.zap`) lets only authorized keys connect,
and the authorized keys are read again every second: a key revoked since is
refused at its next message.

The ROUTER is read in the event loop when its file descriptor says so, a burst
at a time (`scaler.protocol.socket_reader`, as every shell reads). Its monitor
(`connection_events.AcceptedConnections`) gives each accepted connection an
ID; the shell tells the store the connection of each Hello (`PeerConnection`)
and each connection that closed (`ConnectionClosed`, after what is readable on
the ROUTER: what a peer sent before it left is served first), and the store
forgets the peers that left.

Nothing a peer sends stops the loop: a message that does not decode is logged
with its sender and dropped; an error while handling one message drops that
message, logged. Replies never wait on a peer: the ROUTER queues each peer's
replies in ZeroMQ, in that peer's own pipe, however slowly it reads (``SNDHWM``
0: they are answers to what it asked, and get replies reference the stored
frames, never copies); a gone peer's replies are dropped by the ROUTER.

`run_object_storage_server(address, ...)` runs a server until SIGTERM or SIGINT;
it blocks, so other components start it in a ``multiprocessing.Process``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import Any, List, Optional, Sequence

import zmq

from scaler.protocol import codec
from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.codec import message_name
from scaler.protocol.command_line import run_event_loop, setup_logging
from scaler.protocol.connection_events import AcceptedConnections
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import show
from scaler.protocol.message_limits import show_size, storage_max_message_size
from scaler.protocol.messages import Hello
from scaler.protocol.process_control import reuse_payload_memory
from scaler.protocol.security import (
    NO_KEYS,
    NO_SECURITY,
    OPEN,
    REREAD_SECONDS,
    STORAGE_DOMAIN,
    Keys,
    SecurityConfig,
    check_exposure,
    new_socket,
    server_keys,
)
from scaler.protocol.socket_reader import LoopReader, SocketReader
from scaler.storage.object_places import ObjectDirectory, SpillDirectory
from scaler.storage.object_store import DEFAULT_MAX_OBJECT_SIZE, ObjectStore
from scaler.storage.storage_events import ConnectionClosed, FromPeer, PeerConnection, Reply

logger = logging.getLogger(__name__)

_FALLBACK_MAX_MEMORY = 4 << 30


def default_max_memory() -> int:
    """Half of the memory this host (or its cgroup limit, when lower) offers; 4 GiB when unknown."""
    total: Optional[int] = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as file:
            limit = file.read().strip()
        if limit.isdigit():
            total = min(total, int(limit)) if total else int(limit)
    except OSError:
        pass
    if not total or total <= 0:
        return _FALLBACK_MAX_MEMORY
    return max(total // 2, 1)


class ObjectStorageServer:
    """A ROUTER socket at ``address`` serving an `ObjectStore`."""

    def __init__(
        self, address: str, store: ObjectStore, context: Optional[zmq.Context] = None, keys: Keys = NO_KEYS
    ) -> None:
        self.address = check_address(address)
        self.store = store
        self._keys = keys
        self._given_context = context
        self._context: Optional[zmq.Context] = None
        self._socket: Any = None
        self._connections: Optional[AcceptedConnections] = None
        self._zap: Any = None
        self._serving: Optional[asyncio.Task] = None
        self._stop_requested = False
        self._messages: Optional[LoopReader] = None  # the ROUTER's reader, while it serves

    def bind(self) -> None:
        """Bind the ROUTER socket; raise `AddressError` naming the address when that fails."""
        self._context = self._given_context if self._given_context is not None else zmq.Context()
        if self._keys.secure:
            from scaler.protocol.zap import ZapHandler

            self._zap = ZapHandler(self._context, self._keys, "ObjectStorageServer", [STORAGE_DOMAIN])
            self._zap.start()
        limit = storage_max_message_size(self.store.max_object_size)  # a larger frame disconnects its peer
        # plain sockets, read as their file descriptor says, also on a given zmq.asyncio context
        sockets: Any = zmq.Context.shadow(self._context.underlying)
        socket = new_socket(sockets, zmq.ROUTER, self._keys, STORAGE_DOMAIN, limit)
        if not self._keys.secure:
            # A peer reconnecting under its ID takes over at once. Not with keys: an identity is bound to the
            # key that said Hello with it, and another key must not take its connection over, even briefly.
            socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # A ROUTER silently drops what is over a peer's send high-water mark, and a dropped reply leaves its
        # requester waiting forever. Unlimited: a peer's queue holds only replies to what it asked for, and
        # get replies reference the stored frames rather than copy them.
        socket.setsockopt(zmq.SNDHWM, 0)
        socket.setsockopt(zmq.LINGER, 0)
        connections = AcceptedConnections(socket)
        try:
            socket.bind(self.address)
        except zmq.ZMQError as error:
            connections.close()
            socket.close(linger=0)
            self._release_context()
            raise AddressError(f"object storage server cannot bind to {self.address}: {error.strerror}") from None
        self._socket = socket
        self._connections = connections
        logger.info(f"ObjectStorageServer: listen to address {self.address}")
        logger.info(
            f"ObjectStorageServer: max object size {show_size(self.store.max_object_size)}, "
            f"memory limit {show_size(self.store.max_memory)} (a client's objects: "
            f"{show_size(self.store.max_client_memory)}), messages up to {show_size(limit)}, {self._spilling()}"
        )

    def _spilling(self) -> str:
        places = self.store.places
        if places.spill is None:
            return "no spilling (no --spill-directory)"
        return f"spilling to a directory in {places.spill.parent} up to {show_size(places.max_disk)}"

    async def serve(self) -> None:
        """Serve until `stop` is called; then close the socket (linger 0)."""
        if self._socket is None:
            self.bind()
        assert self._socket is not None and self._connections is not None
        self._serving = asyncio.current_task()
        rereading = asyncio.ensure_future(self._reread_keys()) if self._zap is not None else None
        loop = asyncio.get_running_loop()
        # each message handled alone as it is read (`_on_frames`); a message that fails is dropped and logged
        reader = SocketReader(self._socket, self._on_frames, copy=False, name="ObjectStorageServer", routed=True)
        self._messages = LoopReader(reader, _nothing)
        descriptor = self._connections.monitor.getsockopt(zmq.FD)
        try:
            self._messages.start(loop)
            loop.add_reader(descriptor, self._read_connections)
            loop.call_soon(self._read_connections)  # what came before anyone watched the descriptor
            await loop.create_future()  # until stop() cancels this task
        except asyncio.CancelledError:
            if not self._stop_requested:
                raise
        finally:
            if rereading is not None:
                rereading.cancel()
            self._messages.stop()
            loop.remove_reader(descriptor)
            self.close()

    async def _reread_keys(self) -> None:
        """The authorized keys, read again every `REREAD_SECONDS` (else only at a handshake): what a peer whose
        key was revoked sends is refused within a second, whether or not anybody else connects."""
        while True:
            await asyncio.sleep(REREAD_SECONDS)
            try:
                self._zap.reread()
            except Exception:  # the next second tries again
                logger.exception("ObjectStorageServer: cannot read the authorized keys again")

    def stop(self, why: str = "stop requested") -> None:
        """Make `serve` return; safe to call from a signal handler on the loop."""
        if self._stop_requested:
            return
        self._stop_requested = True
        logger.info(f"ObjectStorageServer: {why}, shutting down")
        if self._serving is not None:
            self._serving.cancel()

    def close(self) -> None:
        if self._socket is None:
            return
        if self._connections is not None:
            self._connections.close()
            self._connections = None
        self._socket.close(linger=0)
        self._socket = None
        self._release_context()
        logger.info(
            f"ObjectStorageServer: exited, holding {self.store.object_count} objects "
            f"({show_size(self.store.used_memory)}), {self.store.peer_count} peers connected"
        )

    def _release_context(self) -> None:
        if self._zap is not None:
            self._zap.stop()
            self._zap = None
        if self._context is not None and self._given_context is None:
            self._context.term()
        self._context = None

    # ----------------------------------------------------------------- reading

    def _read_connections(self) -> None:
        """The monitor's reports; the connections that closed reach the store after what is readable on the
        ROUTER (a peer's last requests are served before it is forgotten)."""
        connections = self._connections
        if connections is None:
            return
        while True:
            try:
                connections.note(connections.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
        if not connections.closed:
            return
        messages = self._messages
        while self._socket is not None and messages is not None and messages.reader.readable():
            messages.drain()
        for connection in connections.take_closed():
            try:
                self._feed(ConnectionClosed(connection))
            except Exception:  # noqa: BLE001 - one connection's end never stops the loop
                logger.exception(f"ObjectStorageServer: failed to forget the peer of connection {connection}")

    def _on_frames(self, frames: List[zmq.Frame]) -> None:
        if len(frames) < 2:
            sender = show(frames[0].bytes) if frames else "an unknown peer"
            logger.warning(f"ObjectStorageServer: drop message from {sender}: no frames after the peer identity")
            return
        peer_id = frames[0].bytes
        credential = self._keys.credential(str(frames[1].get("User-Id"))) if self._keys.secure else OPEN
        try:
            message, blobs = codec.decode(frames[1:])
        except ProtocolError as error:
            problem = str(error).splitlines()[0] if str(error) else type(error).__name__  # capnp appends a stack dump
            logger.warning(f"ObjectStorageServer: drop malformed message from {show(peer_id)}: {problem}")
            return
        if type(message) is Hello:  # the connection it came on: the peer is forgotten when that one closes
            connections = self._connections
            assert connections is not None  # made with the socket
            self._feed(PeerConnection(peer_id, connections.connection_of(frames[1].get(zmq.SRCFD))))
            if connections.closed:  # read meanwhile: they reach the store once this burst is served
                asyncio.get_running_loop().call_soon(self._read_connections)
        blobs = codec.received_blobs(blobs)  # large payloads stay in their frames, sent back zero-copy
        self._feed(FromPeer(peer_id, message, blobs, credential))

    def _feed(self, event: Any) -> None:
        for reply in self.store.handle(event, time.monotonic()):
            self._send(reply)

    def _send(self, reply: Reply) -> None:
        try:
            frames: List[Any] = [reply.peer_id, *codec.encode(reply.message, reply.blobs)]
            # A ROUTER socket never blocks a send: a gone peer's messages are dropped, a slow peer's queued.
            self._socket.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except (zmq.ZMQError, ValueError, TypeError) as error:
            logger.warning(
                f"ObjectStorageServer: cannot send {message_name(type(reply.message))} to {show(reply.peer_id)}: "
                f"{error}"
            )


def _nothing(events: List[Any], more: bool) -> None:
    """Each message was handled as it was read: no events are left to deliver."""


async def _serve_until_signalled(server: ObjectStorageServer) -> None:
    server.bind()
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, server.stop, f"received {signum.name}")
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no POSIX signals
            logger.debug(f"ObjectStorageServer: cannot handle {signum.name} here")
    try:
        await server.serve()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def run_object_storage_server(
    address: str,
    max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
    max_memory: Optional[int] = None,
    max_client_memory: Optional[int] = None,
    spill_directory: Optional[str] = None,
    max_disk: Optional[int] = None,
    object_directory: Optional[str] = None,
    event_loop: str = "auto",
    logging_level: Optional[str] = "INFO",
    logging_paths: Sequence[str] = ("/dev/stdout",),
    logging_config_file: Optional[str] = None,
    security: SecurityConfig = NO_SECURITY,
) -> None:
    """Run an object storage server at ``address`` until SIGTERM or SIGINT (then return normally).

    Blocking: call it as the target of a ``multiprocessing.Process`` (or from a CLI).
    ``max_object_size``, ``max_memory`` and ``max_client_memory`` (what one owner's objects may take) are bytes;
    ``max_memory=None`` means half of the host's memory, ``max_client_memory=None`` half of ``max_memory``.
    Past ``max_memory``, objects are spilled to a directory made inside ``spill_directory`` (None: not spilled,
    refused), up to ``max_disk`` bytes (None: half the free space there at the start); the directory is removed
    when the server stops (docs/memory.md). With ``object_directory`` every object is kept in a file there too, and
    the objects found there at the start are served (they survive a restart; ``spill_directory`` is not used:
    the object directory holds every object already). ``logging_level=None`` leaves the logging configuration of
    the process as it is.
    ``security``: its keys (`SecurityConfig.key_file`, `authorized_keys`); without them it refuses to listen
    at an address other hosts reach, unless ``security.insecure``.
    Raises `AddressError` for an invalid or unbindable address, `ValueError` for invalid limits,
    `scaler.protocol.command_line.ConfigError` for an unknown or unavailable event loop, `SecurityError` for
    unusable keys or a reachable address without them.
    """
    if logging_level is not None:
        setup_logging(logging_level, logging_paths, logging_config_file)
    check_exposure("the object storage server", [check_address(address)], security)
    keys = server_keys(security)
    reuse_payload_memory()
    if object_directory is not None:
        spill: Optional[SpillDirectory] = ObjectDirectory(object_directory)
    else:
        spill = SpillDirectory(spill_directory) if spill_directory is not None else None
    if spill is not None and max_disk is None:
        max_disk = max(spill.free_bytes() // 2, 1)
    store = ObjectStore(
        max_object_size=max_object_size,
        max_memory=default_max_memory() if max_memory is None else max_memory,
        max_client_memory=max_client_memory,
        spill=spill,
        max_disk=max_disk or 0,
    )
    if object_directory is not None:
        logger.info(
            f"ObjectStorageServer: every object is kept in {object_directory} too; "
            f"{store.restore()} object(s) found there"
        )
    try:
        server = ObjectStorageServer(address, store, keys=keys)
        run_event_loop(lambda: _serve_until_signalled(server), event_loop)
    finally:
        store.places.close()
