"""What happened at the scheduler, for monitors (protocol 1.8): kept only while a monitor subscribes.

The core and its parts note an event where it happens (`add`: a worker joined, left, died or timed out, a task's
processor died, a worker stopped a task for going over its memory limit (`memory_kills`), a peer was refused, a
worker manager was told to start or stop groups; what the core logs of its peers it logs and notes at once, `info`
and `warning`); each snapshot takes those since the last one (`take`),
which monitors show as an events log. Nobody subscribing, `add` returns at once.
"""

from __future__ import annotations

import logging
from typing import List, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.protocol.message_limits import show_size

EVENTS_PER_SNAPSHOT = 1_000  # past that, a snapshot says how many more it left out
KILLS_PER_HEARTBEAT = 100  # of a worker's heartbeat, the tasks stopped for memory read (workers send no more)

logger = logging.getLogger(__name__)


class MonitorEvents:
    __slots__ = ("watching", "now", "_events", "_left_out")

    def __init__(self) -> None:
        self.watching = False  # a monitor subscribes
        self.now = 0.0  # the time of the event the core handles (set by the core), which an event is dated with
        self._events: List[Tuple[float, str, bytes, str]] = []
        self._left_out = 0

    def add(self, kind: str, subject: bytes, text: str) -> None:
        """``kind``: what happened in a few words; ``subject``: the peer it concerns (b"": none)."""
        if not self.watching:
            return
        if len(self._events) >= EVENTS_PER_SNAPSHOT:
            self._left_out += 1
            return
        self._events.append((self.now, kind, subject, text))

    def info(self, kind: str, subject: bytes, text: str) -> None:
        """Log ``text`` (an INFO line of the scheduler) and note it as an event (`add`)."""
        logger.info(f"Scheduler: {text}")
        self.add(kind, subject, text)

    def warning(self, kind: str, subject: bytes, text: str) -> None:
        """Log ``text`` (a WARNING line of the scheduler) and note it as an event (`add`)."""
        logger.warning(f"Scheduler: {text}")
        self.add(kind, subject, text)

    def memory_kills(self, worker_id: bytes, heartbeat: m.WorkerHeartbeat) -> None:
        """The tasks the worker stopped for going over its memory limit since its last heartbeat, each logged and
        noted."""
        limit = show_size(heartbeat.memory_limit_bytes)
        for kill in heartbeat.memory_killed[:KILLS_PER_HEARTBEAT]:
            function = kill.function or "a function not loaded"
            what = f"worker {show(worker_id)} stopped task {kill.task_id.hex()} of {function}"
            if kill.refused:
                how = f"an allocation past its memory limit of {limit} was refused"
            else:
                how = f"memory {show_size(kill.memory_bytes)} over its limit of {limit}"
            self.info("memory kill", worker_id, f"{what}: {how}")

    def take(self, now: float) -> List[m.MonitorEvent]:
        """The events since the last call, oldest first, dated in seconds before ``now``."""
        events = [m.MonitorEvent(now - when, kind, subject, text) for when, kind, subject, text in self._events]
        if self._left_out:
            text = f"{self._left_out} more event(s) in the last second, left out of this snapshot"
            events.append(m.MonitorEvent(0.0, "events left out", b"", text))
        self._events = []
        self._left_out = 0
        return events
