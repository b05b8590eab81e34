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

from scaler.protocol import codec
from scaler.protocol.errors import ProtocolError
from scaler.protocol.messages import StateSnapshot
from scaler.protocol.security import (
    NO_SECURITY,
    SecurityConfig,
    handshake_failure,
    new_socket,
    peer_keys,
    watch_handshakes,
)

logger = logging.getLogger(__name__)

_POLL_MILLISECONDS = 500  # longest blocking wait, so Ctrl-C is handled promptly


class SnapshotSubscription:
    """A SUB socket connected to one monitor address; `receive` returns its next snapshot.

    The one place where a monitor's socket is made (scaler_top and scaler_ui both use it), with the monitor's
    keys (``security``); `SecurityError` for key files it cannot use."""

    def __init__(self, address: str, security: SecurityConfig = NO_SECURITY) -> None:
        self.address = address
        self._keys = peer_keys(security)
        self._context = zmq.Context()
        self._socket: Any = new_socket(self._context, zmq.SUB, self._keys)
        self._socket.setsockopt(zmq.RCVHWM, 16)  # a slow terminal sees recent snapshots, not a backlog
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        self._handshakes: Any = watch_handshakes(self._socket)
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(self._handshakes, zmq.POLLIN)
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
            if self._handshakes in ready:
                reason = handshake_failure(
                    self._handshakes.recv_multipart(), self._keys, f"the scheduler at {self.address}"
                )
                if reason is not None:
                    raise ProtocolError(reason)
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
        self._socket.disable_monitor()
        self._handshakes.close(linger=0)
        self._socket.close(linger=0)
        self._context.term()

    def __enter__(self) -> SnapshotSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
