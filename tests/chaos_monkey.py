"""A chaos monkey for a running scaler_cluster: SIGKILLs one of its worker agents or task processors about once
a second, chosen by a seeded generator. Used by tests/test_chaos.py and benchmarks/chaos.py."""

from __future__ import annotations

import random
import threading
from typing import List, Tuple

import psutil


def agents_and_processors(cluster_pid: int) -> Tuple[List[psutil.Process], List[psutil.Process]]:
    """The cluster's worker agents, and their task processors (multiprocessing's spawned children)."""
    agents = psutil.Process(cluster_pid).children()
    processors = []
    for agent in agents:
        try:
            processors += [c for c in agent.children() if "spawn_main" in " ".join(c.cmdline())]
        except psutil.Error:  # it ended meanwhile
            pass
    return agents, processors


class ChaosMonkey:
    """Kills until `stop`; `killed` lists ``(kind, process)`` of each kill ("agent" or "processor")."""

    def __init__(self, cluster_pid: int, seed: int = 11, interval_seconds: float = 1.0) -> None:
        self.killed: List[Tuple[str, psutil.Process]] = []
        self._cluster_pid = cluster_pid
        self._random = random.Random(seed)
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monkey", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self._interval * self._random.uniform(0.5, 1.5)):
            kind = self._random.choice(("agent", "processor"))
            agents, processors = agents_and_processors(self._cluster_pid)
            candidates = agents if kind == "agent" else processors
            if not candidates:
                continue
            victim = self._random.choice(sorted(candidates, key=lambda process: process.pid))
            try:
                victim.kill()
            except psutil.Error:  # it ended meanwhile
                continue
            self.killed.append((kind, victim))
