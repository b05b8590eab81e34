"""How a connection to a host that vanished is found dead: the TCP options every Scaler socket sets.

A process that dies on a live host closes its connections (its kernel sends FIN or RST), and the peers hear of
it at once from their socket monitors (`connection_events`, the scheduler's ROUTER monitor). A host that
vanishes (power lost, a cable pulled, a kernel panic, a firewall that drops) says nothing; its peers find out
from their own kernels, which these options make do so in seconds:

- TCP keepalive (``ZMQ_TCP_KEEPALIVE*``): a connection on which nothing arrived for `KEEPALIVE_IDLE_SECONDS`
  is probed every `KEEPALIVE_INTERVAL_SECONDS`;
- ``TCP_USER_TIMEOUT`` (``ZMQ_TCP_MAXRT``): data sent and unacknowledged, or keepalive probes unanswered, for
  `DEAD_PEER_SECONDS` end the connection (ETIMEDOUT);
- ``ZMQ_CONNECT_TIMEOUT``: a connection attempt that gets no answer is given up after `DEAD_PEER_SECONDS` and
  tried again, so a peer that comes back is reached within that time.

ZeroMQ then closes the connection and its socket monitor says so, as for a process that died: the same rule
for both. The peer's kernel answers probes and acknowledges data whatever its process does, so a peer that is
busy (a scheduler deep in a large graph, a task that holds the GIL) or moving bulk data (a 1 GB argument:
acknowledgements do not queue behind it, where a ZMTP PING would) is never taken for gone. The protocol's own
heartbeats and the worker and client timeouts remain the rule for a process that is connected but hung.

Every socket that leaves its process is made by `scaler.protocol.security.new_socket`, which calls
`watch_liveness`; these options apply to TCP only (ipc and inproc ignore them).
"""

from __future__ import annotations

from typing import Any

import zmq

KEEPALIVE_IDLE_SECONDS = 1  # quiet for this long: the kernel probes the peer
KEEPALIVE_INTERVAL_SECONDS = 1  # then once per interval
KEEPALIVE_PROBES = 3  # (with TCP_USER_TIMEOUT set, Linux ends the connection by the time below instead)
DEAD_PEER_SECONDS = 3  # unacknowledged or unanswered this long: the connection is dead


def watch_liveness(socket: Any) -> None:
    """Set the options above on ``socket`` (before it binds or connects)."""
    socket.setsockopt(zmq.TCP_KEEPALIVE, 1)
    socket.setsockopt(zmq.TCP_KEEPALIVE_IDLE, KEEPALIVE_IDLE_SECONDS)
    socket.setsockopt(zmq.TCP_KEEPALIVE_INTVL, KEEPALIVE_INTERVAL_SECONDS)
    socket.setsockopt(zmq.TCP_KEEPALIVE_CNT, KEEPALIVE_PROBES)
    socket.setsockopt(zmq.TCP_MAXRT, DEAD_PEER_SECONDS * 1000)
    socket.setsockopt(zmq.CONNECT_TIMEOUT, DEAD_PEER_SECONDS * 1000)
