"""What the local processor runner knows of its processor's memory, and what it decides from it (sans-I/O).

`ProcessorHost` measures the resident memory of the processor and of the processes it started every
`memory_limit.POLL_SECONDS`, and when the runner asks (`MeasureMemory`), and delivers each measure as a
`MemoryMeasured` message. The runner (`ProcessorRunner`) keeps them in a `MemoryWatch` and acts:

- past the limit, the running task is stopped with its processor and fails with `MemoryLimitError` (waiting
  tasks die with the processor, tasks sent ahead go back to the queue); an idle processor past it is replaced;
- once a task ran, a processor measured above `memory_limit.RECYCLE_SHARE` of the limit is *suspect*: nothing
  more is sent ahead, and when nothing runs, waits or is sent ahead, a fresh measure is asked for
  (``checking``); still above, the processor is replaced before the next task starts (recycled), so a leak
  does not pile up from task to task. A task that failed for memory inside the processor (its allocation was
  refused) leaves it to be recycled all the same.

Each task stopped for memory either way is counted (``kills``) and noted (`MemoryKill`) for the next heartbeat,
which the scheduler shows in its events log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from scaler.protocol.messages import MemoryKill
from scaler.worker.memory_limit import RECYCLE_SHARE

KILLS_PER_HEARTBEAT = 100  # tasks stopped for memory noted for one heartbeat; past that only counted


@dataclass(slots=True)
class MeasureMemory:
    """Effect: measure this processor's memory now (the answer is a `MemoryMeasured`)."""

    processor_id: int


@dataclass(slots=True)
class MemoryMeasured:
    """The resident memory of the processor and of the processes it started, together."""

    processor_id: int
    resident_bytes: int


class MemoryWatch:
    def __init__(self, limit: int, recycle_share: float = RECYCLE_SHARE) -> None:
        self.limit = limit  # bytes; 0: none
        self.recycle_above = int(limit * recycle_share)
        self.kills = 0  # tasks stopped for memory since the worker started (stopped here or refused an allocation)
        self._killed: List[MemoryKill] = []  # those since the last heartbeat (`take_killed`)
        self.latest = 0
        self.peak = 0
        self.checking = False  # a fresh measure was asked for, to decide whether to recycle
        self._ran = False  # a task ran on this processor
        self._must_recycle = False

    def new_processor(self) -> None:
        self.latest = self.peak = 0
        self.checking = self._ran = self._must_recycle = False

    def measured(self, resident_bytes: int) -> None:
        self.latest = resident_bytes
        if resident_bytes > self.peak:
            self.peak = resident_bytes

    def task_ran(self) -> None:
        self._ran = True

    def refused_allocation(self, task_id: bytes, function: str) -> None:
        """A task failed inside the processor for memory: count it, and recycle the processor before the next."""
        self.killed(task_id, function, refused=True)
        self._must_recycle = True

    def killed(self, task_id: bytes, function: str, refused: bool = False) -> None:
        """A task of ``function`` stopped for going over the limit: its processor stopped at the ``peak`` measured
        (or, ``refused``, refused an allocation past the limit)."""
        self.kills += 1
        if len(self._killed) < KILLS_PER_HEARTBEAT:
            self._killed.append(MemoryKill(task_id, function, 0 if refused else self.peak, refused))

    def take_killed(self) -> List[MemoryKill]:
        """The tasks stopped for memory since the last call."""
        killed, self._killed = self._killed, []
        return killed

    @property
    def over_limit(self) -> bool:
        return 0 < self.limit < self.latest

    @property
    def suspect(self) -> bool:
        """Whether the processor may be due for recycling: send nothing ahead, and check once it is idle."""
        return self._must_recycle or (self._ran and 0 < self.recycle_above < self.latest)

    @property
    def must_recycle(self) -> bool:
        """Whether to recycle it without a fresh measure."""
        return self._must_recycle
