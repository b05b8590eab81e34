"""What the scheduler keeps about each connected worker and client."""

from __future__ import annotations

from typing import Dict, Set

from scaler.protocol import messages as m

DEFAULT_QUEUE_CAPACITY = 1000
RECONCILING_MINOR = 3  # workers of protocol 1.3 on report what they hold


class Worker:
    __slots__ = (
        "worker_id", "info", "hostname", "pid", "tasks", "last_seen", "heartbeat", "capacity", "capabilities",
        "balance_pending", "reconciles", "batch_sequence",
    )  # fmt: skip

    def __init__(self, worker_id: bytes, hello: m.Hello, now: float) -> None:
        self.worker_id = worker_id
        self.info = hello.worker_info
        self.hostname = hello.hostname
        self.pid = hello.pid
        # the tasks it holds, each with the sequence of the TaskBatch it was sent in (in the order sent)
        self.tasks: Dict[bytes, int] = {}
        self.last_seen = now
        self.heartbeat = m.WorkerHeartbeat()
        self.capacity = max(1, hello.worker_info.queue_capacity or DEFAULT_QUEUE_CAPACITY)
        self.capabilities = frozenset(c.name for c in hello.worker_info.capabilities)
        self.balance_pending = False  # a BalanceRequest awaits its BalanceResponse
        # its heartbeats say what it holds (protocol 1.3): the scheduler checks them against `tasks`
        self.reconciles = hello.version.minor >= RECONCILING_MINOR
        self.batch_sequence = 0  # of the last TaskBatch sent to it


class Client:
    __slots__ = ("client_id", "tasks", "last_seen", "heartbeat")

    def __init__(self, client_id: bytes, now: float) -> None:
        self.client_id = client_id
        self.tasks: Set[bytes] = set()  # its tasks the scheduler holds
        self.last_seen = now
        self.heartbeat = m.ClientHeartbeat()  # the last one, for monitors
