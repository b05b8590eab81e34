"""The scheduler's state as monitors see it: a `StateSnapshot`, made once a second while someone watches
(`Monitoring`)."""

from __future__ import annotations

from collections import Counter
from typing import Dict, Tuple

from scaler.protocol import messages as m
from scaler.scheduler.monitor_events import MonitorEvents
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client, Worker
from scaler.scheduler.scheduler_events import Publish, Send
from scaler.scheduler.storage_link import StorageLink
from scaler.scheduler.task_lifecycle import TaskState
from scaler.scheduler.task_routing import TaskRouting
from scaler.scheduler.task_stream import TaskStream
from scaler.scheduler.worker_managers import WorkerManagers

SNAPSHOT_SECONDS = 1.0  # the monitor's snapshot period, while someone is subscribed


def state_snapshot(
    workers: Dict[bytes, Worker], clients: Dict[bytes, Client], counts: Counter,
    stored: Tuple[Dict[bytes, int], Dict[bytes, int]], now: float,
) -> m.StateSnapshot:  # fmt: skip
    """Workers, clients (with what their objects take in storage, and of that what is spilled to disk: ``stored``)
    and task counts (the shell adds the process's CPU, memory and message counts)."""
    in_storage, spilled = stored
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
        m.ClientSnapshot(
            c.client_id, c.heartbeat, len(c.tasks), now - c.last_seen,
            in_storage.get(c.client_id, 0), spilled.get(c.client_id, 0),
        )
        for c in clients.values()
    ]  # fmt: skip
    states = [m.Counter(state.value, max(0, counts[state])) for state in TaskState]
    return m.StateSnapshot(
        task_states=states, workers=worker_snapshots, clients=len(clients), client_snapshots=client_snapshots
    )


class Monitoring:
    """What monitors and performance reports see of the scheduler: a snapshot each second while a monitor
    subscribes (always, with ``every_second``: --metrics-port), with the task runs the workers record meanwhile
    (`TaskStream`, which also serves clients' performance reports) and what happened (`MonitorEvents`, where the
    core, the task routing and the worker managers note it)."""

    def __init__(
        self, workers: Dict[bytes, Worker], clients: Dict[bytes, Client], routing: TaskRouting,
        storage: StorageLink, managers: WorkerManagers, every_second: bool, client_task_quota: int,
    ) -> None:  # fmt: skip
        self._workers, self._clients, self._routing, self._storage = workers, clients, routing, storage
        self._managers = managers
        self._every_second = every_second
        self._client_task_quota = client_task_quota
        self.events = routing.events = managers.events = MonitorEvents()
        self.stream = TaskStream(lambda client_id: getattr(clients.get(client_id), "scope", client_id))
        self._subscribers = 0
        self._next_snapshot = 0.0

    def on_subscription(self, change: int, out: Outbox) -> None:
        self._subscribers = max(0, self._subscribers + change)
        self.stream.watching = self.events.watching = self._subscribers > 0
        self._tell_recording(out)

    def on_worker_hello(self, worker_id: bytes, out: Outbox) -> None:
        if self.stream.recording:  # it records from its first task on, not from its first heartbeat's echo
            out.sends.append(Send(worker_id, m.WorkerHeartbeatEcho(record_tasks=True)))

    def on_client_heartbeat(self, source: bytes, message: m.ClientHeartbeat, now: float, out: Outbox) -> None:
        """Its echo: whether a monitor watches, and the runs of its performance report (if it has one open)."""
        self.stream.on_client_heartbeat(source, message)
        self._tell_recording(out)
        out.sends.append(Send(source, self.stream.client_echo(source, now)))

    def forget_client(self, client_id: bytes, out: Outbox) -> None:
        self.stream.forget_client(client_id)
        self._tell_recording(out)

    def _tell_recording(self, out: Outbox) -> None:
        """Whether workers record task runs, or whether a monitor watches, changed: every peer is told at once
        (a client whose HelloAck waits for its admission learns it from its first echo: nothing precedes a
        HelloAck)."""
        if self.stream.changed():
            self._routing.recording = self.stream.recording
            greeted = [client_id for client_id in self._clients if self._storage.acknowledged(client_id)]
            out.sends.extend(self.stream.announcements(self._workers, greeted))

    def snapshot_for(self, client_id: bytes, now: float) -> m.StateSnapshot:
        """The state a client may see (`SchedulerInfo`): workers, worker managers, task counts and quotas; of the
        clients, their number and only that one."""
        storage = self._storage
        stored = (storage.stored_bytes, storage.spilled_bytes)
        own = {client_id: self._clients[client_id]}
        snapshot = state_snapshot(self._workers, own, self._routing.state_counts, stored, now)
        snapshot.clients = len(self._clients)
        snapshot.managers = self._managers.snapshots(now)
        snapshot.client_task_quota = self._client_task_quota
        snapshot.client_memory_quota = storage.client_memory_quota
        return snapshot

    def on_tick(self, now: float, out: Outbox) -> None:
        """The snapshot, when one is due."""
        watched = self._subscribers > 0
        if not (watched or self._every_second) or now < self._next_snapshot:
            return
        self._next_snapshot = now + SNAPSHOT_SECONDS
        storage = self._storage
        stored = (storage.stored_bytes, storage.spilled_bytes)
        snapshot = state_snapshot(self._workers, self._clients, self._routing.state_counts, stored, now)
        snapshot.managers = self._managers.snapshots(now)
        snapshot.client_task_quota = self._client_task_quota
        snapshot.client_memory_quota = storage.client_memory_quota
        self.stream.fill_snapshot(snapshot, now)
        snapshot.events = self.events.take(now)
        snapshot.object_summary = storage.object_summary
        storage.ask_usage(list(self._clients), out)  # for the next one
        if watched:
            storage.ask_summary(out)
        out.sends.append(Publish(snapshot, watched))
