"""A scheduler's `StateSnapshot` as Prometheus metrics, for ``scaler_ui``'s ``/metrics`` and the scheduler's own
``--metrics-port``, so both expose the same names (listed in docs/monitoring.md).

Needs ``prometheus_client`` (the extra ``scaler-protocol[metrics]``); nothing else in scaler-protocol imports
this module. Everything is read from the latest snapshot when Prometheus scrapes: no metric is updated on the
scheduler's path of a task.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scaler.protocol import messages as m
from scaler.protocol.ids import show

NAMESPACE = "scaler"
# the task states whose snapshot counter is a total since the scheduler started; the others count tasks now
FINISHED_STATES = ("success", "failed", "cancelled", "rejected")


class FunctionTotals:
    """Per function, what every worker ran, summed: the workers still connected (their last heartbeat's totals)
    plus those gone (their last totals seen here), so a total never goes down when a worker leaves."""

    def __init__(self) -> None:
        self._current: Dict[bytes, Dict[str, m.FunctionStats]] = {}
        self._gone: Dict[str, m.FunctionStats] = {}

    def update(self, snapshot: m.StateSnapshot) -> None:
        current = {w.worker_id: {f.name: f for f in w.heartbeat.functions} for w in snapshot.workers}
        for worker_id, functions in self._current.items():
            if worker_id not in current:
                for stats in functions.values():
                    _add(self._gone, stats)
        self._current = current

    def totals(self) -> Dict[str, m.FunctionStats]:
        totals = {name: m.FunctionStats(name, s.succeeded, s.failed, s.seconds) for name, s in self._gone.items()}
        for functions in self._current.values():
            for stats in functions.values():
                _add(totals, stats)
        return totals


def _add(totals: Dict[str, m.FunctionStats], stats: m.FunctionStats) -> None:
    total = totals.get(stats.name)
    if total is None:
        totals[stats.name] = m.FunctionStats(stats.name, stats.succeeded, stats.failed, stats.seconds)
    else:
        total.succeeded += stats.succeeded
        total.failed += stats.failed
        total.seconds += stats.seconds


def tasks_received(snapshot: m.StateSnapshot) -> int:
    """Tasks the scheduler received since it started: every task is counted in exactly one state."""
    return sum(counter.value for counter in snapshot.task_states)


def metric_families(snapshot: m.StateSnapshot, functions: Mapping[str, m.FunctionStats]) -> Iterator[Metric]:
    """Every metric of one snapshot (and the per-function totals that go with it)."""

    def gauge(name: str, documentation: str, labels: Tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=labels)

    def counter(name: str, documentation: str, labels: Tuple[str, ...] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=labels)

    tasks = gauge("tasks", "Tasks in the scheduler now, by state (queued: the scheduler's queue depth)", ("state",))
    finished = counter("tasks_finished", "Tasks that reached a final state since the scheduler started", ("state",))
    for state in snapshot.task_states:
        (finished if state.name in FINISHED_STATES else tasks).add_metric([state.name], state.value)
    yield tasks
    yield finished
    yield _value(counter("tasks_received", "Tasks the scheduler received since it started"), tasks_received(snapshot))
    yield _by_name(counter("messages_sent", "Messages the scheduler sent, by type", ("type",)), snapshot.messages_sent)
    yield _by_name(
        counter("messages_received", "Messages the scheduler received, by type", ("type",)), snapshot.messages_received
    )
    yield _value(gauge("workers", "Workers connected to the scheduler"), len(snapshot.workers))
    yield _value(gauge("clients", "Clients connected to the scheduler"), snapshot.clients)
    yield _value(gauge("scheduler_cpu_usage_ratio", "Scheduler CPU use (1 = one core)"), snapshot.scheduler_cpu / 100)
    yield _value(gauge("scheduler_resident_memory_bytes", "Scheduler resident memory"), snapshot.scheduler_rss_bytes)

    per_worker = {
        "agent_cpu_usage_ratio": ("Worker agent CPU use (1 = one core)", lambda w: w.heartbeat.agent_cpu / 100),
        "agent_resident_memory_bytes": ("Worker agent resident memory", lambda w: w.heartbeat.agent_rss_bytes),
        "processor_cpu_usage_ratio": (
            "CPU use of the worker's processors, which run the tasks (1 = one core)",
            lambda w: w.heartbeat.processor_cpu / 100,
        ),
        "processor_resident_memory_bytes": (
            "Resident memory of the worker's processors",
            lambda w: w.heartbeat.processor_rss_bytes,
        ),
        "memory_limit_bytes": (
            "The worker's memory limit (its processor and the processes it starts; 0: none)",
            lambda w: w.heartbeat.memory_limit_bytes,
        ),
        "slots": ("Tasks the worker runs at once", lambda w: w.slots),
        "assigned_tasks": ("Tasks the scheduler assigned to the worker and it holds", lambda w: w.assigned_tasks),
        "queued_tasks": ("Tasks waiting at the worker", lambda w: w.heartbeat.queued_tasks),
        "running_tasks": ("Tasks running on the worker", lambda w: w.heartbeat.running_tasks),
        "suspended_tasks": ("Tasks waiting for tasks they submitted", lambda w: w.heartbeat.suspended_tasks),
        "last_seen_seconds": ("Seconds since the worker was last heard from", lambda w: w.last_seen_seconds_ago),
    }  # fmt: skip
    for name, (documentation, value) in per_worker.items():
        family = gauge(f"worker_{name}", documentation, ("worker",))
        for worker in snapshot.workers:
            family.add_metric([show(worker.worker_id)], value(worker))
        yield family
    kills = counter("worker_memory_kills", "Tasks the worker stopped for going over its memory limit", ("worker",))
    for worker in snapshot.workers:
        kills.add_metric([show(worker.worker_id)], worker.heartbeat.memory_kills)
    yield kills

    client_tasks = gauge("client_tasks", "Tasks of the client in the scheduler (not finished)", ("client",))
    for client in snapshot.client_snapshots:
        client_tasks.add_metric([show(client.client_id)], client.tasks)
    yield client_tasks

    runs = counter("function_runs", "Task runs on the workers, by function and outcome", ("function", "outcome"))
    seconds = counter("function_run_seconds", "Wall time of task runs on the workers, by function", ("function",))
    for name, stats in sorted(functions.items()):
        runs.add_metric([name, "succeeded"], stats.succeeded)
        runs.add_metric([name, "failed"], stats.failed)
        seconds.add_metric([name], stats.seconds)
    yield runs
    yield seconds


def _by_name(family: Metric, counters: Sequence[m.Counter]) -> Metric:
    for item in counters:
        family.add_metric([item.name], item.value)  # type: ignore[attr-defined]
    return family


def _value(family: Metric, value: float) -> Metric:
    family.add_metric([], value)  # type: ignore[attr-defined]
    return family


class SnapshotCollector(Collector):
    """A prometheus_client collector of the latest snapshot: ``source()`` returns it with its per-function totals,
    or None before the first one (then nothing is exposed)."""

    def __init__(self, source: Callable[[], Optional[Tuple[m.StateSnapshot, Mapping[str, m.FunctionStats]]]]):
        self._source = source

    def collect(self) -> Iterator[Metric]:
        latest = self._source()
        if latest is not None:
            yield from metric_families(*latest)


def snapshot_registry(collector: SnapshotCollector, with_process: bool = False) -> CollectorRegistry:
    """A registry of ``collector``; ``with_process`` adds prometheus_client's ``process_*`` metrics of this
    process (for the scheduler's own endpoint, where this process is the scheduler)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if with_process:
        ProcessCollector(registry=registry)
    return registry


class MetricsServer:
    """prometheus_client's HTTP server for one registry, on a thread of its own; `close` stops it."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port: int = self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
