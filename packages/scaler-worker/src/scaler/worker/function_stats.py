"""What a worker ran, per function, since it started: reported in each heartbeat for monitors."""

from __future__ import annotations

from typing import Dict, List

from scaler.protocol import messages as m

# functions reported by name in a heartbeat; the runs of the others are summed under OTHER_FUNCTIONS
REPORTED_FUNCTIONS = 100
OTHER_FUNCTIONS = "(other)"
UNKNOWN_FUNCTION = "(function not loaded)"


class FunctionStatsTable:
    """Per function name: runs that succeeded, runs that failed, their total seconds on the processor."""

    __slots__ = ("_stats",)

    def __init__(self) -> None:
        self._stats: Dict[str, List[float]] = {}  # name -> [succeeded, failed, seconds]

    def record(self, name: str, succeeded: bool, seconds: float) -> None:
        name = name or UNKNOWN_FUNCTION
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = [0, 0, 0.0]
        stats[0 if succeeded else 1] += 1
        stats[2] += seconds

    def report(self, limit: int = REPORTED_FUNCTIONS) -> List[m.FunctionStats]:
        """The ``limit`` most run functions, and the rest summed under `OTHER_FUNCTIONS` (totals since start)."""
        ranked = sorted(self._stats.items(), key=lambda item: -(item[1][0] + item[1][1]))
        report = [m.FunctionStats(name, int(s[0]), int(s[1]), s[2]) for name, s in ranked[:limit]]
        rest = ranked[limit:]
        if rest:
            report.append(
                m.FunctionStats(
                    OTHER_FUNCTIONS,
                    sum(int(s[0]) for _, s in rest),
                    sum(int(s[1]) for _, s in rest),
                    sum(s[2] for _, s in rest),
                )
            )
        return report
