"""The workloads, written once against a small engine adapter, and the runner's command line.

Each ``run_<engine>.py`` defines an `Engine` subclass and calls `main(EngineClass)`.
The runner is started by ``benchmarks/run.py`` inside the engine's own virtualenv:

    python run_<engine>.py WORKLOAD SIZE --out RESULT.json [--workers 2]

It starts the engine's local cluster, waits until every worker answers, runs one
workload, measures it (wall time, per-process CPU, RSS), tears everything down
and writes one JSON object to RESULT.json. Only the standard library and psutil
are needed here (psutil is installed in every engine's virtualenv).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import bench_tasks
import psutil

MB = 1_000_000
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
BIG_ARGUMENT_BYTES = 10 * MB
SLEEP_SECONDS = 0.01
READY_TIMEOUT_SECONDS = 120.0
MEMORY_SETTLE_SECONDS = 2.0  # the scheduler's RSS must stay flat this long after the last submission
MEMORY_SETTLE_TIMEOUT_SECONDS = 120.0


class Unsupported(Exception):
    """The engine has no such feature (or refuses it): recorded as "unsupported", not as a failure."""


class Engine:
    """What a workload needs from an engine. Subclasses implement the abstract parts."""

    name = "engine"
    # roles whose RSS is "the scheduler" in the queued-memory workload (empty: the client holds the queue)
    scheduler_roles: tuple = ("scheduler",)

    def __init__(self, workers: int) -> None:
        self.workers = workers

    # --- lifecycle -------------------------------------------------------------------------------------------
    def version(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def wait_ready(self) -> None:
        """Return once every worker has run a task (so no workload pays for worker start-up)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        seen = set()
        while len(seen) < self.workers:
            handles = [self.submit(bench_tasks.whoami, i) for i in range(2 * self.workers)]
            for handle in handles:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"only {len(seen)} of {self.workers} workers answered")
                seen.add(self.result(handle, timeout=remaining))

    # --- tasks -------------------------------------------------------------------------------------------------
    def map(self, fn: Callable, items: Iterable[Any]) -> List[Any]:
        """The engine's batch API: fn(item) for each item, results in order."""
        raise NotImplementedError

    def submit(self, fn: Callable, *args: Any) -> Any:
        raise NotImplementedError

    def result(self, handle: Any, timeout: Optional[float] = None) -> Any:
        raise NotImplementedError

    def gather(self, handles: List[Any]) -> List[Any]:
        return [self.result(handle) for handle in handles]

    def send_object(self, obj: Any) -> Any:
        raise Unsupported("no way to send an object once for many tasks")

    def get(self, graph: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
        raise Unsupported("no task graphs")

    def executor_map(self, fn: Callable, items: Iterable[Any], chunksize: Optional[int]) -> List[Any]:
        """The engine's `concurrent.futures.Executor.map` (or joblib's Parallel): chunksize None is the default."""
        raise Unsupported("no concurrent.futures.Executor interface")

    def watched(self, report: bool = True) -> contextlib.AbstractContextManager:
        """While it is entered, what watches each task of a job: a live monitor with a viewer, and (``report``) a
        report."""
        raise Unsupported("no task stream to watch")

    def submit_in_background(self, fn: Callable, items: Iterator[Any]) -> None:
        """Start submitting fn(item) for every item without waiting for results (queued-memory workload)."""
        thread = threading.Thread(target=self._map_quietly, args=(fn, items), daemon=True)
        thread.start()

    def _map_quietly(self, fn: Callable, items: Iterator[Any]) -> None:
        try:
            self.map(fn, items)
        except BaseException:  # the teardown fails the pending tasks: expected
            pass

    # --- processes ---------------------------------------------------------------------------------------------
    def classify(self, process: psutil.Process, cmdline: str) -> str:
        """The role of one descendant process of the runner."""
        return "other"

    def processes(self) -> Dict[int, str]:
        """pid -> role for the runner (role "client") and every descendant."""
        me = psutil.Process()
        roles = {me.pid: "client"}
        for child in me.children(recursive=True):
            try:
                roles[child.pid] = self.classify(child, " ".join(child.cmdline()))
            except psutil.Error:
                continue
        return roles


# --- measurements ----------------------------------------------------------------------------------------------


def cpu_snapshot(engine: Engine) -> Dict[int, tuple]:
    """pid -> (role, CPU seconds, minor page faults) of the runner and its descendants."""
    snapshot = {}
    for pid, role in engine.processes().items():
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        snapshot[pid] = (role, times.user + times.system, _minor_faults(pid))
    return snapshot


def _minor_faults(pid: int) -> int:
    """Pages the process touched for the first time (fresh memory the kernel faulted in and zeroed); Linux only."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[7])
    except (OSError, ValueError, IndexError):
        return 0


def cpu_breakdown(before: Dict[int, tuple], after: Dict[int, tuple], tasks: int) -> Dict[str, Any]:
    """CPU seconds and fresh memory per role between two snapshots (processes started in between count from
    zero)."""
    roles: Dict[str, Dict[str, float]] = {}
    for pid, (role, seconds, faults) in after.items():
        _, seconds_before, faults_before = before.get(pid, (role, 0.0, 0))
        entry = roles.setdefault(role, {"cpu_seconds": 0.0, "processes": 0, "fresh_bytes": 0})
        entry["cpu_seconds"] += max(0.0, seconds - seconds_before)
        entry["fresh_bytes"] += max(0, faults - faults_before) * PAGE_BYTES
        entry["processes"] += 1
    for entry in roles.values():
        entry["cpu_seconds"] = round(entry["cpu_seconds"], 4)
        entry["cpu_us_per_task"] = round(entry["cpu_seconds"] * 1e6 / tasks, 2) if tasks else None
        entry["fresh_kib_per_task"] = round(entry["fresh_bytes"] / 1024 / tasks, 2) if tasks else None
    return roles


def _rss(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total


# --- workloads ------------------------------------------------------------------------------------------------
# Each returns (metrics, number of tasks) and raises Unsupported when the engine cannot run it.


def workload_map_noop(engine: Engine, size: int):
    items = list(range(size))
    start = time.perf_counter()
    results = engine.map(bench_tasks.noop, items)
    elapsed = time.perf_counter() - start
    _check(results == items, "map returned wrong results")
    return {"seconds": elapsed, "tasks_per_s": size / elapsed}, size


def workload_submit_gather(engine: Engine, size: int):
    start = time.perf_counter()
    handles = [engine.submit(bench_tasks.noop, i) for i in range(size)]
    submitted = time.perf_counter()
    results = engine.gather(handles)
    elapsed = time.perf_counter() - start
    _check(results == list(range(size)), "gather returned wrong results")
    return {"seconds": elapsed, "tasks_per_s": size / elapsed, "submit_seconds": submitted - start}, size


def workload_round_trip(engine: Engine, size: int):
    latencies = []
    for i in range(size):
        start = time.perf_counter()
        value = engine.result(engine.submit(bench_tasks.noop, i))
        latencies.append(time.perf_counter() - start)
        _check(value == i, "round trip returned a wrong result")
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(round(0.99 * len(latencies))) - 1)]
    return {
        "seconds": sum(latencies),
        "median_ms": statistics.median(latencies) * 1e3,
        "p99_ms": p99 * 1e3,
        "max_ms": latencies[-1] * 1e3,
    }, size


def workload_sleep(engine: Engine, size: int):
    items = list(range(size))
    start = time.perf_counter()
    results = engine.map(bench_tasks.sleep_10ms, items)
    elapsed = time.perf_counter() - start
    _check(results == items, "sleep map returned wrong results")
    ideal = size * SLEEP_SECONDS / engine.workers
    return {"seconds": elapsed, "ideal_seconds": ideal, "efficiency": ideal / elapsed}, size


def workload_big_args(engine: Engine, size: int):
    base = os.urandom(BIG_ARGUMENT_BYTES)
    # distinct contents, so no engine can deduplicate them
    arguments = [i.to_bytes(4, "little") + base[4:] for i in range(size)]
    start = time.perf_counter()
    handles = [engine.submit(bench_tasks.size_of, argument) for argument in arguments]
    results = engine.gather(handles)
    elapsed = time.perf_counter() - start
    _check(results == [BIG_ARGUMENT_BYTES] * size, "big-argument tasks returned wrong sizes")
    return {"seconds": elapsed, "mb_per_s": size * BIG_ARGUMENT_BYTES / MB / elapsed}, size


def workload_shared_object(engine: Engine, size: int):
    data = os.urandom(BIG_ARGUMENT_BYTES)
    start = time.perf_counter()
    reference = engine.send_object(data)
    sent = time.perf_counter()
    handles = [engine.submit(bench_tasks.size_of, reference) for _ in range(size)]
    results = engine.gather(handles)
    elapsed = time.perf_counter() - start
    _check(results == [BIG_ARGUMENT_BYTES] * size, "shared-object tasks returned wrong sizes")
    # "effective": as if every task had received its own 10 MB; far above big_args means it travelled once per worker
    return {
        "seconds": elapsed,
        "send_seconds": sent - start,
        "effective_mb_per_s": size * BIG_ARGUMENT_BYTES / MB / elapsed,
    }, size


def _reduction_graph(size: int):
    """About ``size`` nodes: one data node, size/2 leaves (inc of it), then pairwise sums down to one root.

    Arguments are keys only (no literal values inside tasks): some engines take any hashable argument for a key.
    """
    graph: Dict[str, Any] = {"zero": 0}
    leaves = max(1, size // 2)
    layer = []
    for i in range(leaves):
        key = f"leaf-{i}"
        graph[key] = (bench_tasks.inc, "zero")
        layer.append(key)
    level = 0
    while len(layer) > 1:
        level += 1
        next_layer = []
        for j in range(0, len(layer) - 1, 2):
            key = f"sum-{level}-{j // 2}"
            graph[key] = (bench_tasks.add, layer[j], layer[j + 1])
            next_layer.append(key)
        if len(layer) % 2:
            next_layer.append(layer[-1])
        layer = next_layer
    return graph, layer[0], leaves


def workload_graph(engine: Engine, size: int):
    graph, root, expected = _reduction_graph(size)
    start = time.perf_counter()
    result = engine.get(graph, [root])
    elapsed = time.perf_counter() - start
    _check(result[root] == expected, f"graph root is {result[root]!r}, expected {expected}")
    return {"seconds": elapsed, "nodes": len(graph), "nodes_per_s": len(graph) / elapsed}, len(graph)


def _map_reduce_graph(size: int, fan_in: int = 100):
    """About ``size`` nodes: one data node, maps (inc of it), a partial sum of each ``fan_in`` maps, one total."""
    graph: Dict[str, Any] = {"zero": 0}
    maps = max(1, (size - 2) * fan_in // (fan_in + 1))
    for i in range(maps):
        graph[f"map-{i}"] = (bench_tasks.inc, "zero")
    partials = []
    for start in range(0, maps, fan_in):
        key = f"partial-{start // fan_in}"
        graph[key] = (bench_tasks.total, *[f"map-{i}" for i in range(start, min(maps, start + fan_in))])
        partials.append(key)
    graph["total"] = (bench_tasks.total, *partials)
    return graph, "total", maps


def workload_graph_vs_map(engine: Engine, size: int):
    """A no-op map of ``size`` tasks, then a reduction tree and a wide map-reduce of about ``size`` nodes each,
    in the same cluster: each graph's nodes/s as a share of the map's tasks/s, and the CPU per task of each
    process role (``tree_scheduler_us_per_task``...)."""
    metrics: Dict[str, Any] = {}
    tree, tree_root, leaves = _reduction_graph(size)
    wide, wide_root, maps = _map_reduce_graph(size)
    parts = (
        ("map", lambda: engine.map(bench_tasks.noop, range(size)) == list(range(size)), size),
        ("tree", lambda: engine.get(tree, [tree_root])[tree_root] == leaves, len(tree)),
        ("mapreduce", lambda: engine.get(wide, [wide_root])[wide_root] == maps, len(wide)),
    )
    seconds = 0.0
    for name, run, tasks in parts:
        before, start = cpu_snapshot(engine), time.perf_counter()
        _check(run(), f"{name}: wrong results")
        elapsed = time.perf_counter() - start
        seconds += elapsed
        metrics[f"{name}_per_s"] = tasks / elapsed
        for role, entry in cpu_breakdown(before, cpu_snapshot(engine), tasks).items():
            metrics[f"{name}_{role.replace(' ', '_')}_us_per_task"] = entry["cpu_us_per_task"]
    metrics["tree_vs_map"] = metrics["tree_per_s"] / metrics["map_per_s"]
    metrics["mapreduce_vs_map"] = metrics["mapreduce_per_s"] / metrics["map_per_s"]
    metrics["seconds"] = seconds
    return metrics, size + len(tree) + len(wide)


_WATCHING = {
    "off": contextlib.nullcontext,  # nothing watching
    "ui": lambda engine: engine.watched(report=False),  # a live monitor with a viewer
    "on": lambda engine: engine.watched(report=True),  # and a report open
}
MONITORED_ROUNDS = 4  # rounds of off, ui, on, on, ui, off: each gives a ratio, and the median of them is reported


def workload_monitored_map(engine: Engine, size: int):
    """In one cluster, rounds of no-op maps of ``size`` // 2 tasks: with nothing watching (off), with a live
    monitor and its viewer (ui), and with those and a report open too (on: everything that watches each task,
    `Engine.watched`), in turn and then in the reverse order (so that a drift of the machine's speed within the
    round weighs on each alike). Each round gives each mode's throughput (its ``size`` tasks over its two maps'
    time) and the watched ones' as a share of off's; reported are the median of the rounds' rates and ratios (the
    machine's load moves between rounds far more than monitoring costs: ``on_vs_off_round1``... show it), and
    the CPU per task of each process role in each mode, the median of its maps (``on_monitor_us_per_task``...)."""
    half = max(1, size // 2)
    items = list(range(half))
    rates: Dict[str, List[float]] = {name: [] for name in _WATCHING}
    cpu: Dict[str, Dict[str, List[float]]] = {name: {} for name in _WATCHING}
    ratios: Dict[str, List[float]] = {"ui": [], "on": []}
    seconds = 0.0
    for _ in range(MONITORED_ROUNDS):
        elapsed_of = {name: 0.0 for name in _WATCHING}
        for name in [*_WATCHING, *reversed(_WATCHING)]:
            with _WATCHING[name](engine):
                before, start = cpu_snapshot(engine), time.perf_counter()
                results = engine.map(bench_tasks.noop, items)
                elapsed = time.perf_counter() - start
                for role, entry in cpu_breakdown(before, cpu_snapshot(engine), half).items():
                    cpu[name].setdefault(role.replace(" ", "_"), []).append(entry["cpu_us_per_task"])
            _check(results == items, "map returned wrong results")
            elapsed_of[name] += elapsed
            seconds += elapsed
        for name, elapsed in elapsed_of.items():
            rates[name].append(2 * half / elapsed)
        for name in ratios:
            ratios[name].append(elapsed_of["off"] / elapsed_of[name])
    metrics: Dict[str, Any] = {f"{name}_per_s": statistics.median(values) for name, values in rates.items()}
    for name, values in ratios.items():
        metrics[f"{name}_vs_off"] = statistics.median(values)
    for name, values in ratios.items():
        for number, value in enumerate(values, 1):
            metrics[f"{name}_vs_off_round{number}"] = value
    metrics["seconds"] = seconds
    for name, roles in cpu.items():
        for role, values in roles.items():
            metrics[f"{name}_{role}_us_per_task"] = statistics.median(values)
        metrics[f"{name}_total_us_per_task"] = sum(statistics.median(values) for values in roles.values())
    for name in ratios:
        metrics[f"{name}_cpu_vs_off"] = metrics["off_total_us_per_task"] / metrics[f"{name}_total_us_per_task"]
    return metrics, MONITORED_ROUNDS * 2 * len(_WATCHING) * half


def workload_chain(engine: Engine, size: int):
    graph: Dict[str, Any] = {"zero": 0, "chain-0": (bench_tasks.inc, "zero")}
    for i in range(1, size):
        graph[f"chain-{i}"] = (bench_tasks.inc, f"chain-{i - 1}")
    last = f"chain-{size - 1}"
    start = time.perf_counter()
    result = engine.get(graph, [last])
    elapsed = time.perf_counter() - start
    _check(result[last] == size, f"chain end is {result[last]!r}, expected {size}")
    return {"seconds": elapsed, "nodes": len(graph), "nodes_per_s": len(graph) / elapsed}, len(graph)


def workload_queued_memory(engine: Engine, size: int):
    """Peak RSS growth of the scheduler and the client while ``size`` tasks wait behind busy workers."""
    roles = engine.processes()
    client_pids = [pid for pid, role in roles.items() if role == "client"]
    scheduler_pids = [pid for pid, role in roles.items() if role in engine.scheduler_roles]
    client_base, scheduler_base = _rss(client_pids), _rss(scheduler_pids)
    client_peak, scheduler_peak = client_base, scheduler_base
    # first occupy every worker, so all the others stay queued
    for i in range(engine.workers):
        engine.submit(bench_tasks.blocked, i)
    exhausted = threading.Event()

    def items() -> Iterator[int]:
        yield from range(size)
        exhausted.set()

    start = time.perf_counter()
    engine.submit_in_background(bench_tasks.noop, items())
    submitted_at: Optional[float] = None
    stable_since = time.perf_counter()
    last_scheduler = scheduler_base
    while True:  # bounded by the harness's run timeout while the submission goes on
        time.sleep(0.1)
        now = time.perf_counter()
        client_now, scheduler_now = _rss(client_pids), _rss(scheduler_pids)
        client_peak, scheduler_peak = max(client_peak, client_now), max(scheduler_peak, scheduler_now)
        if scheduler_now > last_scheduler + MB:
            stable_since, last_scheduler = now, scheduler_now
        if exhausted.is_set():
            if submitted_at is None:
                submitted_at = now
                stable_since = now
            elif now - stable_since >= MEMORY_SETTLE_SECONDS:
                break
        if submitted_at is not None and now > submitted_at + MEMORY_SETTLE_TIMEOUT_SECONDS:
            break
    metrics = {
        "submit_seconds": (submitted_at or time.perf_counter()) - start,
        "client_peak_mb": client_peak / MB,
        "client_bytes_per_task": (client_peak - client_base) / size,
    }
    if scheduler_pids:
        metrics["scheduler_peak_mb"] = scheduler_peak / MB
        metrics["scheduler_bytes_per_task"] = (scheduler_peak - scheduler_base) / size
    return metrics, size


def workload_executor_map(engine: Engine, size: int):
    expected = list(range(size))
    start = time.perf_counter()
    results = engine.executor_map(bench_tasks.noop, range(size), None)
    elapsed = time.perf_counter() - start
    _check(results == expected, "executor map returned wrong results")
    start = time.perf_counter()
    chunked = engine.executor_map(bench_tasks.noop, range(size), 1000)
    chunked_elapsed = time.perf_counter() - start
    _check(chunked == expected, "chunked executor map returned wrong results")
    metrics = {
        "seconds": elapsed + chunked_elapsed,
        "calls_per_s": size / elapsed,
        "chunked_calls_per_s": size / chunked_elapsed,
    }
    return metrics, 2 * size


WORKLOADS: Dict[str, Callable] = {
    "map_noop": workload_map_noop,
    "submit_gather": workload_submit_gather,
    "round_trip": workload_round_trip,
    "sleep": workload_sleep,
    "big_args": workload_big_args,
    "shared_object": workload_shared_object,
    "graph": workload_graph,
    "chain": workload_chain,
    "graph_vs_map": workload_graph_vs_map,
    "monitored_map": workload_monitored_map,
    "queued_memory": workload_queued_memory,
    "executor_map": workload_executor_map,
}


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --- runner command line -----------------------------------------------------------------------------------------


def main(engine_class: type) -> None:
    parser = argparse.ArgumentParser(description=f"run one benchmark workload on {engine_class.name}")
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("size", type=int)
    parser.add_argument("--out", required=True, help="where to write the result JSON")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    record: Dict[str, Any] = {
        "engine": engine_class.name,
        "workload": args.workload,
        "size": args.size,
        "python": platform.python_version(),
    }
    engine = engine_class(args.workers)
    try:
        record["version"] = engine.version()
        started = time.perf_counter()
        engine.start()
        engine.wait_ready()
        record["startup_seconds"] = time.perf_counter() - started
        before = cpu_snapshot(engine)
        metrics, tasks = WORKLOADS[args.workload](engine, args.size)
        after = cpu_snapshot(engine)
        record["status"] = "ok"
        record["metrics"] = {
            key: round(value, 6) if isinstance(value, float) else value for key, value in metrics.items()
        }
        record["cpu"] = cpu_breakdown(before, after, tasks)
    except Unsupported as error:
        record["status"] = "unsupported"
        record["detail"] = str(error)
    except BaseException as error:  # recorded, so one failing engine does not stop the run
        record["status"] = "error"
        record["detail"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
    finally:
        stop_started = time.perf_counter()
        try:
            engine.stop()
        except BaseException as error:
            record.setdefault("detail", f"stop failed: {type(error).__name__}: {error}")
        record["stop_seconds"] = time.perf_counter() - stop_started
        with open(args.out, "w") as file:
            json.dump(record, file)
        sys.stdout.flush()
    # threads blocked on a dead cluster must not keep the runner alive
    os._exit(0)
