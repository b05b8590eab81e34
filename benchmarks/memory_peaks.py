#!/usr/bin/env python3
"""The peak memory of each process for a 1 GiB argument and a 1 GiB result (issue 28; docs/memory.md has the
results): each process that holds the object should hold it once (at most 1.1 times its size), never twice.

    python3 benchmarks/memory_peaks.py                  # 1 GiB objects
    python3 benchmarks/memory_peaks.py --size-mib 256

Runs in the virtualenv it is started from (Scaler's distributions installed): a storage server, a scheduler and
one worker on free local ports, and the client in this process. A thread samples the resident memory of each
process every 2 ms; each figure is a process's peak during the task minus its memory just before, divided by the
object's size. The argument case counts the client's copy of the argument in its memory before (the user
made it); the result case counts the result the client receives.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster_processes import Processes, free_address, wait_until, worker_count  # noqa: E402

from scaler import Client  # noqa: E402
from scaler.protocol.addresses import default_monitor_address, default_storage_address  # noqa: E402

SAMPLE_SECONDS = 0.002


def length(data: bytes) -> int:
    return len(data)


def make(size: int) -> bytes:
    return b"\x01" * size


class Peaks:
    """Samples the resident memory of some processes on a thread of its own, keeping each one's peak."""

    def __init__(self, processes: Dict[str, psutil.Process]) -> None:
        self._processes = processes
        self.base = self._sample()
        self.peak = dict(self.base)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> Dict[str, int]:
        rss: Dict[str, int] = {}
        for name, process in self._processes.items():
            try:
                rss[name] = process.memory_info().rss
            except psutil.Error:
                rss[name] = 0
        return rss

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            for name, value in self._sample().items():
                if value > self.peak[name]:
                    self.peak[name] = value

    def stop(self) -> Dict[str, int]:
        self._stop.set()
        self._thread.join()
        return {name: self.peak[name] - self.base[name] for name in self.base}


def _worker_processes(cluster: psutil.Process) -> Dict[str, psutil.Process]:
    """The worker agent (the cluster's child) and its processor (the agent's child)."""
    [agent] = cluster.children()
    [processor] = [child for child in agent.children() if "resource_tracker" not in " ".join(child.cmdline())]
    return {"worker agent": agent, "processor": processor}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="the object's size (default: %(default)s)")
    args = parser.parse_args()
    size = args.size_mib << 20
    rows = [
        _case(f"{args.size_mib} MiB argument", size, lambda client: client.submit(length, make(size)), size),
        _case(f"{args.size_mib} MiB result", size, lambda client: client.submit(make, size), None),
    ]
    names = ("client", "storage server", "scheduler", "worker agent", "processor")
    print(f"peak memory of each process over its memory before, in object sizes ({args.size_mib} MiB)")
    print(f"{'':<20}" + "".join(f"{name:>16}" for name in names))
    for row in rows:
        print(row)
    return 0


def _case(title: str, size: int, submit: Callable[[Client], Any], expected: Any) -> str:
    """One task on a fresh cluster (nothing left of another case in any process): the peaks of its processes."""
    address = free_address()
    storage = default_storage_address(address)
    processes = Processes()
    try:
        storage_process = processes.storage(storage, "--max-object-size", f"{2 * size}")
        scheduler_process = processes.scheduler(address, "--object-storage-address", storage)
        cluster = processes.cluster(address, 1, "--memory-limit", "none")
        wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
        watched = {
            "client": psutil.Process(),
            "storage server": psutil.Process(storage_process.pid),
            "scheduler": psutil.Process(scheduler_process.pid),
            **_worker_processes(psutil.Process(cluster.pid)),
        }
        with Client(address=address, timeout_seconds=600) as client:
            client.submit(length, b"warm-up").result()
            peaks = Peaks(watched)
            value = submit(client).result()
            assert value == expected if expected is not None else len(value) == size
            del value
            return _row(title, peaks.stop(), size)
    finally:
        processes.stop_all()


def _row(title: str, peaks: Dict[str, int], size: int) -> str:
    return f"{title:<20}" + "".join(f"{peak / size:>16.2f}" for peak in peaks.values())


if __name__ == "__main__":
    sys.exit(main())
