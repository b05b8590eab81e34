"""The scheduler core on failures: peers whose connection closes, workers that lost tasks, tasks that cannot be
read. Driven directly: no sockets, no processes."""

from __future__ import annotations

from typing import List

from test_scheduler_core import CLIENT, WORKER_A, WORKER_B, admitted, core_with, result, sent, task

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    ConnectionClosed,
    FromPeer,
    MonitorSubscription,
    PeerConnection,
    Publish,
    Tick,
)
from scaler.scheduler.task_lifecycle import TaskState

OTHER_CLIENT = b"C|host|9|cc"


def hello_13(role: m.PeerRole, capacity: int = 10) -> m.Hello:
    """A Hello of protocol 1.3: its worker's heartbeats say what it holds."""
    return m.Hello(PROTOCOL_VERSION, role, 1, "host", m.WorkerInfo(1, capacity, []))


def connect(core: SchedulerCore, peer: bytes, connection: int, role: m.PeerRole, now: float = 0.0) -> List:
    core.handle(PeerConnection(peer, connection), now)
    return admitted(core, core.handle(FromPeer(peer, hello_13(role)), now), now)


def batches_to(effects, worker: bytes) -> List[m.TaskBatch]:
    return sent(effects, to=worker, kind=m.TaskBatch)


def heartbeat(last_batch: int, held: List[bytes], listing: bool = False) -> m.WorkerHeartbeat:
    digest = 0
    for task_id in held:
        digest ^= task_term(task_id)
    return m.WorkerHeartbeat(
        last_batch=last_batch, held_tasks=len(held), held_digest=folded(digest), held_task_ids=held if listing else []
    )


def reconciling_core(capacity: int = 10) -> SchedulerCore:
    core = core_with(workers=())
    connect(core, WORKER_A, 11, m.PeerRole.WORKER)
    return core


# --- connections -----------------------------------------------------------------------------------------


def test_a_worker_whose_connection_closes_is_gone_and_its_tasks_run_elsewhere():
    core = core_with(workers=())
    connect(core, WORKER_A, 11, m.PeerRole.WORKER)
    (batch,) = batches_to(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0), WORKER_A)
    assert len(batch.tasks) == 2
    connect(core, WORKER_B, 12, m.PeerRole.WORKER, 2.0)
    effects = core.handle(ConnectionClosed(11), 3.0)
    assert core.worker_ids == [WORKER_B]
    (again,) = batches_to(effects, WORKER_B)
    assert sorted(t.task_id for t in again.tasks) == [task(1).task_id, task(2).task_id]
    assert all(t.attempt == 2 for t in again.tasks)


def test_a_client_whose_connection_closes_is_gone_and_its_tasks_are_cancelled_on_their_worker():
    core = core_with(workers=())
    connect(core, WORKER_A, 11, m.PeerRole.WORKER)
    connect(core, OTHER_CLIENT, 12, m.PeerRole.CLIENT)
    core.handle(FromPeer(OTHER_CLIENT, m.TaskBatch([task(1)])), 1.0)
    effects = core.handle(ConnectionClosed(12), 2.0)
    assert OTHER_CLIENT not in core.client_ids
    (cancel,) = sent(effects, to=WORKER_A, kind=m.TaskCancel)
    assert cancel.task_ids == [task(1).task_id]
    (clear,) = [e.message for e in effects if type(e.message) is m.ObjectRequest]
    assert clear.kind == m.ObjectRequestKind.CLEAR_OWNER and clear.owner_id == OTHER_CLIENT


def test_a_close_of_a_connection_no_peer_said_hello_on_changes_nothing():
    core = core_with(workers=())
    connect(core, WORKER_A, 11, m.PeerRole.WORKER)
    assert core.handle(ConnectionClosed(99), 1.0) == []
    assert core.worker_ids == [WORKER_A]


def test_a_peer_that_said_hello_again_on_a_new_connection_is_not_dropped_by_the_old_ones_close():
    core = core_with(workers=())
    connect(core, OTHER_CLIENT, 12, m.PeerRole.CLIENT)
    connect(core, OTHER_CLIENT, 14, m.PeerRole.CLIENT, 1.0)  # its connection blipped: Hello again on a new one
    core.handle(ConnectionClosed(12), 2.0)
    assert OTHER_CLIENT in core.client_ids
    core.handle(ConnectionClosed(14), 3.0)
    assert OTHER_CLIENT not in core.client_ids


def test_a_peer_that_left_politely_is_not_dropped_again_and_drops_nobody_when_its_connection_closes():
    core = core_with(workers=())
    connect(core, WORKER_A, 11, m.PeerRole.WORKER)
    core.handle(FromPeer(WORKER_A, m.DisconnectRequest("bye")), 1.0)
    connect(core, WORKER_B, 12, m.PeerRole.WORKER, 2.0)
    assert core.handle(ConnectionClosed(11), 3.0) == []  # WORKER_A's close
    assert core.worker_ids == [WORKER_B]


def test_hello_ack_says_it_comes_from_a_scheduler():
    core = core_with(workers=())
    (ack,) = sent(connect(core, OTHER_CLIENT, 12, m.PeerRole.CLIENT), kind=m.HelloAck)
    assert ack.role == m.PeerRole.SCHEDULER


# --- what a worker holds ---------------------------------------------------------------------------------


