"""The scheduler's monitor feed: an XPUB at the monitor address (by default the scheduler's port + 2) that
publishes the snapshots to its subscribers and tells the shell who subscribes (part of the shell: I/O only).

With keys, the ZAP handler admits monitor keys only (client keys too with ``--monitor-clients``). ZeroMQ checks a
subscriber's key only in its handshake, and cannot close the connection of one subscriber: when a key the feed
admitted is revoked, `close_subscriptions` unbinds the address, which closes every subscriber's connection, and
binds it again; the subscribers reconnect by themselves, through the ZAP handler again, which refuses the revoked
key. The others miss a snapshot at most.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, List, Optional

import zmq

from scaler.protocol.message_limits import MONITOR_MAX_MESSAGE_SIZE
from scaler.protocol.security import MONITOR_DOMAIN, Keys, new_socket
from scaler.scheduler.scheduler_events import MonitorSubscription

SNAPSHOTS_HELD = 16  # per subscriber; past that a slow subscriber misses snapshots (the scheduler never waits)

logger = logging.getLogger(__name__)


class MonitorFeed:
    def __init__(self, context: Any, keys: Keys, address: str) -> None:
        self.address = address
        self.socket = new_socket(context, zmq.XPUB, keys, MONITOR_DOMAIN, MONITOR_MAX_MESSAGE_SIZE)  # subscriptions
        self.socket.setsockopt(zmq.SNDHWM, SNAPSHOTS_HELD)

    @staticmethod
    def subscription(frames: List[Any]) -> Optional[MonitorSubscription]:
        """What the XPUB read: a subscription (+1) or its end (-1), for the core."""
        change = {b"\x01": 1, b"\x00": -1}.get(frames[0][:1])
        return None if change is None else MonitorSubscription(change)

    def publish(self, frames: List[Any]) -> None:
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def close_subscriptions(self) -> None:
        """Close every subscriber's connection, and listen again."""
        self.socket.unbind(self.socket.getsockopt_string(zmq.LAST_ENDPOINT))  # the address as ZeroMQ names it
        self._bind_again(0)

    def _bind_again(self, attempt: int) -> None:
        """Bind the address once ZeroMQ released it: it does so a moment after the unbind."""
        if self.socket.closed:
            return
        try:
            self.socket.bind(self.address)
        except zmq.ZMQError as error:
            delay = min(1.0, 0.01 * 2**attempt)
            if delay == 1.0:
                logger.error(f"Scheduler: cannot listen at monitor address {self.address} again: {error}")
            asyncio.get_running_loop().call_later(delay, self._bind_again, attempt + 1)
