"""What the scheduler keeps about each connected worker and client, and when it forgets a silent one."""

from __future__ import annotations

import heapq
from typing import Any, Dict, List, Mapping, Set, Tuple

from scaler.protocol import messages as m
from scaler.protocol.security import Credential
from scaler.protocol.version import RECONCILING_VERSION, WORKER_CALLS_VERSION, knows

DEFAULT_QUEUE_CAPACITY = 1000


class Worker:
    __slots__ = (
        "worker_id", "info", "hostname", "pid", "tasks", "last_seen", "heartbeat", "capacity", "capabilities",
        "balance_pending", "waiting", "credential", "reconciles", "batch_sequence", "group_id", "draining",
        "digest", "filed_load", "filed_with_room", "delegation_key", "takes_calls",
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
        self.digest = 0  # of `tasks` (held_tasks.task_term of each, XORed), kept as they come and go
        self.last_seen = now
        self.heartbeat = m.WorkerHeartbeat()
        self.capacity = max(1, hello.worker_info.queue_capacity or DEFAULT_QUEUE_CAPACITY)
        self.capabilities = frozenset(c.name for c in hello.worker_info.capabilities)
        self.balance_pending = False  # a BalanceRequest awaits its BalanceResponse
        # its heartbeats say what it holds (protocol 1.5): the scheduler checks them against `tasks`
        self.reconciles = knows(hello.version, RECONCILING_VERSION)
        self.takes_calls = knows(hello.version, WORKER_CALLS_VERSION)  # Client.upload_file, run, restart (1.8)
        self.batch_sequence = 0  # of the last TaskBatch sent to it
        self.waiting: Set[bytes] = set()  # of its tasks, those that wait for tasks they submitted (no room held)
        self.group_id = hello.worker_info.group_id  # the worker group a manager started it in (b"": none)
        self.draining = False  # its group is drained before it stops: it takes no new task (capacity 0)
        self.filed_load = 0  # where `worker_loads.WorkerLoads` filed it: under this load,
        self.filed_with_room = False  # and among the workers with room or not
        # what the Clients made in its tasks prove their task with (1.8, scaler.protocol.delegation); b"": none
        self.delegation_key = hello.worker_info.delegation_key

    @property
    def load(self) -> int:
        """The tasks it holds that take room: queued there or running, not waiting."""
        return len(self.tasks) - len(self.waiting)


class Client:
    __slots__ = (
        "client_id", "tasks", "queued", "last_seen", "heartbeat", "credential", "reads_output", "scope", "reconnect",
        "resent", "away_until",
    )  # fmt: skip
    role = m.PeerRole.CLIENT

    def __init__(
        self, client_id: bytes, now: float, credential: Credential, reads_output: bool = True, scope: bytes = b"",
        reconnect: float = 0.0,
    ) -> None:  # fmt: skip
        self.client_id = client_id
        # whose objects its tasks read: its own, or (a Client made inside a task) those of the client it stands for
        self.scope = scope or client_id
        self.credential = credential  # the key it said Hello with: its messages must come with that key
        self.reads_output = reads_output  # its protocol version knows TaskOutputBatch
        self.tasks: Set[bytes] = set()  # its tasks the scheduler holds
        self.queued = 0  # of them, those of its own batches (not graph nodes) queued here: its quota counts these
        self.last_seen = now
        self.heartbeat = m.ClientHeartbeat()  # the last one, for monitors
        self.reconnect = reconnect  # how long it waits for a lost scheduler (Hello.reconnectSeconds, 1.8; 0: not)
        self.resent = False  # its first heartbeat since its Hello came: it sent again all it waits for
        self.away_until = 0.0  # its connection closed: kept until then for it to come back (0: connected)


class Silence:
    """When each peer of one kind (workers or clients) falls silent for longer than ``timeout``, found without a
    scan: a heap of (deadline, peer ID), one entry per peer. An entry that comes due is checked against the
    peer's last message (``last_seen``, set by the core at every message) and pushed again if the peer spoke
    since: a peer costs one heap operation per timeout period, never one per message."""

    __slots__ = ("timeout", "_deadlines", "_watched")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._deadlines: List[Tuple[float, bytes]] = []
        self._watched: Set[bytes] = set()  # peer IDs with an entry

    def watch(self, peer_id: bytes, now: float) -> None:
        """``peer_id`` said Hello (an entry of an earlier peer under that ID serves it too)."""
        if peer_id not in self._watched:
            self._watched.add(peer_id)
            heapq.heappush(self._deadlines, (now + self.timeout, peer_id))

    def silent(self, peers: Mapping[bytes, Any], now: float) -> List[Any]:
        """The peers of ``peers`` silent for longer than the timeout at ``now``."""
        deadlines = self._deadlines
        found = []
        while deadlines and deadlines[0][0] < now:
            _, peer_id = heapq.heappop(deadlines)
            peer = peers.get(peer_id)
            if peer is None:  # gone: its entry goes too
                self._watched.discard(peer_id)
            elif now - peer.last_seen > self.timeout:
                self._watched.discard(peer_id)
                found.append(peer)
            else:
                heapq.heappush(deadlines, (peer.last_seen + self.timeout, peer_id))
        return found