def test_task_batches_to_a_worker_are_numbered():
    core = reconciling_core()
    first = batches_to(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0), WORKER_A)
    second = batches_to(core.handle(FromPeer(CLIENT, m.TaskBatch([task(3)])), 2.0), WORKER_A)
    assert [b.sequence for b in first + second] == [1, 2]


def test_a_heartbeat_that_matches_asks_nothing_and_changes_nothing():
    core = reconciling_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)
    held = [task(1).task_id, task(2).task_id]
    (echo,) = sent(core.handle(FromPeer(WORKER_A, heartbeat(1, held)), 2.0), to=WORKER_A)
    assert echo == m.WorkerHeartbeatEcho(send_task_ids=False)
    assert core.state_counts[TaskState.ASSIGNED] == 2


def test_tasks_sent_after_the_last_batch_a_heartbeat_saw_are_on_their_way_not_lost():
    core = reconciling_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(2)])), 1.5)  # batch 2 crosses the heartbeat on the wire
    (echo,) = sent(core.handle(FromPeer(WORKER_A, heartbeat(1, [task(1).task_id])), 2.0), to=WORKER_A)
    assert echo.send_task_ids is False
    listing = heartbeat(1, [task(1).task_id], listing=True)
    effects = core.handle(FromPeer(WORKER_A, listing), 2.1)
    assert batches_to(effects, WORKER_A) == [] and core.state_counts[TaskState.QUEUED] == 0


def test_a_heartbeat_that_differs_asks_for_the_ids_and_the_list_requeues_what_the_worker_lost():
    core = reconciling_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2), task(3)])), 1.0)
    held = [task(1).task_id, task(3).task_id]  # it lost task 2
    (echo,) = sent(core.handle(FromPeer(WORKER_A, heartbeat(1, held)), 2.0), to=WORKER_A)
    assert echo.send_task_ids is True
    effects = core.handle(FromPeer(WORKER_A, heartbeat(1, held, listing=True)), 2.1)
    (again,) = batches_to(effects, WORKER_A)  # queued again, and the only worker with room takes it
    assert [(t.task_id, t.attempt) for t in again.tasks] == [(task(2).task_id, 2)]
    assert again.sequence == 2
    late = m.TaskResultBatch([result(task(2).task_id, attempt=1)])
    assert sent(core.handle(FromPeer(WORKER_A, late), 3.0), to=CLIENT) == []  # the lost attempt's result: dropped
    on_time = m.TaskResultBatch([result(task(2).task_id, attempt=2)])
    assert sent(core.handle(FromPeer(WORKER_A, on_time), 3.0), to=CLIENT)


def test_a_lost_task_that_was_being_cancelled_is_cancelled():
    core = reconciling_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    core.handle(FromPeer(CLIENT, m.TaskCancel([task(1).task_id])), 1.5)
    effects = core.handle(FromPeer(WORKER_A, heartbeat(1, [], listing=True)), 2.0)
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert confirm.task_ids == [task(1).task_id] and confirm.cancelled == [True]
    assert core.task_count == 0


def test_tasks_a_worker_holds_but_was_not_given_are_cancelled_there():
    core = reconciling_core()
    stray = task(77).task_id
    effects = core.handle(FromPeer(WORKER_A, heartbeat(0, [stray], listing=True)), 1.0)
    (cancel,) = sent(effects, to=WORKER_A, kind=m.TaskCancel)
    assert cancel.task_ids == [stray]


def test_an_older_worker_whose_heartbeat_says_nothing_of_its_tasks_keeps_them():
    core = core_with()  # its Hello is of protocol 1.0
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    (echo,) = sent(core.handle(FromPeer(WORKER_A, m.WorkerHeartbeat()), 2.0), to=WORKER_A)
    assert echo.send_task_ids is False
    assert core.state_counts[TaskState.ASSIGNED] == 1


def test_the_ids_a_heartbeat_lists_are_not_kept_for_monitors():
    core = reconciling_core()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    core.handle(FromPeer(WORKER_A, heartbeat(1, [task(1).task_id], listing=True)), 2.0)
    core.handle(MonitorSubscription(1), 2.0)
    (publish,) = [e for e in core.handle(Tick(), 3.0) if type(e) is Publish]
    (worker,) = publish.snapshot.workers
    assert worker.heartbeat.held_task_ids == [] and worker.heartbeat.held_tasks == 1


# --- tasks that cannot be read -----------------------------------------------------------------------------


def _damaged_batch() -> List:
    """The frames of a TaskBatch of three tasks whose second has an argument name without its NUL byte."""
    bad = task(2, arguments=[m.Argument("abc", m.ArgumentKind.INLINE, b"data")])
    frame = bytearray(codec.encode(m.TaskBatch([task(1), bad, task(3)]))[0])
    end = frame.find(b"abc\x00")
    frame[end + 3] = ord("d")
    return [bytes(frame)]


def test_a_task_that_cannot_be_read_is_refused_to_its_client_alone():
    core = core_with()
    message, _ = codec.decode_routed(_damaged_batch())
    assert type(message) is codec.DamagedTaskBatch
    effects = core.handle(FromPeer(CLIENT, message), 1.0)
    (refused,) = sent(effects, to=CLIENT, kind=m.TaskResultBatch)
    (rejection,) = refused.results
    assert rejection.task_id == task(2).task_id and rejection.status == m.TaskStatus.REJECTED
    assert "arguments[0].name" in rejection.error_text and "NUL" in rejection.error_text
    (batch,) = batches_to(effects, WORKER_A)
    assert [t.task_id for t in batch.tasks] == [task(1).task_id, task(3).task_id]
