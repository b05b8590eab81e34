"""The one wake-up rule, in an asyncio shell: a `Tick` when the core's ``next_wakeup`` comes.

Every core says when it next wants to be woken the same way: its ``next_wakeup`` (monotonic seconds, on the
clock of the ``now`` it is handed; ``math.inf`` for never), which its shell reads after each event it handed
the core (`scaler.protocol.core_events`). The asyncio shells (the scheduler's, the worker's, the worker
manager's) keep one `Alarm` each: ``at(when)`` sets it for the earliest time asked since it last rang, and it
rings (the shell then hands its core a `Tick`) no earlier than that. The client's agent, a thread that waits
on a `zmq.Poller`, waits no longer than its core's ``next_wakeup`` instead.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Callable, Optional


class Alarm:
    """Calls ``ring`` once the earliest time asked for (``at``) came; set again by the next ``at``."""

    __slots__ = ("_ring", "_when", "_handle")

    def __init__(self, ring: Callable[[], None]) -> None:
        self._ring = ring
        self._when = math.inf  # the time it is set for
        self._handle: Optional[asyncio.TimerHandle] = None

    @property
    def when(self) -> float:
        return self._when

    def at(self, when: float) -> None:
        """Ring at ``when`` (monotonic seconds) if that is earlier than the time it is set for."""
        if when >= self._when:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        delay = max(0.0, when - time.monotonic())
        self._handle = asyncio.get_running_loop().call_later(delay, self._rang)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = math.inf

    def _rang(self) -> None:
        self._handle = None
        self._when = math.inf
        self._ring()
