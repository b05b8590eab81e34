"""How many worker groups each worker manager should run: the scaling decision, without I/O.

`ScalingPolicy.decide(managers, waiting, now)` is a plain function of what the scheduler sees (the tasks that
wait for a processor, by the capabilities they need; each manager's active groups and their load) and of
when each manager's work began to wait; it answers, per manager, how many groups it should have and which
idle groups to retire. `worker_managers.py` gathers the view, drains what is retired and tells the managers.
The rule in words is `docs/scaling.md`:

- **Waiting work.** A task waits when it is queued at the scheduler, or held by a worker beyond the tasks
  that worker runs at once (its slots). Each is keyed by the capabilities it needs: for a task queued here,
  those it asks for (under ``--allocate-policy capability``; none under ``even``), for a task on a worker,
  that worker's capabilities. A manager can take work whose key is a subset of its workers' capabilities.
- **Up.** Managers take the waiting work in turn, the first connected first. The groups a manager is
  starting cover what their workers will run when they arrive; what is left uncovered, once it has waited
  `ScalingSettings.up_after_seconds` without a pause, asks for as many more groups as cover it (a worker of
  a group covers one task), up to the manager's maximum. What a manager covers is gone for the next one.
- **Down.** A group whose workers have held no task for `ScalingSettings.idle_seconds` is retired (drained,
  then stopped), the longest idle first, as long as its manager keeps its minimum and has no uncovered work.
- **Limits.** A manager never has fewer than its minimum of groups, nor is asked for more than its maximum.

The hysteresis is in the two delays: work must wait a while before groups start for it, and groups must
idle a while before they stop, so a burst that ends soon starts nothing and a pause between bursts stops
nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional

NEEDS_NOTHING: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class ScalingSettings:
    up_after_seconds: float = 1.0  # work waits this long before groups start for it
    idle_seconds: float = 30.0  # a group idle this long is retired


@dataclass(frozen=True)
class GroupLoad:
    """An active group of a manager (not retiring, draining or stopping)."""

    group_id: bytes
    workers_expected: int  # the workers it runs once started
    workers_connected: int
    idle_since: Optional[float]  # since when its connected workers hold no task; None: busy, or none connected


@dataclass(frozen=True)
class ManagerLoad:
    manager_id: bytes
    capabilities: FrozenSet[str]  # names its groups' workers offer
    workers_per_group: int
    min_groups: int
    max_groups: int
    groups: List[GroupLoad] = field(default_factory=list)  # its active groups


@dataclass(frozen=True)
class Decision:
    desired_groups: int  # active groups it should have, once the retired ones are gone
    retire: List[bytes]  # idle groups to drain and stop


def waiting_work(queued: Mapping[FrozenSet[str], int], workers: List[tuple]) -> Dict[FrozenSet[str], int]:
    """The tasks that wait for a processor, keyed by the capabilities a worker needs to take them over:
    ``queued`` (at the scheduler, by the capabilities they need), and for each ``(capabilities, load, slots)``
    of a worker that is not draining, what it holds beyond its slots (keyed by its capabilities)."""
    waiting: Dict[FrozenSet[str], int] = {}
    for needs, count in queued.items():
        waiting[needs] = waiting.get(needs, 0) + count
    for capabilities, load, slots in workers:
        excess = load - max(1, slots)
        if excess > 0:
            waiting[capabilities] = waiting.get(capabilities, 0) + excess
    return waiting


DEFAULT_SCALING = ScalingSettings()


class ScalingPolicy:
    def __init__(self, settings: ScalingSettings = DEFAULT_SCALING) -> None:
        self.settings = settings
        self._waiting_since: Dict[bytes, float] = {}  # manager -> since when it has uncovered work, unpaused

    def forget(self, manager_id: bytes) -> None:
        self._waiting_since.pop(manager_id, None)

    def decide(
        self, managers: List[ManagerLoad], waiting: Mapping[FrozenSet[str], int], now: float
    ) -> Dict[bytes, Decision]:
        """Each manager's decision (``managers`` in the order they take work: the first connected first)."""
        pool = {key: count for key, count in waiting.items() if count > 0}
        return {manager.manager_id: self._decide_one(manager, pool, now) for manager in managers}

    def _decide_one(self, manager: ManagerLoad, pool: Dict[FrozenSet[str], int], now: float) -> Decision:
        settings = self.settings
        per_group = max(1, manager.workers_per_group)
        groups = manager.groups
        active = len(groups)
        keys = [key for key in pool if key <= manager.capabilities]
        waiting = sum(pool[key] for key in keys)
        coming = sum(max(0, g.workers_expected - g.workers_connected) for g in groups)
        uncovered = waiting - coming
        desired = active
        if uncovered > 0:
            since = self._waiting_since.setdefault(manager.manager_id, now)
            if now - since >= settings.up_after_seconds:
                desired = max(active, min(manager.max_groups, active + math.ceil(uncovered / per_group)))
        else:
            self._waiting_since.pop(manager.manager_id, None)
        desired = max(desired, manager.min_groups)
        _take(pool, keys, coming + (desired - active) * per_group)
        retire: List[bytes] = []
        if uncovered <= 0:
            idle = [g for g in groups if g.idle_since is not None and now - g.idle_since >= settings.idle_seconds]
            idle.sort(key=lambda g: (g.idle_since, g.group_id))
            retire = [g.group_id for g in idle[: max(0, desired - manager.min_groups)]]
        return Decision(desired - len(retire), retire)


def _take(pool: Dict[FrozenSet[str], int], keys: List[FrozenSet[str]], amount: int) -> None:
    """Remove ``amount`` tasks from the waiting work of ``keys``, the most specific keys first (work that
    fewer managers can take)."""
    for key in sorted(keys, key=lambda k: (-len(k), sorted(k))):
        if amount <= 0:
            return
        taken = min(amount, pool[key])
        pool[key] -= taken
        amount -= taken
        if pool[key] == 0:
            del pool[key]
