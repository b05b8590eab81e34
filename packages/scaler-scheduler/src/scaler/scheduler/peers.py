"""What the scheduler keeps about each connected worker and client."""

from __future__ import annotations

from typing import Dict, Set

from scaler.protocol import messages as m
from scaler.protocol.security import Credential
from scaler.protocol.version import RECONCILING_VERSION, knows

DEFAULT_QUEUE_CAPACITY = 1000


class Worker:
    __slots__ = (
        "worker_id", "info", "hostname", "pid", "tasks", "last_seen", "heartbeat", "capacity", "capabilities",
        "balance_pending", "waiting", "credential", "reconciles", "batch_sequence", "group_id", "draining",
    )  # fmt: skip
    role = m.PeerRole.WORKER

    def __init__(self, worker_id: bytes, hello: m.Hello, now: float, credential: Credential) -> None:
        self.worker_id = worker_id
        self.credential = credential  # the key it said Hello with: its messages must come with that key
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
        # its heartbeats say what it holds (protocol 1.5): the scheduler checks them against `tasks`
        self.reconciles = knows(hello.version, RECONCILING_VERSION)
        self.batch_sequence = 0  # of the last TaskBatch sent to it
        self.waiting: Set[bytes] = set()  # of its tasks, those that wait for tasks they submitted (no room held)
        self.group_id = hello.worker_info.group_id  # the worker group a manager started it in (b"": none)
        self.draining = False  # its group is drained before it stops: it takes no new task (capacity 0)

    @property
    def load(self) -> int:
        """The tasks it holds that take room: queued there or running, not waiting."""
        return len(self.tasks) - len(self.waiting)


class Client:
    __slots__ = ("client_id", "tasks", "last_seen", "heartbeat", "credential", "reads_output")
    role = m.PeerRole.CLIENT

    def __init__(self, client_id: bytes, now: float, credential: Credential, reads_output: bool = True) -> None:
        self.client_id = client_id
        self.credential = credential  # the key it said Hello with: its messages must come with that key
        self.reads_output = reads_output  # its protocol version knows TaskOutputBatch
        self.tasks: Set[bytes] = set()  # its tasks the scheduler holds
        self.last_seen = now
        self.heartbeat = m.ClientHeartbeat()  # the last one, for monitors
