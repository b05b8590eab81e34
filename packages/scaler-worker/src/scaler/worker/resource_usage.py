"""CPU and memory of processes, sampled once per heartbeat (never per task)."""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

import psutil


class ProcessUsage:
    """The CPU and memory of some processes together: the agent, or the processors."""

    def __init__(self, pids: Iterable[int] = ()) -> None:
        self._processes: Dict[int, psutil.Process] = {}
        for pid in pids:
            self.watch(pid)

    def watch(self, pid: int) -> None:
        try:
            process = psutil.Process(pid)
            process.cpu_percent(None)  # the first call only starts the measurement
        except psutil.Error:
            return
        self._processes[pid] = process

    def forget(self, pid: int) -> None:
        self._processes.pop(pid, None)

    def sample(self) -> Tuple[float, int]:
        """(CPU % since the previous call, resident bytes), summed over the processes."""
        cpu = 0.0
        rss = 0
        for process in self._processes.values():
            try:
                with process.oneshot():
                    cpu += process.cpu_percent(None)
                    rss += process.memory_info().rss
            except psutil.Error:
                pass
        return cpu, rss
