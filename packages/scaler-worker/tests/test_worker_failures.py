"""The worker core on failures, driven through `handle` (see `core_harness`): a task it cannot read, what its
heartbeats say it holds, connections that drop or lead to the wrong peer."""

from __future__ import annotations

from core_harness import CLIENT, SCHEDULER, STORAGE, Harness, load_failure, make_task, task_id

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.connection_events import DOWN, REFUSED, UP
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.worker_core import RECONNECT_SECONDS
from scaler.worker.worker_events import (
    EXIT_FAILURE,
    EXIT_REFUSED,
    ConnectionChanged,
    FromScheduler,
    HandshakeFailed,
    Tick,
)


def digest(*numbers: int) -> int:
    value = 0
    for number in numbers:
        value ^= task_term(task_id(number))
    return folded(value)


def heartbeat_now(h: Harness) -> m.WorkerHeartbeat:
    h.tick(h.wake)
    (heartbeat,) = h.take(m.WorkerHeartbeat)
    return heartbeat


# --- a task that cannot be read ---------------------------------------------------------------------------


def test_a_task_that_cannot_be_read_is_rejected_alone_and_the_rest_run():
    h = Harness()
    bad = make_task(2, arguments=[m.Argument("abc", m.ArgumentKind.INLINE, b"data")])
    frame = bytearray(codec.encode(m.TaskBatch([make_task(1), bad, make_task(3)], sequence=1))[0])
    end = frame.find(b"abc\x00")
    frame[end + 3] = ord("d")
    message, _ = codec.decode([bytes(frame)])
    assert type(message) is codec.DamagedTaskBatch
    h.handle(FromScheduler(message))
    (rejected,) = [r for r in h.results() if r.task_id == task_id(2)]
    assert rejected.status == m.TaskStatus.REJECTED and rejected.attempt == 1
    assert "cannot read this task" in rejected.error_text and "arguments[0].name" in rejected.error_text
    assert h.run_all() == [task_id(1), task_id(3)]
    assert {r.task_id for r in h.results()} == {task_id(1), task_id(3)}
    heartbeat = heartbeat_now(h)
    assert (heartbeat.last_batch, heartbeat.held_tasks) == (1, 0)


# --- what a heartbeat says the worker holds ----------------------------------------------------------------


def test_a_heartbeat_says_the_last_batch_it_received_and_what_it_holds():
    h = Harness()
    h.handle(FromScheduler(m.TaskBatch([make_task(1), make_task(2)], sequence=1)))
    h.handle(FromScheduler(m.TaskBatch([make_task(3)], sequence=2)))
    heartbeat = heartbeat_now(h)
    assert (heartbeat.last_batch, heartbeat.held_tasks, heartbeat.held_digest) == (2, 3, digest(1, 2, 3))
    assert heartbeat.held_task_ids == []  # the IDs only when asked
    h.answer_gets()
    h.finish()
    heartbeat = heartbeat_now(h)
    assert (heartbeat.held_tasks, heartbeat.held_digest) == (2, digest(2, 3))


def test_a_result_held_for_company_leaves_before_the_heartbeat_that_no_longer_counts_its_task():
    h = Harness(result_batch_seconds=10.0)
    h.handle(FromScheduler(m.TaskBatch([make_task(1), make_task(2), make_task(3)], sequence=1)))
    h.answer_gets()
    h.finish()
    assert h.take(m.TaskResultBatch) == []  # held: another task waits
    h.tick(h.wake)
    kinds = [type(message) for message in h.to_scheduler]
    assert kinds.index(m.TaskResultBatch) < kinds.index(m.WorkerHeartbeat)


def test_an_echo_that_asks_for_the_ids_is_answered_at_once_with_them():
    h = Harness()
    h.handle(FromScheduler(m.TaskBatch([make_task(1), make_task(2)], sequence=4)))
    h.handle(FromScheduler(m.WorkerHeartbeatEcho(send_task_ids=True)))
    (listing,) = h.take(m.WorkerHeartbeat)
    assert sorted(listing.held_task_ids) == [task_id(1), task_id(2)]
    assert (listing.last_batch, listing.held_tasks) == (4, 2)
    h.handle(FromScheduler(m.WorkerHeartbeatEcho()))
    assert h.take(m.WorkerHeartbeat) == []


