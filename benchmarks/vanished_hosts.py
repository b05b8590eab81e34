#!/usr/bin/env python3
"""How long each peer takes to notice a host that vanished (its cable pulled: no FIN, no RST), with default
settings, on hosts made of network namespaces (tests/network_hosts.py); docs/scheduling.md has the results.

    python3 benchmarks/vanished_hosts.py              # 10 trials of each case
    python3 benchmarks/vanished_hosts.py --trials 3

Needs root and iproute2, and runs in the virtualenv it is started from (Scaler's distributions installed). Each
trial starts a fresh cluster (tests/network_cluster.py), pulls one host's cable once the cluster is busy, and
times, from the cut, the log line or the client's error that says who noticed. Prints one line per case: the
median and the worst of the trials, in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cluster_processes import Processes, wait_until  # noqa: E402
from network_cluster import Cluster, Peer  # noqa: E402
from network_hosts import Network  # noqa: E402

POLL_SECONDS = 0.02
NOTICE_LIMIT = 60.0  # a case not noticed within this is reported as such


def _logged(cluster: Cluster, log: str, text: str) -> Callable[[], bool]:
    return lambda: text in cluster.log(log)


def _when(condition: Callable[[], bool]) -> float:
    """The wall-clock time at which ``condition`` first held (polled)."""
    deadline = time.monotonic() + NOTICE_LIMIT
    while not condition():
        if time.monotonic() > deadline:
            return float("nan")
        time.sleep(POLL_SECONDS)
    return time.time()


def _holding(cluster: Cluster, folder: Path) -> Peer:
    """A client whose task runs on the worker."""
    marker = folder / "running"
    peer = cluster.peer("hold", str(marker), "--defaults")
    wait_until(marker.exists, 60, "the client's task to run")
    return peer


def worker_host(cluster: Cluster, folder: Path) -> Dict[str, float]:
    _holding(cluster, folder)
    cut = time.time()
    cluster.worker_hosts[0].cut()
    noticed = _when(lambda: bool(cluster.scheduler_says(r"worker \S+ disconnected \(its connection closed\)")))
    return {"a worker host: the scheduler": noticed - cut}


def client_host(cluster: Cluster, folder: Path) -> Dict[str, float]:
    _holding(cluster, folder)
    cut = time.time()
    cluster.client_host.cut()
    noticed = _when(lambda: bool(cluster.scheduler_says(r"client \S+ disconnected \(its connection closed\)")))
    return {"a client host: the scheduler": noticed - cut}


def scheduler_host(cluster: Cluster, folder: Path) -> Dict[str, float]:
    peer = _holding(cluster, folder)
    cut = time.time()
    cluster.scheduler_host.cut()
    worker = _when(_logged(cluster, "cluster-worker0", "lost the connection to scheduler"))
    error = peer.expect("error", NOTICE_LIMIT)
    return {"the scheduler's host: a client": error["time"] - cut, "the scheduler's host: a worker": worker - cut}


def storage_host(cluster: Cluster, folder: Path) -> Dict[str, float]:
    peer = cluster.peer("objects", "--defaults")
    peer.expect("stored", 60)
    cut = time.time()
    cluster.storage_host.cut()
    worker = _when(_logged(cluster, "cluster-worker0", "lost the connection to object storage"))
    error = peer.expect("error", NOTICE_LIMIT)
    return {"the storage host: a client": error["time"] - cut, "the storage host: a worker": worker - cut}


CASES = {worker_host: {}, client_host: {}, scheduler_host: {}, storage_host: {"storage_host": True}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    trials = parser.parse_args().trials
    times: Dict[str, List[float]] = {}
    for case, options in CASES.items():
        for _ in range(trials):
            with tempfile.TemporaryDirectory() as folder, Network() as network:
                processes = Processes()
                try:
                    cluster = Cluster(network, processes, Path(folder), workers=1, defaults=True, **options)
                    for what, seconds in case(cluster, Path(folder)).items():
                        times.setdefault(what, []).append(seconds)
                finally:
                    processes.stop_all()
    print(f"{'what vanished: who notices':40} {'median':>7} {'worst':>7}  ({trials} trials, seconds from the cut)")
    for what, seconds in times.items():
        print(f"{what:40} {statistics.median(seconds):7.2f} {max(seconds):7.2f}")


if __name__ == "__main__":
    main()
