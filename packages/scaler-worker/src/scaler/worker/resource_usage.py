"""CPU and memory of the agent and its processors, sampled once per heartbeat (never per task)."""

from __future__ import annotations

from typing import Dict, Tuple

import psutil


class ResourceUsage:
    def __init__(self) -> None:
        self._agent = psutil.Process()
        self._agent.cpu_percent(None)  # the first call only starts the measurement
        self._processors: Dict[int, psutil.Process] = {}

    def watch_processor(self, pid: int) -> None:
        try:
            process = psutil.Process(pid)
            process.cpu_percent(None)
        except psutil.Error:
            return
        self._processors[pid] = process

    def forget_processor(self, pid: int) -> None:
        self._processors.pop(pid, None)

    def agent(self) -> Tuple[float, int]:
        """(CPU % since the previous call, resident bytes) of the agent."""
        return _sample(self._agent)

    def processors(self) -> Tuple[float, int]:
        """(CPU % since the previous call, resident bytes) of all processors together."""
        cpu = 0.0
        rss = 0
        for process in self._processors.values():
            process_cpu, process_rss = _sample(process)
            cpu += process_cpu
            rss += process_rss
        return cpu, rss


def _sample(process: psutil.Process) -> Tuple[float, int]:
    try:
        with process.oneshot():
            return process.cpu_percent(None), process.memory_info().rss
    except psutil.Error:
        return 0.0, 0
