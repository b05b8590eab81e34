#!/usr/bin/env python3
"""How long tests/test_chaos.py's workload takes with worker agents and processors SIGKILLed about once a second,
beside the same workload without kills (issue 11 asks for at most 3 times as long).

    python3 benchmarks/chaos.py                  # 10,000 tasks of 3 ms on 3 workers, 3 runs of each
    python3 benchmarks/chaos.py --runs 1 --tasks 2000

Runs in the virtualenv it is started from (Scaler's distributions installed, and psutil); it starts storage,
scheduler and cluster like the tests (tests/cluster_processes.py) and kills with tests/chaos_monkey.py.
Prints one line per run and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from chaos_monkey import ChaosMonkey  # noqa: E402
from cluster_processes import Processes, free_address, wait_until, worker_count  # noqa: E402

from scaler import Client  # noqa: E402
from scaler.protocol.addresses import default_monitor_address, default_storage_address  # noqa: E402


def work(value: int) -> int:
    time.sleep(0.003)
    return value * value + 1


def one_run(tasks: int, workers: int, kill: bool, seed: int) -> Tuple[float, int]:
    """Seconds of the map (the cluster started before), and how many processes were killed meanwhile."""
    address = free_address()
    processes = Processes()
    try:
        storage = default_storage_address(address)
        processes.storage(storage)
        processes.scheduler(address, "--object-storage-address", storage, "--max-task-deaths", "1000")
        cluster = processes.cluster(address, workers)
        wait_until(lambda: worker_count(default_monitor_address(address)) == workers, 60, f"{workers} workers")
        monkey = ChaosMonkey(cluster.pid, seed=seed)
        with Client(address=address) as client:
            client.map(work, [(0,)])  # the function is put and every worker is warm before the clock starts
            start = time.monotonic()
            if kill:
                monkey.start()
            try:
                results = client.map(work, [(i,) for i in range(tasks)])
            finally:
                if kill:
                    monkey.stop()
            seconds = time.monotonic() - start
        if results != [i * i + 1 for i in range(tasks)]:
            raise AssertionError("wrong results")
        return seconds, len(monkey.killed)
    finally:
        processes.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind, interleaved (default: 3)")
    args = parser.parse_args()
    calm: List[float] = []
    chaos: List[float] = []
    for run in range(args.runs):
        for kill in (False, True):
            seconds, killed = one_run(args.tasks, args.workers, kill, seed=11 + run)
            (chaos if kill else calm).append(seconds)
            print(f"run {run + 1}: {'killing' if kill else 'no kills'}: {seconds:.1f} s, {killed} processes killed")
    ratio = statistics.median(chaos) / statistics.median(calm)
    print(f"median without kills {statistics.median(calm):.1f} s, with kills {statistics.median(chaos):.1f} s: "
          f"{ratio:.2f} times as long")  # fmt: skip


if __name__ == "__main__":
    main()