# --- the scheduler's connection ---------------------------------------------------------------------------


def test_a_worker_whose_connection_to_the_scheduler_closes_waits_for_it_and_says_hello_again():
    h = Harness()
    h.handle(ConnectionChanged(False, UP))
    h.take(m.WorkerHeartbeat)
    h.handle(ConnectionChanged(False, DOWN))
    assert h.exit_code is None  # a partition may heal: the scheduler forgot us, we wait for it
    h.tick(h.now + 30.0)
    assert h.take(m.WorkerHeartbeat) == [] and h.take(m.Hello) == []  # nothing goes before the new Hello
    h.handle(ConnectionChanged(False, UP))
    assert len(h.take(m.Hello)) == 1
    h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0)))
    h.tick(h.now + 1.0)
    assert len(h.take(m.WorkerHeartbeat)) == 1 and h.exit_code is None


def test_a_hello_ack_read_after_its_connection_closed_leaves_the_worker_waiting_to_say_hello_again():
    """The scheduler answered the Hello and died: ZeroMQ still hands out the HelloAck after the connection's close
    is seen. The worker joins, and says Hello again when the connection is back (not heartbeats, which a new
    scheduler would not know)."""
    h = Harness(connect=False)
    h.take(m.Hello)
    h.handle(ConnectionChanged(False, UP))
    h.handle(ConnectionChanged(False, DOWN))
    h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0)))
    h.tick(h.now + 5.0)
    assert h.take(m.WorkerHeartbeat) == [] and h.exit_code is None
    h.handle(ConnectionChanged(False, UP))
    assert len(h.take(m.Hello)) == 1


def test_a_worker_that_lost_its_scheduler_runs_on_and_names_what_it_holds_when_it_says_hello_again():
    h = Harness()
    h.handle(ConnectionChanged(False, UP))
    h.handle(FromScheduler(m.TaskBatch([make_task(1, attempt=3), make_task(2), make_task(3)], sequence=1)))
    h.answer_gets()
    h.take(m.WorkerHeartbeat)
    h.handle(ConnectionChanged(False, DOWN))
    h.finish()  # task 1 ends while the scheduler is away: its result waits here
    h.tick(h.now + 5.0)
    assert h.results() == [] and h.to_scheduler == []
    h.handle(ConnectionChanged(False, UP))
    (hello,) = h.take(m.Hello)
    held = {held.task_id: held for held in hello.worker_info.held_tasks}
    assert sorted(held) == [task_id(1), task_id(2), task_id(3)]
    assert (held[task_id(1)].client_id, held[task_id(1)].attempt) == (CLIENT, 3)
    assert h.results() == []  # nothing before the scheduler answered the Hello
    h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0)))
    h.tick(h.now + 1.0)
    kinds = [type(message) for message in h.to_scheduler]
    assert kinds.index(m.TaskResultBatch) < kinds.index(m.WorkerHeartbeat)
    (result,) = h.results()
    assert (result.task_id, result.attempt, result.status) == (task_id(1), 3, m.TaskStatus.SUCCESS)
    assert h.exit_code is None


def test_a_task_that_waits_for_its_children_is_named_waiting_when_the_worker_says_hello_again():
    h = Harness()
    h.handle(ConnectionChanged(False, UP))
    h.assign(make_task(1))
    h.answer_gets()
    h.wait()
    h.handle(ConnectionChanged(False, DOWN))
    h.handle(ConnectionChanged(False, UP))
    (hello,) = h.take(m.Hello)
    assert [(held.task_id, held.waiting) for held in hello.worker_info.held_tasks] == [(task_id(1), True)]


