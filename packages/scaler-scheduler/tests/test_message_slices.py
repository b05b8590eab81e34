"""Large messages a slice at a time, each peer's messages in order, and silence judged only on what was read: the
core driven directly, as the shell would (no sockets)."""

from __future__ import annotations

from typing import Any, List

from test_scheduler_core import CLIENT, WORKER_A, core_with, hello, sent, task

from scaler.protocol import codec, routed
from scaler.protocol import messages as m
from scaler.scheduler.message_slices import SLICE
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    Burst,
    ConnectionClosed,
    Continue,
    FromPeer,
    MoreToDo,
    PeerConnection,
    Tick,
)

OTHER_CLIENT = b"C|host|9|cc"


def received(message: Any) -> Any:
    """``message`` as the shell hands it to the core (`routed.decode_routed`: its items read when taken)."""
    return routed.decode_routed(codec.encode(message))[0]


def more_to_do(effects: List[Any]) -> bool:
    return any(type(effect) is MoreToDo for effect in effects)


def continued(core: SchedulerCore, now: float = 1.0, limit: int = 1000) -> List[Any]:
    """Every effect of the `Continue` events the core asks for, until it asks for none."""
    effects: List[Any] = []
    for _ in range(limit):
        more = core.handle(Continue(), now)
        effects.extend(more)
        if not more_to_do(more):
            return effects
    raise AssertionError("the core never finished what waits in it")


def two_clients() -> SchedulerCore:
    core = core_with(capacity=10**6)
    core.handle(FromPeer(OTHER_CLIENT, hello(m.PeerRole.CLIENT)), 0.0)
    return core


def test_a_large_batch_is_taken_a_slice_at_a_time_while_another_client_is_answered():
    core = two_clients()
    effects = core.handle(FromPeer(CLIENT, received(m.TaskBatch([task(n) for n in range(3 * SLICE + 5)]))), 1.0)
    assert core.task_count == SLICE and more_to_do(effects)
    echo = core.handle(FromPeer(OTHER_CLIENT, m.ClientHeartbeat()), 1.0)  # between two slices: answered at once
    assert sent(echo, to=OTHER_CLIENT, kind=m.ClientHeartbeatEcho)
    assert core.task_count == SLICE
    continued(core)
    assert core.task_count == 3 * SLICE + 5


def test_what_a_peer_sends_after_a_large_message_waits_behind_it_in_order():
    """A cancel of the batch's last task and a heartbeat come while the batch is taken: the cancel finds the task,
    and the echo comes after (a client's clear waits for such an echo)."""
    core = two_clients()
    last = 2 * SLICE
    core.handle(FromPeer(CLIENT, received(m.TaskBatch([task(n) for n in range(last + 1)]))), 1.0)
    assert core.handle(FromPeer(CLIENT, m.TaskCancel([task(last).task_id])), 1.0)
    assert not sent(core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), 1.0), to=CLIENT)  # waits its turn
    effects = continued(core)
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert confirm.task_ids == [task(last).task_id] and confirm.cancelled == [True]
    assert sent(effects, to=CLIENT, kind=m.ClientHeartbeatEcho)
    assert core.task_count == last


def test_peers_whose_messages_wait_take_turns():
    core = two_clients()
    for peer, base in ((CLIENT, 0), (OTHER_CLIENT, 10**6)):
        core.handle(FromPeer(peer, received(m.TaskBatch([task(base + n) for n in range(3 * SLICE)]))), 1.0)
    assert core.task_count == 2 * SLICE
    core.handle(Continue(), 1.0)
    core.handle(Continue(), 1.0)
    assert core.task_count == 4 * SLICE  # one more slice each, not two of one


def test_a_peer_that_leaves_takes_what_waits_of_it_along():
    """The rest of a batch, and what the client sent after it, are dropped when its connection closes: none of
    it reaches a worker."""
    core = core_with(capacity=10**6)
    core.handle(Burst([PeerConnection(CLIENT, 7), FromPeer(CLIENT, hello(m.PeerRole.CLIENT))]), 0.0)
    effects = core.handle(FromPeer(CLIENT, received(m.TaskBatch([task(n) for n in range(3 * SLICE)]))), 1.0)
    core.handle(FromPeer(CLIENT, m.TaskCancel([task(0).task_id])), 1.0)
    closing = core.handle(ConnectionClosed(7), 1.0)
    assert not more_to_do(closing)
    effects.extend([*closing, *continued(core)])
    assert sum(len(batch.tasks) for batch in sent(effects, to=WORKER_A, kind=m.TaskBatch)) == SLICE
    assert core.client_ids == []


