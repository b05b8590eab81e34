"""The scheduler core under random interleavings of everything its peers and its shell can tell it.

Several clients submit batches (some with retries, some with queue timeouts), cancel, clear and leave (or
fall silent, or their connection closes); workers join, answer with results of the attempt they hold or of
an old one, fail, die, confirm cancels (asked for or not), give tasks back, lose tasks without a word, leave,
fall silent or lose their connection; task batches reach a worker late (its heartbeats cross them), and its
heartbeats say truthfully what it holds; the shell reports tasks it cannot encode; time passes in ticks;
the messages of clients and workers reach the core one by one, or several at a time in a `Burst` (read
together by the shell, with more waiting or not). Then the workers do their work until nothing is left.
Whatever happened:

- every task ends in exactly one terminal state (the core's counts) and the core holds nothing;
- a task's client is told of its end at most once, and exactly once if the client never cleared or left;
- every cancel a client sends is confirmed exactly once, unless the client cleared or left meanwhile;
- a task is never sent to a worker while a worker the scheduler still knows holds it or has it on its way
  (a heartbeat that crossed a batch does not make its tasks look lost).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Dict, List, Set, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    Burst,
    CannotForward,
    ConnectionClosed,
    FromPeer,
    FromStorage,
    PeerConnection,
    Send,
    Start,
    Tick,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.task_lifecycle import TERMINAL_STATES, TaskState

CLIENTS = [b"C|host|1|c%d" % i for i in range(3)]
TIMEOUT = 5.0

_STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "submit", "submit", "submit", "result", "result", "stale", "fail", "died", "cancel", "confirm",
                "balance", "unsendable", "worker_joins", "worker_leaves", "worker_silent", "client_clears",
                "client_leaves", "client_silent", "tick", "tick", "lose", "deliver", "deliver", "heartbeat",
                "worker_connection_closes", "client_connection_closes",
            ]
        ),
        st.integers(0, 2),  # which client
        st.integers(0, 10**6),  # which task, worker, or how many
    ),
    max_size=80,
)  # fmt: skip


class _Model:
    """The peers around the core: what each worker holds, what each client was told."""

    def __init__(self, core: SchedulerCore, burst: int = 1, busy: bool = False) -> None:
        self.core = core
        self.burst = burst  # messages of peers fed together (1: one by one)
        self.busy = busy  # a burst says more messages wait
        self.pending: List[Any] = []  # messages of peers read, not yet fed
        self.now = 1.0
        self.held: Dict[bytes, Dict[bytes, int]] = {}  # worker -> task -> attempt it holds
        self.in_flight: Dict[bytes, List[m.TaskBatch]] = defaultdict(list)  # worker -> batches not delivered yet
        self.last_batch: Dict[bytes, int] = defaultdict(int)  # worker -> sequence of the last batch delivered
        self.asked_ids: Set[bytes] = set()  # workers whose echo asked for their task IDs
        self.connections: Dict[bytes, int] = {}  # peer -> the file descriptor of its connection
        self.old_attempts: List[Tuple[bytes, bytes, int]] = []  # (worker, task, attempt) no longer current
        self.cancel_asked: Dict[bytes, Set[bytes]] = defaultdict(set)  # worker -> tasks it was asked to cancel
        self.silent: Set[bytes] = set()  # peers that stopped sending heartbeats
        self.connected: Set[bytes] = set()
        self.submitted: Dict[bytes, bytes] = {}  # task -> client
        self.given_up: Set[bytes] = set()  # tasks whose client cleared or left: it may hear nothing
        self.answers: Counter = Counter()  # task -> results and confirmed cancels its client got
        self.cancels_sent: Counter = Counter()  # task -> cancels its client sent
        self.confirms: Counter = Counter()  # task -> confirms its client got
        self.next_task = 0
        self.next_worker = 0

    def feed(self, event: Any) -> None:
        """The event reaches the core: a message of a peer waits for its burst; any other event comes after the
        messages read before it."""
        if type(event) in (FromPeer, PeerConnection) and self.burst > 1:
            self.pending.append(event)
            if len(self.pending) >= self.burst:
                self.flush()
            return
        self.flush()
        self.handle(event)

    def flush(self) -> None:
        if self.pending:
            burst, self.pending = Burst(self.pending, self.busy), []
            self.handle(burst)

    def handle(self, event: Any) -> None:
        for effect in self.core.handle(event, self.now):
            if type(effect) is Send:
                self.absorb(effect.to, effect.message)
        while self.asked_ids:  # a worker answers such an echo at once, with the IDs
            worker = self.asked_ids.pop()
            if worker in self.held and worker not in self.silent:
                self.heartbeat(worker, listing=True)

    def absorb(self, to: bytes, message: Any) -> None:
        kind = type(message)
        if kind is m.TaskBatch:
            assert message.sequence == self.last_batch[to] + 1 + len(self.in_flight[to]), "batches are numbered"
            for task in message.tasks:
                assert not self.holders(task.task_id), (task.task_id, self.holders(task.task_id))
            self.in_flight[to].append(message)
        elif kind is m.WorkerHeartbeatEcho and message.send_task_ids:
            self.asked_ids.add(to)
        elif kind is m.TaskResultBatch:
            for result in message.results:
                assert self.submitted[result.task_id] == to
                self.answers[result.task_id] += 1
        elif kind is m.TaskCancelConfirm:
            for task_id, cancelled in zip(message.task_ids, message.cancelled, strict=True):
                self.confirms[task_id] += 1
                self.answers[task_id] += cancelled
        elif kind is m.TaskCancel:
            self.cancel_asked[to].update(message.task_ids)  # the worker confirms when the test says so
        elif kind is m.DisconnectResponse:
            self.held.pop(to, None)
            self.in_flight.pop(to, None)

    def holders(self, task_id: bytes) -> List[bytes]:
        """The workers the scheduler still knows that hold ``task_id`` or have it on its way."""
        known = set(self.core.worker_ids)
        return [
            worker
            for worker in known - self.silent
            if task_id in self.held.get(worker, {})
            or any(task.task_id == task_id for batch in self.in_flight.get(worker, []) for task in batch.tasks)
        ]

    def deliver(self, worker: bytes) -> None:
        """The oldest task batch on its way to ``worker`` reaches it."""
        batch = self.in_flight[worker].pop(0)
        self.last_batch[worker] = batch.sequence
        for task in batch.tasks:
            self.held.setdefault(worker, {})[task.task_id] = task.attempt

    def heartbeat(self, worker: bytes, listing: bool = False) -> None:
        """What it holds, truthfully (the batches on their way are not counted: it has not seen them)."""
        held = list(self.held.get(worker, {}))
        digest = 0
        for task_id in held:
            digest ^= task_term(task_id)
        beat = m.WorkerHeartbeat(
            last_batch=self.last_batch[worker], held_tasks=len(held), held_digest=folded(digest),
            held_task_ids=held if listing else [],
        )  # fmt: skip
        self.feed(FromPeer(worker, beat))

    def connect(self, peer: bytes) -> None:
        self.connections[peer] = connection = 100 + len(self.connections)
        self.feed(PeerConnection(peer, connection))

    def worker_answer(self, worker: bytes, task_id: bytes, status: m.TaskStatus) -> None:
        attempt = self.held[worker].pop(task_id)
        self.old_attempts.append((worker, task_id, attempt))
        result = m.TaskResult(task_id, attempt, status, m.PayloadKind.INLINE, b"r", "")
        self.feed(FromPeer(worker, m.TaskResultBatch([result])))

    def join(self) -> None:
        worker = b"W|host|%d|w" % self.next_worker
        self.next_worker += 1
        self.held[worker] = {}
        hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 2, "host", m.WorkerInfo(1, 3))
        self.connect(worker)
        self.feed(FromPeer(worker, hello))

    def pick_to_confirm(self, n: int):
        """Mostly a task its worker was asked to cancel; sometimes any task it holds."""
        asked = [(w, t) for w, tasks in self.held.items() for t in tasks if t in self.cancel_asked[w]]
        asked = [(w, t) for w, t in asked if w not in self.silent]
        return asked[n % len(asked)] if asked and n % 4 else self.pick_held(n)

    def pick_held(self, n: int):
        pairs = [(w, t) for w, tasks in self.held.items() for t in tasks if w not in self.silent]
        return pairs[n % len(pairs)] if pairs else None


@settings(max_examples=500, deadline=None)
@given(_STEPS, st.sampled_from([1, 1, 2, 5]), st.booleans())
def test_random_interleavings_end_every_task_once_and_confirm_every_cancel_once(steps, burst, busy):
    core = SchedulerCore(SchedulerSettings(worker_timeout_seconds=TIMEOUT, client_timeout_seconds=TIMEOUT))
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    model = _Model(core, burst, busy)
    for client in CLIENTS:
        model.connect(client)
        model.feed(FromPeer(client, m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host")))
        model.connected.add(client)
    model.join()
    model.join()

    for action, c, n in steps:
        model.now += 0.5
        client = CLIENTS[c]
        talking = client in model.connected and client not in model.silent
        if action == "submit" and talking:
            tasks = []
            for _ in range(1 + n % 4):
                task_id = model.next_task.to_bytes(16, "big")
                model.next_task += 1
                model.submitted[task_id] = client
                timeout = TIMEOUT if n % 5 == 0 else 0.0
                tasks.append(m.Task(task_id=task_id, function_id=b"f", retries=n % 2, timeout_seconds=timeout))
            model.feed(FromPeer(client, m.TaskBatch(tasks)))
        elif action in ("result", "fail", "died") and (pair := model.pick_held(n)):
            status = {"result": m.TaskStatus.SUCCESS, "fail": m.TaskStatus.FAILED, "died": m.TaskStatus.WORKER_DIED}
            model.worker_answer(*pair, status[action])
        elif action == "stale" and model.old_attempts:
            worker, task_id, attempt = model.old_attempts[n % len(model.old_attempts)]
            stale = m.TaskResult(task_id, attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, b"old", "")
            model.feed(FromPeer(worker, m.TaskResultBatch([stale])))
        elif action == "cancel" and talking:
            own = sorted(t for t, owner in model.submitted.items() if owner == client and not model.cancels_sent[t])
            if own:
                task_id = own[n % len(own)]
                model.cancels_sent[task_id] += 1
                model.feed(FromPeer(client, m.TaskCancel([task_id])))
        elif action == "confirm" and (pair := model.pick_to_confirm(n)):  # asked for, or not (the task goes on)
            worker, task_id = pair
            if task_id in model.cancel_asked[worker]:
                model.old_attempts.append((worker, task_id, model.held[worker].pop(task_id)))
            model.feed(FromPeer(worker, m.TaskCancelConfirm([task_id], [True])))
        elif action == "balance" and (pair := model.pick_held(n)):
            worker, task_id = pair
            model.old_attempts.append((worker, task_id, model.held[worker].pop(task_id)))
            model.feed(FromPeer(worker, m.BalanceResponse([task_id])))
        elif action == "unsendable" and (pair := model.pick_held(n)):  # the shell could not encode it
            worker, task_id = pair
            unsent = m.Task(task_id=task_id, attempt=model.held[worker].pop(task_id))
            model.feed(CannotForward(worker, m.TaskBatch, [unsent], ["cannot be copied on"]))
        elif action == "worker_joins":
            model.join()
        elif action == "worker_leaves" and model.held:
            worker = sorted(model.held)[n % len(model.held)]
            model.feed(FromPeer(worker, m.DisconnectRequest("bye")))
            model.held.pop(worker, None)
        elif action == "worker_silent" and model.held:
            model.silent.add(sorted(model.held)[n % len(model.held)])
        elif action == "worker_connection_closes" and model.held:
            worker = sorted(model.held)[n % len(model.held)]
            model.feed(ConnectionClosed(model.connections[worker]))
            model.held.pop(worker)
            model.in_flight.pop(worker, None)
        elif action == "lose" and (pair := model.pick_held(n)):  # the worker drops it without a word
            worker, task_id = pair
            model.old_attempts.append((worker, task_id, model.held[worker].pop(task_id)))
        elif action == "deliver":
            waiting = sorted(worker for worker, batches in model.in_flight.items() if batches)
            if waiting:
                model.deliver(waiting[n % len(waiting)])
        elif action == "heartbeat":
            speaking = sorted(worker for worker in model.held if worker not in model.silent)
            if speaking:
                model.heartbeat(speaking[n % len(speaking)])
        elif action in ("client_clears", "client_leaves", "client_silent", "client_connection_closes") and talking:
            model.given_up.update(t for t, owner in model.submitted.items() if owner == client)
            if action == "client_clears":
                model.feed(FromPeer(client, m.ObjectInstruction(m.ObjectInstructionKind.CLEAR, client, [])))
            elif action == "client_leaves":
                model.feed(FromPeer(client, m.DisconnectRequest()))
                model.connected.discard(client)
            elif action == "client_connection_closes":
                model.feed(ConnectionClosed(model.connections[client]))
                model.connected.discard(client)
            else:
                model.silent.add(client)
        elif action == "tick":
            _heartbeats_and_tick(model)
        assert all(count <= 1 for count in model.answers.values()), model.answers
        assert _quota_counts_add_up(core), "a client's count of queued tasks (its quota's) is not its queued tasks"

    # the silent peers are forgotten, then the workers left do their work until nothing is left
    model.now += TIMEOUT + 1
    _heartbeats_and_tick(model)
    for _ in range(1000):
        model.flush()
        if core.task_count == 0:
            break
        if not [w for w in model.held if w not in model.silent]:
            model.join()
        for worker in [w for w in model.held if w not in model.silent]:
            while model.in_flight[worker]:
                model.deliver(worker)
        for worker, tasks in list(model.held.items()):
            if worker not in model.silent:
                for task_id in list(tasks):
                    model.worker_answer(worker, task_id, m.TaskStatus.SUCCESS)
        model.now += 0.5
        _heartbeats_and_tick(model)

    model.flush()
    assert core.task_count == 0
    counts = core.state_counts
    assert all(counts[state] == 0 for state in TaskState if state not in TERMINAL_STATES), counts
    assert sum(counts[state] for state in TERMINAL_STATES) == len(model.submitted)
    assert all(count <= 1 for count in model.answers.values()), model.answers
    for task_id in model.submitted:
        if task_id not in model.given_up:
            assert model.answers[task_id] == 1, (task_id, model.answers[task_id])
            assert model.confirms[task_id] == model.cancels_sent[task_id], task_id


def _heartbeats_and_tick(model: _Model) -> None:
    for client in model.connected - model.silent:
        model.feed(FromPeer(client, m.ClientHeartbeat()))
    for worker in [w for w in model.held if w not in model.silent]:
        if worker in model.held:  # (a heartbeat's listing may have sent another one away meanwhile: no)
            model.heartbeat(worker)
    model.feed(Tick())
    for worker in [w for w in model.held if w in model.silent]:
        if worker not in model.core.worker_ids:
            del model.held[worker]  # timed out: what it held runs elsewhere


def _quota_counts_add_up(core: SchedulerCore) -> bool:
    """Each client's count of its own tasks queued (what its quota counts) is what the scheduler holds queued."""
    records = core._routing._tasks.values()  # noqa: SLF001 - the invariant is between two private tables
    queued = Counter(r.task.client_id for r in records if r.submitted and r.state is TaskState.QUEUED)
    return all(client.queued == queued[client_id] for client_id, client in core._clients.items())  # noqa: SLF001
