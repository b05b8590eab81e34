"""Receiving a scheduler's state snapshots from its monitor address.

The scheduler binds an XPUB socket there and publishes one ``StateSnapshot`` per
message (frame 0, codec-encoded, no topic frame), so a subscriber takes everything.
When the cluster runs with keys, the monitor connects with a monitor key (the
scheduler's XPUB admits monitor keys only, and client keys with --monitor-clients).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import zmq

from scaler.protocol import codec, connection_events
from scaler.protocol.connection_events import ConnectionWatch
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import StateSnapshot
from scaler.protocol.security import (
    NO_SECURITY,
    SecurityConfig,
    new_socket,
    peer_keys,
)

logger = logging.getLogger(__name__)

_POLL_MILLISECONDS = 500  # longest blocking wait, so Ctrl-C is handled promptly
NOT_A_MONITOR = (
    "it closed the connection during the ZeroMQ handshake (a scheduler's or an object storage server's address "
    "does; a scheduler's monitor address is its port + 2)"
)


class SnapshotSubscription:
    """A SUB socket connected to one monitor address; `receive` returns its next snapshot.

    The one place where a monitor's socket is made (scaler_top and scaler_ui both use it), with the monitor's
    keys (``security``); `SecurityError` for key files it cannot use. Its socket monitor tells when what
    listens at the address closed the connection during the ZeroMQ handshake (`not_a_monitor`): a
    scheduler's or a storage server's address given for its monitor's; a handshake refused over keys raises
    `ProtocolError` saying why."""

    def __init__(self, address: str, security: SecurityConfig = NO_SECURITY) -> None:
        self.address = address
        self._keys = peer_keys(security)
        self.not_a_monitor = ""  # why the address is not a monitor address, once the handshake failed there
        self._context = zmq.Context()
        self._socket: Any = new_socket(self._context, zmq.SUB, self._keys)
        self._socket.setsockopt(zmq.RCVHWM, 16)  # a slow terminal sees recent snapshots, not a backlog
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._watch = ConnectionWatch(self._socket, self._keys, f"the scheduler at {self.address}")
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(self._watch.monitor, zmq.POLLIN)
        self._socket.connect(address)

    def receive(self, timeout_seconds: Optional[float] = None) -> Optional[StateSnapshot]:
        """The next snapshot, or None when none arrives within ``timeout_seconds`` (None: wait forever).

        Anything that is not a snapshot is logged and dropped. Raises `ProtocolError` when the scheduler refuses
        the connection (no key, an unknown key, not a monitor key), saying which.
        """
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while True:
            wait = _POLL_MILLISECONDS
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                wait = min(wait, max(1, int(remaining * 1000)))
            ready = dict(self._poller.poll(wait))
            if self._watch.monitor in ready:
                change = self._watch.change(self._watch.monitor.recv_multipart())
                if change == connection_events.REFUSED and self._watch.refusal is not None:
                    raise ProtocolError(self._watch.refusal)
                if change == connection_events.REFUSED and not self.not_a_monitor:
                    self.not_a_monitor = f"{self.address} is not a monitor address: {NOT_A_MONITOR}"
                    logger.info(f"Monitor: {self.not_a_monitor}")
            if self._socket not in ready:
                continue
            frames = self._socket.recv_multipart()
            try:
                message, _ = codec.decode(frames)
            except ProtocolError as error:
                logger.warning(f"Monitor: drop malformed message from {self.address}: {error}")
                continue
            if not isinstance(message, StateSnapshot):
                logger.warning(f"Monitor: drop unexpected {type(message).__name__} from {self.address}")
                continue
            return message

    def close(self) -> None:
        self._watch.close()
        self._socket.close(linger=0)
        self._context.term()

    def __enter__(self) -> SnapshotSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
