"""The scheduler core when its peers come back: a scheduler that restarted learns what workers hold from their
Hello and takes what clients send again without running anything twice it can know of; a client whose
connection closed is kept for the wait it said, and what it would be sent is kept for it. The property test
drives random interleavings of restarts, lost connections and returns among the usual events: every task a
client waits for ends, and its result reaches the client once."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Set

from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler_core import (
    CLIENT,
    WORKER_A,
    WORKER_B,
    admitted,
    delegating_core,
    hello,
    nested_hello,
    result,
    routed,
    sent,
    sent_tasks,
    serving,
    task,
)

from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.reconnections import AWAY_MARGIN_SECONDS, UNKNOWN_TASK_SECONDS
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    STORAGE,
    ConnectionClosed,
    FromPeer,
    FromStorage,
    PeerConnection,
    Send,
    Tick,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.task_lifecycle import TaskState

KEY_A = b"k" * 32
WAIT = 30.0  # the clients' reconnect_seconds
CLAIM = 60.0  # the client timeout: how long a task a worker holds waits for its client


def restarted(workers=()) -> SchedulerCore:
    """A scheduler that just started: nobody said Hello yet."""
    settings = SchedulerSettings(object_storage_address="tcp://127.0.0.1:1", worker_timeout_seconds=600)
    core = serving(SchedulerCore(settings))
    for worker in workers:
        core.handle(FromPeer(worker, hello(m.PeerRole.WORKER)), 0.0)
    return core


def client_hello(resuming: bool = False) -> m.Hello:
    return m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host", reconnect_seconds=WAIT, resuming=resuming)


def client_back(core: SchedulerCore, now: float, client: bytes = CLIENT) -> List:
    """The client says Hello again (resuming) and storage admits it."""
    return admitted(core, core.handle(FromPeer(client, client_hello(resuming=True)), now), now)


def worker_back(core: SchedulerCore, worker: bytes, now: float, *held: m.HeldTask) -> List:
    info = m.WorkerInfo(1, 10, held_tasks=list(held))
    return core.handle(FromPeer(worker, m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", info)), now)


def held(n: int, attempt: int = 2, client: bytes = CLIENT, waiting: bool = False) -> m.HeldTask:
    return m.HeldTask(task(n).task_id, client, b"", attempt, waiting)


def results_to(effects, client: bytes = CLIENT) -> List[bytes]:
    return [r.task_id for batch in sent(effects, to=client, kind=m.TaskResultBatch) for r in batch.results]


def cancels_to(effects, worker: bytes) -> List[bytes]:
    return [task_id for cancel in sent(effects, to=worker, kind=m.TaskCancel) for task_id in cancel.task_ids]


# --- a scheduler that restarted ---------------------------------------------------------------------------


def test_a_task_a_worker_holds_is_not_run_again_when_its_client_sends_it_again():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1, attempt=3))
    assert core.state_counts[TaskState.ADOPTED] == 1
    client_back(core, 1.5)
    effects = core.handle(FromPeer(CLIENT, routed(task(1), task(2))), 2.0)
    assert [t.task_id for t in sent_tasks(effects)] == [task(2).task_id]  # task 1 stays where it runs
    back = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id, attempt=3)])), 3.0)
    assert results_to(back) == [task(1).task_id]


def test_a_result_that_comes_before_its_client_is_kept_and_answers_the_task_sent_again():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1, attempt=3))
    early = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id, attempt=3)])), 1.1)
    assert results_to(early) == [] and core.task_count == 0
    client_back(core, 1.5)
    effects = core.handle(FromPeer(CLIENT, routed(task(1))), 2.0)
    assert results_to(effects) == [task(1).task_id] and sent_tasks(effects) == []


def test_a_task_its_client_sent_again_first_is_left_to_the_worker_that_says_it_holds_it():
    core = restarted()  # no worker yet: the task waits here
    client_back(core, 1.0)
    core.handle(FromPeer(CLIENT, routed(task(1))), 1.5)
    effects = worker_back(core, WORKER_A, 2.0, held(1, attempt=4))
    assert sent_tasks(effects) == [] and cancels_to(effects, WORKER_A) == []
    back = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id, attempt=4)])), 3.0)
    assert results_to(back) == [task(1).task_id]


def test_what_a_client_did_not_send_again_is_cancelled_on_its_worker_and_its_kept_result_deleted():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1), held(2))
    stored = m.TaskResult(task(2).task_id, 2, m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT, b"result-object")
    core.handle(FromPeer(WORKER_A, m.TaskResultBatch([stored])), 1.1)
    client_back(core, 1.5)
    core.handle(FromPeer(CLIENT, routed(task(3))), 2.0)  # the client got 1 and 2 before the restart
    effects = core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), 3.0)  # it sent everything again
    assert cancels_to(effects, WORKER_A) == [task(1).task_id]
    (delete,) = sent(effects, to=STORAGE)
    assert (delete.kind, delete.owner_id, delete.object_ids) == (m.ObjectRequestKind.DELETE, CLIENT, [b"result-object"])


def test_a_worker_holding_tasks_of_a_client_that_sent_everything_again_cancels_them_at_once():
    core = restarted()
    client_back(core, 1.0)
    core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), 2.0)
    effects = worker_back(core, WORKER_A, 3.0, held(1))
    assert cancels_to(effects, WORKER_A) == [task(1).task_id] and core.task_count == 0


def test_a_task_held_by_two_workers_runs_on_the_first_and_is_cancelled_on_the_second():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1))
    effects = worker_back(core, WORKER_B, 1.5, held(1))
    assert cancels_to(effects, WORKER_B) == [task(1).task_id]


def test_tasks_no_client_claims_are_cancelled_on_their_worker_after_the_client_timeout():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1))
    assert cancels_to(core.handle(Tick(), CLAIM - 1.0), WORKER_A) == []
    assert cancels_to(core.handle(Tick(), CLAIM + 1.5), WORKER_A) == [task(1).task_id]


def test_a_resumed_worker_that_leaves_takes_no_task_with_it_that_its_client_has_not_sent_again():
    core = restarted()
    worker_back(core, WORKER_A, 1.0, held(1))
    core.handle(FromPeer(WORKER_A, m.DisconnectRequest("bye")), 1.5)
    assert core.task_count == 0
    client_back(core, 2.0)
    core.handle(FromPeer(WORKER_B, hello(m.PeerRole.WORKER)), 2.0)
    assert [t.task_id for t in sent_tasks(core.handle(FromPeer(CLIENT, routed(task(1))), 3.0), WORKER_B)] == [
        task(1).task_id
    ]


def test_a_client_made_in_a_task_waits_for_a_worker_to_hold_that_task():
    core = restarted()
    nested = b"C|host|3|nested"
    hello_again = nested_hello(task(1).task_id, KEY_A, nested)
    hello_again.resuming = True
    assert sent(core.handle(FromPeer(nested, hello_again), 1.0)) == []  # no worker holds task 1 yet
    info = m.WorkerInfo(1, 10, delegation_key=KEY_A, held_tasks=[held(1)])
    core.handle(FromPeer(WORKER_A, m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", info)), 1.2)
    assert sent(core.handle(Tick(), 1.3), to=nested) == []  # only a worker's word: the client must claim it
    client_back(core, 1.5)
    effects = admitted(core, core.handle(FromPeer(CLIENT, routed(task(1))), 2.0))
    (admit,) = [e.message for e in effects if type(e) is Send and e.to == STORAGE and e.message.owner_id == nested]
    assert admit.scope_id == CLIENT and [type(msg) for msg in sent(effects, to=nested)] == [m.HelloAck]


def test_a_client_made_in_a_task_nobody_names_stands_for_itself_after_a_few_seconds():
    core = delegating_core()
    nested = b"C|host|3|nested"
    hello_again = nested_hello(task(7).task_id, KEY_A, nested)  # task 7 ended: no worker will say it holds it
    hello_again.resuming = True
    assert sent(core.handle(FromPeer(nested, hello_again), 2.0)) == []
    assert sent(core.handle(Tick(), 2.0 + UNKNOWN_TASK_SECONDS - 0.5), to=STORAGE) == []
    effects = admitted(core, core.handle(Tick(), 2.0 + UNKNOWN_TASK_SECONDS + 0.5))
    (admit,) = [e.message for e in effects if type(e) is Send and e.to == STORAGE and e.message.owner_id == nested]
    assert admit.scope_id == b""


def test_a_client_made_in_a_task_a_worker_holds_for_a_client_not_back_yet_waits_up_to_the_client_timeout():
    core = restarted()
    nested = b"C|host|3|nested"
    hello_again = nested_hello(task(1).task_id, KEY_A, nested)
    hello_again.resuming = True
    worker_back(core, WORKER_A, 1.0, held(1))
    core.handle(FromPeer(nested, hello_again), 1.5)
    assert sent(core.handle(Tick(), 1.5 + UNKNOWN_TASK_SECONDS + 1.0), to=STORAGE) == []  # still adopted
    assert [e for e in sent(core.handle(Tick(), 1.5 + CLAIM + 0.5), to=STORAGE) if e.owner_id == nested]


# --- a client whose connection closed -----------------------------------------------------------------------


def away_client(reconnect: float = WAIT):
    """A client (waiting ``reconnect`` s for a lost scheduler) with tasks 1 and 2 on worker A; its connection closes
    at 2.0."""
    core = serving(SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1")))
    core.handle(PeerConnection(CLIENT, 11), 0.0)
    hello_ = client_hello()
    hello_.reconnect_seconds = reconnect
    admitted(core, core.handle(FromPeer(CLIENT, hello_), 0.0))
    core.handle(FromPeer(WORKER_A, hello(m.PeerRole.WORKER)), 0.0)
    assert len(sent_tasks(core.handle(FromPeer(CLIENT, routed(task(1), task(2))), 1.0))) == 2
    return core, core.handle(ConnectionClosed(11), 2.0)


def test_a_client_that_said_it_comes_back_is_kept_its_tasks_stopped_and_what_ended_kept_for_it():
    core, effects = away_client()
    # a dead client and one cut off look the same: its tasks stop at once, but its session waits for it
    assert sorted(cancels_to(effects, WORKER_A)) == [task(1).task_id, task(2).task_id]
    assert core.client_ids == [CLIENT] and sent(effects, to=STORAGE) == []  # its objects stay
    crossed = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id)])), 3.0)
    assert results_to(crossed) == []  # kept: the client is not there to get it
    core.handle(FromPeer(WORKER_A, m.TaskCancelConfirm([task(2).task_id], [True])), 3.0)
    client_back(core, 8.0)
    again = core.handle(FromPeer(CLIENT, routed(task(1), task(2))), 8.5)
    assert results_to(again) == [task(1).task_id]  # the result that crossed the cancel
    assert [t.task_id for t in sent_tasks(again)] == [task(2).task_id]  # the one cancelled runs again
    assert results_to(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(2).task_id)])), 9.0)) == [
        task(2).task_id
    ]


def test_a_client_that_does_not_come_back_in_time_is_removed_as_one_that_left():
    core, _ = away_client()
    assert core.handle(Tick(), 2.0 + WAIT + AWAY_MARGIN_SECONDS - 1.0) is not None and core.client_ids == [CLIENT]
    effects = core.handle(Tick(), 2.0 + WAIT + AWAY_MARGIN_SECONDS + 0.5)
    assert core.client_ids == []
    assert [r.kind for r in sent(effects, to=STORAGE)] == [m.ObjectRequestKind.CLEAR_OWNER]


def test_a_client_that_does_not_wait_for_its_scheduler_leaves_when_its_connection_closes():
    core, effects = away_client(reconnect=0.0)
    assert core.client_ids == [] and sorted(cancels_to(effects, WORKER_A)) == [task(1).task_id, task(2).task_id]


def test_a_graph_sent_again_replaces_the_one_held_and_its_held_results_are_not_computed_again():
    core, _ = away_client()
    a, b = task(10), task(11, arguments=[m.Argument("", m.ArgumentKind.TASK, task(10).task_id)])
    graph = m.GraphTask(b"g" * 16, [a, b], [b.task_id])
    client_back(core, 2.5)
    (node_a,) = sent_tasks(core.handle(FromPeer(CLIENT, _routed_graph(graph)), 3.0))
    ran_b = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(node_a.task_id)])), 3.5)
    assert [t.task_id for t in sent_tasks(ran_b)] == [b.task_id]  # a's result is held here for b
    graph.again = True
    again = core.handle(FromPeer(CLIENT, _routed_graph(graph)), 4.0)
    assert sent_tasks(again) == []  # a's result was kept for it, and b runs on
    done = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(b.task_id)])), 5.0)
    assert results_to(done) == [b.task_id]


def _routed_graph(graph: m.GraphTask):
    from scaler.protocol import codec
    from scaler.protocol.routed import decode_routed

    return decode_routed(codec.encode(graph))[0]


def test_a_client_shutdown_tells_the_other_clients_not_to_wait():
    core = restarted(workers=(WORKER_A,))
    other = b"C|host|8|other"
    for client in (CLIENT, other):
        admitted(core, core.handle(FromPeer(client, client_hello()), 0.0))
    effects = core.handle(FromPeer(CLIENT, m.ClientShutdownRequest()), 1.0)
    assert [type(msg) for msg in sent(effects, to=other)] == [m.DisconnectRequest]




# --- random interleavings ----------------------------------------------------------------------------------


class World:
    """A scheduler that may restart; a client that waits for it and, once answered again, sends again what it
    waits for (then a heartbeat); two workers that run what they are sent, hold their results while their
    connection is lost, and name what they hold when they say Hello again. A connection may be lost and noticed
    at once, or (the client's) noticed later: what the scheduler sends meanwhile is lost."""

    PEERS = (CLIENT, WORKER_A, WORKER_B)

    def __init__(self) -> None:
        self.now = 0.0
        self.numbers = iter(range(1, 10**6))
        self.connections = iter(range(1, 10**6))
        self.connection: Dict[bytes, int] = {}
        self.unnoticed: List[int] = []  # connections closed that the scheduler has not heard of yet
        self.up = dict.fromkeys(self.PEERS, False)
        self.pending: Set[bytes] = set()  # the tasks the client waits for
        self.told: Counter = Counter()  # the results the client took, by task
        self.holds: Dict[bytes, Dict[bytes, int]] = {WORKER_A: {}, WORKER_B: {}}  # task -> attempt
        self.done: Dict[bytes, List[m.TaskResult]] = {WORKER_A: [], WORKER_B: []}  # results held while away
        self.core = self.new_core()
        for peer in self.PEERS:
            self.back(peer)

    @staticmethod
    def new_core() -> SchedulerCore:
        long = 10_000.0  # no timeout ends anything here: every peer comes back
        settings = SchedulerSettings(
            object_storage_address="tcp://127.0.0.1:1", worker_timeout_seconds=long, client_timeout_seconds=long
        )  # fmt: skip
        return serving(SchedulerCore(settings))

    def feed(self, event) -> None:
        self.now += 0.25
        self.absorb(self.core.handle(event, self.now))

    def absorb(self, effects) -> None:
        for effect in effects:
            if type(effect) is not Send:
                continue
            to, message = effect.to, effect.message
            if to == STORAGE:
                if type(message) is m.ObjectRequest and message.kind == m.ObjectRequestKind.ADMIT:
                    answer = m.ObjectResponse(message.request_id, m.ObjectRequestKind.ADMIT)
                    self.absorb(self.core.handle(FromStorage(answer), self.now))
            elif not self.up.get(to, False):
                continue  # lost on the way: the connection is gone
            elif to == CLIENT and type(message) is m.TaskResultBatch:
                for each in message.results:
                    if each.task_id in self.pending:  # (the client drops a result it no longer waits for)
                        self.pending.discard(each.task_id)
                        self.told[each.task_id] += 1
            elif to in self.holds:
                self.to_worker(to, message)

    def to_worker(self, worker: bytes, message) -> None:
        holds = self.holds[worker]
        if type(message) is m.TaskBatch:
            for each in message.tasks:
                holds[each.task_id] = each.attempt
        elif type(message) is m.TaskCancel:
            flags = [holds.pop(task_id, None) is not None for task_id in message.task_ids]
            self.feed(FromPeer(worker, m.TaskCancelConfirm(list(message.task_ids), flags)))
        elif type(message) is m.BalanceRequest:
            self.feed(FromPeer(worker, m.BalanceResponse([])))

    def back(self, peer: bytes) -> None:
        connection = self.connection[peer] = next(self.connections)
        self.up[peer] = True
        self.feed(PeerConnection(peer, connection))
        if peer == CLIENT:
            self.feed(FromPeer(CLIENT, client_hello(resuming=True)))
            if self.pending:
                self.feed(FromPeer(CLIENT, m.TaskBatch([task_of(each) for each in sorted(self.pending)])))
            self.feed(FromPeer(CLIENT, m.ClientHeartbeat()))
            return
        held_tasks = [m.HeldTask(each, CLIENT, b"", attempt) for each, attempt in self.holds[peer].items()]
        held_tasks += [m.HeldTask(r.task_id, CLIENT, b"", r.attempt) for r in self.done[peer]]
        info = m.WorkerInfo(1, 3, held_tasks=held_tasks)
        self.feed(FromPeer(peer, m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", info)))
        results, self.done[peer] = self.done[peer], []
        if results:
            self.feed(FromPeer(peer, m.TaskResultBatch(results)))

    # --- what happens ----------------------------------------------------------------------------------

    def submit(self, k: int) -> None:
        task_id = task(next(self.numbers)).task_id
        self.pending.add(task_id)
        if self.up[CLIENT]:
            self.feed(FromPeer(CLIENT, m.TaskBatch([task_of(task_id)])))

    def work(self, k: int) -> None:
        worker = self.PEERS[1 + k % 2]
        holds = self.holds[worker]
        if not holds:
            return
        task_id = sorted(holds)[k % len(holds)]
        finished = m.TaskResult(task_id, holds.pop(task_id), m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, b"v")
        if self.up[worker]:
            self.feed(FromPeer(worker, m.TaskResultBatch([finished])))
        else:
            self.done[worker].append(finished)

    def lose(self, k: int) -> None:
        peer = self.PEERS[k % 3]
        if not self.up[peer]:
            return
        self.up[peer] = False
        if peer == CLIENT and k % 2:
            self.unnoticed.append(self.connection[peer])  # the scheduler hears of it later
        else:
            self.feed(ConnectionClosed(self.connection[peer]))

    def notice(self, k: int) -> None:
        if self.unnoticed:
            self.feed(ConnectionClosed(self.unnoticed.pop(0)))

    def come_back(self, k: int) -> None:
        peer = self.PEERS[k % 3]
        if not self.up[peer]:
            self.back(peer)

    def restart(self, k: int) -> None:
        self.core = self.new_core()
        self.unnoticed.clear()
        self.up = dict.fromkeys(self.PEERS, False)

    def tick(self, k: int) -> None:
        self.now += 1.0
        self.feed(Tick())

    def finish(self) -> None:
        """Everyone comes back, the workers do all they hold, until the client waits for nothing."""
        while self.unnoticed:
            self.notice(0)
        for peer in (WORKER_A, WORKER_B, CLIENT):  # the workers first: the client claims what they hold
            if not self.up[peer]:
                self.back(peer)
        for _ in range(500):
            if not self.pending:
                return
            for k in (0, 1):
                self.work(k)
            self.tick(0)


def task_of(task_id: bytes) -> m.Task:
    return m.Task(task_id=task_id, function_id=b"f")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["submit", "submit", "work", "work", "lose", "notice", "come_back", "come_back", "restart", "tick"]
            ),
            st.integers(0, 5),
        ),
        max_size=60,
    )
)
def test_every_task_the_client_waits_for_ends_and_reaches_it_once_whatever_restarts_and_returns(script):
    world = World()
    for action, k in script:
        getattr(world, action)(k)
    world.finish()
    assert not world.pending, f"never ended: {len(world.pending)}"
    assert set(world.told.values()) <= {1}
