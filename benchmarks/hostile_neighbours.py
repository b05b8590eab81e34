#!/usr/bin/env python3
"""A legitimate client among hostile neighbours (the scene of tests/test_hostile_neighbours.py) against the same
client on a quiet cluster, in the same run: its no-op map's throughput and its round trip; docs/security.md
("Under attack") has the results.

    .tox/py311-integration/bin/python benchmarks/hostile_neighbours.py     # 3 repetitions, with keys
    .tox/py311-integration/bin/python benchmarks/hostile_neighbours.py --repetitions 1 --tasks 5000 --without-keys

Runs in the virtualenv it is started from (Scaler's distributions installed, and pytest, which the attacks'
checks use). Each run starts a fresh cluster like the tests (tests/keyed_clusters.py: a scheduler that starts its
storage server, 2 workers, with keys unless --without-keys) and sets the scene (tests/hostile_scene.py: the
client's object, function and a task that waits), then measures the client: a map of --tasks no-op tasks
(tasks/s), then --round-trips no-op tasks submitted one at a time, each awaited (median and p99). In an attacked
run every attack of the scene runs round after round, each in a process of its own, from a few seconds before
the first measurement until after the last; the attackers share the machine, so part of what they cost the
client is the CPU they take. Quiet and attacked runs alternate, the order flipped each repetition. Writes
results/hostile_neighbours.json and prints each run, the medians and the ratios (attacked / quiet);
--report-only prints them again from that file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from cluster_processes import Processes, free_address  # noqa: E402
from hostile_scene import SCHEDULER_OPTIONS, AttackProcesses, attacks, prepare  # noqa: E402
from keyed_clusters import start_cluster  # noqa: E402
from run import RESULTS, machine_description  # noqa: E402

from scaler import Client  # noqa: E402

UNDER_WAY_SECONDS = 5.0  # from starting the attackers to the first measurement: each is in its first round by then


def noop(value: int) -> int:
    return value


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_run(attacked: bool, secure: bool, tasks: int, round_trips: int) -> Dict[str, Any]:
    """The client's figures on a fresh cluster, quiet or among the attackers."""
    processes = Processes()
    try:
        with tempfile.TemporaryDirectory(prefix="hostile-neighbours-") as directory:
            load_before = float(Path("/proc/loadavg").read_text().split()[0])
            cluster = start_cluster(processes, free_address(), Path(directory), secure,
                                    scheduler_options=SCHEDULER_OPTIONS)  # fmt: skip
            with Client(cluster.address, security=cluster.security("client")) as client:
                scene, waiting, _ = prepare(client, cluster, str(Path(directory) / "scene"))
                assert client.map(noop, [(i,) for i in range(100)]) == list(range(100))  # every worker warm
                attackers = AttackProcesses(scene, attacks(secure), until_stopped=True) if attacked else None
                with attackers or contextlib.nullcontext():
                    if attackers is not None:
                        time.sleep(UNDER_WAY_SECONDS)
                    start = time.perf_counter()
                    assert client.map(noop, [(i,) for i in range(tasks)]) == list(range(tasks)), "wrong results"
                    map_seconds = time.perf_counter() - start
                    trips: List[float] = []
                    for index in range(round_trips):
                        start = time.perf_counter()
                        assert client.submit(noop, index).result(timeout=60) == index, "a wrong result"
                        trips.append(time.perf_counter() - start)
                    outcomes = attackers.outcomes() if attackers is not None else {}
                assert waiting.cancel(timeout=60), "the client's waiting task was lost"
                assert client.connected, "the client was disconnected"
    finally:
        processes.stop_all()
    failed = {name: error for name, (_, error) in outcomes.items() if error}
    return {
        "attacked": attacked,
        "tasks_per_second": tasks / map_seconds,
        "round_trip_ms_median": 1000 * statistics.median(trips),
        "round_trip_ms_p99": 1000 * percentile(trips, 0.99),
        "attack_rounds": {name: rounds for name, (rounds, _) in outcomes.items()},
        "attacks_failed": failed,  # an attack that got through, or an attacker that broke: its traceback
        "load_average_before": load_before,
    }


def summary(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The medians of the quiet runs and of the attacked ones, each figure, and their ratio (every run counts: an
    attacker that broke, or an attack that got through, is listed beside the run's figures, not left out)."""
    figures: Dict[str, Any] = {}
    for figure in ("tasks_per_second", "round_trip_ms_median", "round_trip_ms_p99"):
        quiet = statistics.median(run[figure] for run in runs if not run["attacked"])
        attacked = statistics.median(run[figure] for run in runs if run["attacked"])
        figures[figure] = {"quiet": quiet, "attacked": attacked, "attacked_over_quiet": attacked / quiet}
    return figures


def report(data: Dict[str, Any]) -> None:
    for index, run in enumerate(data["runs"]):
        print(f"run {index + 1}, {'attacked' if run['attacked'] else 'quiet':>8}: {run['tasks_per_second']:7.0f} "
              f"tasks/s, round trip median {run['round_trip_ms_median']:6.2f} ms, p99 {run['round_trip_ms_p99']:7.2f} "
              f"ms (load average {run['load_average_before']:.2f} before)"
              + (f"; attackers that failed: {', '.join(run['attacks_failed'])}" if run["attacks_failed"] else ""))
    settings = data["settings"]
    print(f"medians of {settings['repetitions']} runs each ({'with' if settings['keys'] else 'without'} keys):")
    for figure, values in data["summary"].items():
        print(f"  {figure:22} quiet {values['quiet']:9.2f}  attacked {values['attacked']:9.2f}  "
              f"attacked / quiet {values['attacked_over_quiet']:.2f}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3, help="runs of each kind (default: %(default)s)")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks of the map (default: %(default)s)")
    parser.add_argument("--round-trips", type=int, default=500, help="tasks one at a time (default: %(default)s)")
    parser.add_argument("--without-keys", action="store_true", help="a cluster without keys (its attacks only)")
    parser.add_argument("--out", type=Path, default=RESULTS / "hostile_neighbours.json")
    parser.add_argument("--report-only", action="store_true", help="print (and summarise again) --out, run nothing")
    args = parser.parse_args()
    if args.report_only:
        data = json.loads(args.out.read_text())
    else:
        secure = not args.without_keys
        machine = machine_description(f"installed in {sys.prefix}")
        runs: List[Dict[str, Any]] = []
        for repetition in range(args.repetitions):
            for attacked in (False, True) if repetition % 2 == 0 else (True, False):
                runs.append(one_run(attacked, secure, args.tasks, args.round_trips))
        machine["load_average_at_end"] = float(Path("/proc/loadavg").read_text().split()[0])
        settings = {"repetitions": args.repetitions, "tasks": args.tasks, "round_trips": args.round_trips,
                    "keys": secure, "workers": 2, "attacks": attacks(secure)}  # fmt: skip
        data = {"machine": machine, "settings": settings, "runs": runs}
    data["summary"] = summary(data["runs"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    report(data)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