def test_a_handshake_refused_while_the_scheduler_restarts_is_waited_out():
    h = Harness()
    h.handle(ConnectionChanged(False, UP))
    h.handle(ConnectionChanged(False, DOWN))
    h.handle(HandshakeFailed("the CurveZMQ handshake with the scheduler failed", False))
    assert h.exit_code is None
    h.handle(ConnectionChanged(False, UP))
    assert len(h.take(m.Hello)) == 1


def test_the_first_hello_names_nothing_held():
    h = Harness(connect=False)
    (hello,) = h.take(m.Hello)
    assert hello.worker_info.held_tasks == []


def test_a_worker_whose_scheduler_does_not_come_back_within_the_worker_timeout_leaves():
    h = Harness()
    h.handle(ConnectionChanged(False, UP))
    h.handle(ConnectionChanged(False, DOWN))
    h.tick(h.now + 61.0)
    assert h.exit_code == EXIT_FAILURE
    assert h.take(m.DisconnectRequest) == []  # nobody to say it to


def test_a_connection_that_drops_before_the_hello_ack_is_waited_out_and_hello_said_again():
    h = Harness(connect=False)
    h.take(m.Hello)
    h.handle(ConnectionChanged(False, UP))
    assert h.take(m.Hello) == []
    h.handle(ConnectionChanged(False, DOWN))
    assert h.exit_code is None
    h.handle(ConnectionChanged(False, UP))
    assert len(h.take(m.Hello)) == 1


def test_an_address_whose_handshake_fails_is_not_a_scheduler():
    h = Harness(connect=False)
    h.handle(ConnectionChanged(False, REFUSED))
    assert h.exit_code == EXIT_REFUSED  # not worth replacing: the address is wrong


def test_a_hello_ack_from_an_object_storage_server_is_not_a_schedulers(caplog):
    h = Harness(connect=False)
    h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, "", 0.0, 0.0, m.PeerRole.OBJECT_STORAGE)))
    assert h.exit_code == EXIT_REFUSED
    assert f"{SCHEDULER} is an object storage server, not a scheduler" in caplog.text


def test_a_hello_ack_that_does_not_say_who_answered_is_an_older_schedulers():
    h = Harness(connect=False)
    h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, STORAGE, 2.0, 60.0)))
    assert h.exit_code is None and h.storage_address == STORAGE


# --- the storage server's connection ------------------------------------------------------------------------


def test_when_storage_goes_away_what_waits_on_it_fails_at_once_and_hello_is_said_again_when_it_is_back():
    h = Harness()
    h.handle(ConnectionChanged(True, UP))
    h.assign(make_task(1))
    assert h.gets  # the function is fetched
    h.handle(ConnectionChanged(True, DOWN))
    (failed,) = h.results()
    assert failed.task_id == task_id(1)
    error, _ = load_failure(failed)
    assert isinstance(error, DisconnectedError) and "lost the connection to object storage" in str(error)
    h.gets.clear()
    h.assign(make_task(2))  # while it is down, what needs it waits for it
    assert h.gets == [] and h.results() == []
    h.handle(ConnectionChanged(True, UP))
    assert [type(message) for message in h.to_storage] == [m.Hello, m.Hello]  # at the start, and now again
    h.answer_gets()  # the fetch went after the Hello
    assert h.run_all() == [task_id(2)]


def test_what_needs_storage_while_it_is_away_fails_if_it_does_not_come_back_in_time():
    h = Harness()
    h.handle(ConnectionChanged(True, UP))
    h.handle(ConnectionChanged(True, DOWN))
    h.assign(make_task(1))
    h.tick(RECONNECT_SECONDS)
    (failed,) = h.results()
    assert str(load_failure(failed)[0]) == f"object storage {STORAGE} was unreachable for {RECONNECT_SECONDS:g} seconds"
    h.handle(ConnectionChanged(True, UP))
    assert h.gets == []  # what failed is not asked for when it is back


def test_a_tick_after_storage_went_away_fails_nothing_more():
    h = Harness()
    h.handle(ConnectionChanged(True, UP))
    h.handle(ConnectionChanged(True, DOWN))
    h.handle(Tick())
    assert h.exit_code is None and h.results() == []
