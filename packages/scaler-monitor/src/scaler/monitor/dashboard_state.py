"""What the web monitor shows, computed from the snapshots it receives (no I/O: `scaler_ui` feeds it).

Each snapshot becomes one point of the charts (rates of tasks received, succeeded and failed per second from
the scheduler's totals, queue depth, workers, scheduler CPU and memory), kept for the last `HISTORY_POINTS`
snapshots, and the tables of the page (workers, worker managers and their groups, clients, functions, task states,
messages), all as plain JSON-ready values. The task runs the snapshots carry go to the task log (`task_log.py`:
the task stream, the task table, the progress per function); what happened at the scheduler to the events log
(the last `EVENTS_KEPT`); the storage server's summary becomes the objects view.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple

from scaler.monitor.managers_view import group_rows, manager_rows
from scaler.monitor.task_log import ARRIVED_SHOWN, WINDOW_RUNS, TaskLog
from scaler.protocol.ids import show
from scaler.protocol.messages import FunctionStats, StateSnapshot
from scaler.protocol.snapshot_metrics import FunctionTotals, tasks_received
from scaler.protocol.task_chart import compact

HISTORY_POINTS = 600  # ten minutes of chart at one snapshot per second
EVENTS_KEPT = 1_000
EVENTS_SHOWN = 200


def _counters(snapshot_counters) -> Dict[str, int]:
    return {counter.name: counter.value for counter in snapshot_counters}


class DashboardState:
    """The latest snapshot, the chart history and the per-function totals of one monitor address."""

    def __init__(self, address: str, history_points: int = HISTORY_POINTS) -> None:
        self.address = address
        self.history: Deque[Dict[str, float]] = collections.deque(maxlen=history_points)
        self.snapshot: Optional[StateSnapshot] = None
        self.functions = FunctionTotals()
        self._function_totals: Dict[str, FunctionStats] = {}
        self._previous: Optional[Tuple[float, Dict[str, int]]] = None  # (time, totals) of the last snapshot
        self.tasks = TaskLog()
        self.events: Deque[Dict[str, Any]] = collections.deque(maxlen=EVENTS_KEPT)
        self._now = 0.0  # when the last snapshot came
        self.page_json = json.dumps(self.page())  # the page state, encoded once per snapshot for every viewer

    def on_snapshot(self, snapshot: StateSnapshot, now: float) -> Dict[str, float]:
        """Take a snapshot received at ``now`` (seconds since the epoch); return its chart point."""
        states = _counters(snapshot.task_states)
        totals = {
            "received": tasks_received(snapshot),
            "succeeded": states.get("success", 0),
            "failed": states.get("failed", 0) + states.get("rejected", 0),
        }
        rates = dict.fromkeys(totals, 0.0)
        if self._previous is not None:
            then, before = self._previous
            elapsed = now - then
            if elapsed > 0:
                for name, total in totals.items():
                    # a total that went down is a restarted scheduler: no rate for that step
                    rates[name] = max(0, total - before[name]) / elapsed
        self._previous = (now, totals)
        point = {
            "time": now,
            "received_per_second": rates["received"],
            "succeeded_per_second": rates["succeeded"],
            "failed_per_second": rates["failed"],
            "queued": states.get("queued", 0),
            "workers": len(snapshot.workers),
            "scheduler_cpu": snapshot.scheduler_cpu,
            "scheduler_rss_bytes": snapshot.scheduler_rss_bytes,
        }
        self.history.append(point)
        self.snapshot = snapshot
        self._now = now
        self.tasks.on_snapshot(snapshot, now)
        for event in snapshot.events:
            subject = show(event.subject) if event.subject else ""
            self.events.append({"time": now - event.seconds_ago, "kind": event.kind, "subject": subject,
                                "text": event.text})  # fmt: skip
        self.functions.update(snapshot)
        self._function_totals = self.functions.totals()
        self.page_json = json.dumps(self.page())
        return point

    @property
    def metrics_source(self) -> Optional[Tuple[StateSnapshot, Mapping[str, FunctionStats]]]:
        """What `scaler.protocol.snapshot_metrics.SnapshotCollector` exposes."""
        if self.snapshot is None:
            return None
        return self.snapshot, self._function_totals

    def page(self) -> Dict[str, Any]:
        """Everything the page shows of the latest snapshot (its chart point is the last of `history`)."""
        snapshot = self.snapshot
        if snapshot is None:
            return {"address": self.address, "snapshot": None}
        return {
            "address": self.address,
            "snapshot": {
                "point": self.history[-1] if self.history else None,
                "scheduler": {
                    "cpu": snapshot.scheduler_cpu,
                    "rss_bytes": snapshot.scheduler_rss_bytes,
                    "clients": snapshot.clients,
                    "workers": len(snapshot.workers),
                    "client_task_quota": snapshot.client_task_quota,
                    "client_memory_quota": snapshot.client_memory_quota,
                },
                "tasks_received": tasks_received(snapshot),
                "task_states": _counters(snapshot.task_states),
                "messages_sent": _counters(snapshot.messages_sent),
                "messages_received": _counters(snapshot.messages_received),
                "workers": [_worker(worker) for worker in snapshot.workers],
                "clients": [_client(client) for client in snapshot.client_snapshots],
                "functions": [_function(stats) for stats in self._function_totals.values()],
                "managers": manager_rows(snapshot),
                "groups": group_rows(snapshot),
                "stream": compact(self.tasks.arrived, self._now, ARRIVED_SHOWN),
                "running": compact(self.tasks.current, self._now),
                "progress": self.tasks.progress(),
                "tasks_kept": self.tasks.kept,
                "tasks_seen": self.tasks.ended_total,
                "events": list(self.events)[: -EVENTS_SHOWN - 1 : -1],  # newest first
                "objects": _objects(snapshot),
            },
        }

    def stream_window(self) -> Dict[str, Any]:
        """The task stream of the last minutes, for a page that opens."""
        return compact(self.tasks.window(self._now), self._now, WINDOW_RUNS)


def _worker(worker) -> Dict[str, Any]:
    beat = worker.heartbeat
    return {
        "worker": show(worker.worker_id),
        "agent_cpu": beat.agent_cpu,
        "agent_rss_bytes": beat.agent_rss_bytes,
        "cpu": beat.processor_cpu,
        "rss_bytes": beat.processor_rss_bytes,
        "slots": worker.slots,
        "assigned": worker.assigned_tasks,
        "queued": beat.queued_tasks,
        "running": beat.running_tasks,
        "suspended": beat.suspended_tasks,
        "capabilities": ",".join(f"{c.name}={c.value}" for c in worker.capabilities),
        "last_seen_seconds": worker.last_seen_seconds_ago,
    }


def _client(client) -> Dict[str, Any]:
    beat = client.heartbeat
    return {
        "client": show(client.client_id),
        "tasks": client.tasks,
        "stored_bytes": client.stored_bytes,
        "pending": beat.pending_tasks,
        "cpu": beat.cpu * 100,  # the client reports a fraction of one core
        "rss_bytes": beat.rss_bytes,
        "last_seen_seconds": client.last_seen_seconds_ago,
    }


def _function(stats: FunctionStats) -> Dict[str, Any]:
    runs = stats.succeeded + stats.failed
    return {
        "function": stats.name,
        "succeeded": stats.succeeded,
        "failed": stats.failed,
        "mean_seconds": stats.seconds / runs if runs else 0.0,
    }


def _objects(snapshot: StateSnapshot) -> Dict[str, Any]:
    """The objects view: what each client's objects take in the storage server, in its memory and spilled to disk;
    the largest objects, and where each is; the totals, as the storage server counts them (the clients' sums before
    its first summary)."""
    owners: List[Dict[str, Any]] = [
        {
            "owner": show(client.client_id),
            "bytes": client.stored_bytes,
            "memory_bytes": client.stored_bytes - client.spilled_bytes,
            "spilled_bytes": client.spilled_bytes,
        }
        for client in snapshot.client_snapshots
        if client.stored_bytes
    ]
    summary = snapshot.object_summary
    spilled = summary.largest_spilled or [False] * len(summary.largest_ids)
    largest = [
        {"object": object_id.hex(), "owner": show(owner), "bytes": size, "spilled": on_disk}
        for object_id, owner, size, on_disk in zip(
            summary.largest_ids, summary.largest_owners, summary.largest_sizes, spilled, strict=False
        )
    ]
    if summary.memory_bytes or summary.spilled_bytes:
        memory, on_disk = summary.memory_bytes, summary.spilled_bytes
    else:
        memory = sum(owner["memory_bytes"] for owner in owners)
        on_disk = sum(owner["spilled_bytes"] for owner in owners)
    return {
        "owners": owners, "largest": largest, "bytes": memory + on_disk, "memory_bytes": memory,
        "spilled_bytes": on_disk,
    }  # fmt: skip
