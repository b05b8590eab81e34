"""`Client.scheduler_info()`: what the scheduler answers of itself (`SchedulerInfo`, protocol 1.8), as the plain
dict a Dask user reads (``len(client.scheduler_info()["workers"])``)."""

from __future__ import annotations

from typing import Any, Dict

from scaler.protocol.ids import show
from scaler.protocol.messages import SchedulerInfo, WorkerSnapshot
from scaler.protocol.version import show_version


def info_dict(info: SchedulerInfo, address: str, protocol: Any) -> Dict[str, Any]:
    """The scheduler at ``address`` (of protocol version ``protocol``) as ``info`` says, in plain values.

    ``workers`` maps each worker's ID to what the scheduler knows of it (its host, pid, capabilities, the tasks
    it holds, its processes' CPU and memory from its last heartbeat); ``tasks`` counts the scheduler's tasks by
    state; ``clients`` is how many clients it serves; the task and memory quotas are each client's.
    """
    snapshot = info.snapshot
    return {
        "type": "Scheduler",
        "address": address,
        "protocol_version": show_version(protocol),
        "monitor_address": info.monitor_address,
        "dashboard_link": info.dashboard_link or None,
        "clients": snapshot.clients,
        "tasks": {counter.name: counter.value for counter in snapshot.task_states},
        "client_task_quota": snapshot.client_task_quota,
        "client_memory_quota": snapshot.client_memory_quota,
        "workers": {show(worker.worker_id): _worker(worker) for worker in snapshot.workers},
        "worker_managers": [show(manager.manager_id) for manager in snapshot.managers],
    }


def _worker(worker: WorkerSnapshot) -> Dict[str, Any]:
    _, host, pid, _ = (show(worker.worker_id).split("|") + ["", "", "", ""])[:4]
    heartbeat = worker.heartbeat
    return {
        "id": show(worker.worker_id),
        "host": host,
        "pid": int(pid) if pid.isdigit() else None,
        "capabilities": {capability.name: capability.value for capability in worker.capabilities},
        "tasks": worker.assigned_tasks,
        "running": heartbeat.running_tasks,
        "queued": heartbeat.queued_tasks,
        "slots": worker.slots,
        "cpu": heartbeat.agent_cpu + heartbeat.processor_cpu,
        "memory_bytes": heartbeat.agent_rss_bytes + heartbeat.processor_rss_bytes,
        "memory_limit_bytes": heartbeat.memory_limit_bytes or None,
        "group": show(worker.group_id) if worker.group_id else None,
        "draining": worker.draining,
        "last_seen_seconds_ago": worker.last_seen_seconds_ago,
    }
