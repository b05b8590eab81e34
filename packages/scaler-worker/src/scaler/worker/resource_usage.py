"""CPU and memory of processes, sampled once per heartbeat (never per task)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

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


class TreeMemory:
    """The resident memory of a process and of the processes it started, together: the process itself at each
    sample, the processes it started as last found (they are looked for anew every ``children_seconds``: a walk
    of every process of the host)."""

    def __init__(self, pid: int, children_seconds: float) -> None:
        self._pid = pid
        self._children_seconds = children_seconds
        self._children: List[psutil.Process] = []
        self._children_at = 0.0
        try:
            self._process: Optional[psutil.Process] = psutil.Process(pid)
        except psutil.Error:
            self._process = None

    def sample(self, now: float) -> int:
        process = self._process
        if process is None:
            return 0
        if now >= self._children_at:
            self._children_at = now + self._children_seconds
            self._children = descendants(process)
        total = 0
        for each in (process, *self._children):
            try:
                total += each.memory_info().rss
            except psutil.Error:
                pass
        return total


def descendants(process: psutil.Process) -> List[psutil.Process]:
    """The processes ``process`` started, and theirs."""
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def kill_descendants(pid: int) -> None:
    """SIGKILL every process ``pid`` started, and theirs (before ``pid`` itself ends: they would be orphans)."""
    try:
        process = psutil.Process(pid)
    except psutil.Error:
        return
    for child in descendants(process):
        try:
            child.kill()
        except psutil.Error:
            pass
