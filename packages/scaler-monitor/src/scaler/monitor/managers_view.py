"""What monitors show of worker managers (protocol 1.6): each manager, with the scheduler's target, and each of
its groups, with the workers of it that are connected and the tasks they hold (from the snapshot's workers)."""

from __future__ import annotations

from typing import Any, Dict, List

from scaler.protocol.ids import show, show_group
from scaler.protocol.messages import StateSnapshot, WorkerGroupState


def manager_rows(snapshot: StateSnapshot) -> List[Dict[str, Any]]:
    return [
        {
            "manager": show(manager.manager_id),
            "kind": manager.heartbeat.kind,
            "groups": len(manager.heartbeat.groups),
            "target": manager.desired_groups,
            "max_groups": manager.heartbeat.max_groups,
            "workers_per_group": manager.heartbeat.workers_per_group,
            "capabilities": ",".join(f"{c.name}={c.value}" for c in manager.heartbeat.capabilities),
            "last_seen_seconds": manager.last_seen_seconds_ago,
        }
        for manager in snapshot.managers
    ]


def group_rows(snapshot: StateSnapshot) -> List[Dict[str, Any]]:
    workers: Dict[bytes, List[Any]] = {}
    for worker in snapshot.workers:
        if worker.group_id:
            workers.setdefault(worker.group_id, []).append(worker)
    rows = []
    for manager in snapshot.managers:
        draining = set(manager.draining_groups)
        for group in manager.heartbeat.groups:
            members = workers.get(group.group_id, [])
            state = WorkerGroupState(group.state).name.lower()
            rows.append({
                "group": show_group(group.group_id),
                "manager": show(manager.manager_id),
                "state": f"{state}, draining" if group.group_id in draining and state != "stopping" else state,
                "workers": len(members),
                "expected_workers": group.workers,
                "tasks": sum(w.assigned_tasks for w in members),
                "detail": group.detail,
            })  # fmt: skip
    return rows