def test_a_damaged_task_of_a_later_slice_is_refused_alone():
    tasks = [task(n) for n in range(SLICE + 10)]
    tasks[SLICE + 3] = task(SLICE + 3, arguments=[m.Argument("abc", m.ArgumentKind.INLINE, b"data")])
    frame = bytearray(codec.encode(m.TaskBatch(tasks))[0])
    end = frame.find(b"abc\x00")
    frame[end + 3] = ord("d")  # its argument's name without the NUL that ends it
    core = two_clients()
    core.handle(FromPeer(CLIENT, routed.decode_routed([bytes(frame)])[0]), 1.0)
    (refused,) = sent(continued(core), to=CLIENT, kind=m.TaskResultBatch)
    (rejection,) = refused.results
    assert rejection.task_id == tasks[SLICE + 3].task_id and rejection.status == m.TaskStatus.REJECTED
    assert "arguments[0].name" in rejection.error_text
    assert core.task_count == SLICE + 9


def node(n: int, *needs: int) -> m.Task:
    return task(n, arguments=[m.Argument("", m.ArgumentKind.TASK, task(k).task_id) for k in needs])


def test_a_large_graph_in_dependency_order_runs_a_slice_at_a_time():
    """A chain of 2.5 slices: its first node runs before the message is taken whole; the target comes."""
    count = 5 * SLICE // 2
    graph = m.GraphTask(b"G" * 16, [node(0), *(node(n, n - 1) for n in range(1, count))], [task(count - 1).task_id])
    core = core_with(capacity=10**6)
    effects = core.handle(FromPeer(CLIENT, received(graph)), 1.0)
    (first,) = [t for batch in sent(effects, to=WORKER_A, kind=m.TaskBatch) for t in batch.tasks]
    assert first.task_id == task(0).task_id
    continued(core)
    for n in range(count):
        effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result_of(n)])), 2.0)
    (delivered,) = sent(effects, to=CLIENT, kind=m.TaskResultBatch)
    assert [r.task_id for r in delivered.results] == [task(count - 1).task_id]


def result_of(n: int) -> m.TaskResult:
    return m.TaskResult(task(n).task_id, 1, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, b"v", "")


def test_a_large_graph_whose_node_needs_a_later_one_is_rejected_whole_saying_so():
    count = 2 * SLICE
    nodes = [node(0, count - 1), *(node(n) for n in range(1, count))]  # the first needs the last
    core = core_with(capacity=10**6)
    effects = [*core.handle(FromPeer(CLIENT, received(m.GraphTask(b"G" * 16, nodes, [task(0).task_id]))), 1.0)]
    effects.extend(continued(core))
    (rejected,) = [r for batch in sent(effects, to=CLIENT, kind=m.TaskResultBatch) for r in batch.results]
    assert rejected.status == m.TaskStatus.REJECTED and "not in its part, nor in an earlier part" in rejected.error_text
    assert core.task_count == 0


def test_a_peer_is_silent_only_when_what_it_sent_was_read():
    """The scheduler stalled for 10 s (a client's timeout is 2 s): the ticks while its peers' messages wait unread
    time nobody out; once read, the heartbeat the client sent meanwhile counts."""
    core = core_with(client_timeout_seconds=2.0)
    core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), 0.0)
    core.handle(Tick(caught_up=False), 10.0)  # its heartbeat of 1.0 s waits in the socket
    core.handle(Burst([FromPeer(WORKER_A, m.WorkerHeartbeat())], more=True), 10.1)  # still behind
    core.handle(Tick(caught_up=False), 10.2)
    assert core.client_ids == [CLIENT]
    core.handle(Burst([FromPeer(CLIENT, m.ClientHeartbeat())]), 10.3)  # read: caught up
    core.handle(Tick(), 11.0)
    assert core.client_ids == [CLIENT]
    core.handle(Tick(), 13.5)  # silent since 10.3, and everything was read meanwhile
    assert core.client_ids == []
