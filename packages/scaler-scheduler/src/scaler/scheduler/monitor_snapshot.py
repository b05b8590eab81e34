"""The scheduler's state as monitors see it: a `StateSnapshot`, made once a second while someone watches."""

from __future__ import annotations

from collections import Counter
from typing import Dict

from scaler.protocol import messages as m
from scaler.scheduler.peers import Client, Worker
from scaler.scheduler.task_lifecycle import TaskState


def state_snapshot(
    workers: Dict[bytes, Worker], clients: Dict[bytes, Client], counts: Counter, stored: Dict[bytes, int], now: float
) -> m.StateSnapshot:
    """Workers, clients (with what their objects take in storage: ``stored``) and task counts (the shell adds the
    process's CPU, memory and message counts)."""
    worker_snapshots = [
        m.WorkerSnapshot(
            worker_id=w.worker_id,
            heartbeat=w.heartbeat,
            slots=w.info.slots,
            assigned_tasks=len(w.tasks),
            capabilities=list(w.info.capabilities),
            last_seen_seconds_ago=now - w.last_seen,
            group_id=w.group_id,
            draining=w.draining,
        )
        for w in workers.values()
    ]
    client_snapshots = [
        m.ClientSnapshot(c.client_id, c.heartbeat, len(c.tasks), now - c.last_seen, stored.get(c.client_id, 0))
        for c in clients.values()
    ]
    states = [m.Counter(state.value, max(0, counts[state])) for state in TaskState]
    return m.StateSnapshot(
        task_states=states, workers=worker_snapshots, clients=len(clients), client_snapshots=client_snapshots
    )
