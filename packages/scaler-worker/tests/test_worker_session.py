"""The worker core's session, driven through `handle` (see `core_harness`): Hello and its answer, heartbeats
(what they report, and when), a silent scheduler, refusals, leaving."""

from __future__ import annotations

from core_harness import SCHEDULER, STORAGE, Harness, make_task, task_id

from scaler.protocol import messages as m
from scaler.protocol.ids import IDGenerator
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_runner import ProcessorRunner, StartProcessor
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_core import WorkerCore
from scaler.worker.worker_events import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REFUSED,
    Broken,
    Exit,
    FromScheduler,
    FromStorage,
    HandshakeFailed,
    SendToScheduler,
    Start,
    StopRequested,
    Tick,
    WorkerIdentity,
)


def ack(storage: str = STORAGE, heartbeat_interval: float = 2.0) -> FromScheduler:
    return FromScheduler(m.HelloAck(PROTOCOL_VERSION, storage, heartbeat_interval, 60.0))


def test_start_says_hello_with_what_the_shell_looked_up_and_starts_the_processor():
    config = WorkerConfig(SCHEDULER, queue_capacity=17, capabilities=[m.Capability("gpu", -1)])
    core = WorkerCore(config, WorkerIdentity(b"W|h|42|x", 42, "host-a", IDGenerator()), ProcessorRunner())
    hello, start = core.handle(Start(), 100.0)
    assert hello == SendToScheduler(
        m.Hello(
            PROTOCOL_VERSION,
            m.PeerRole.WORKER,
            42,
            "host-a",
            m.WorkerInfo(slots=1, queue_capacity=17, capabilities=[m.Capability("gpu", -1)]),
        )
    )
    assert start == StartProcessor(0)
    assert core.next_wakeup == 160.0  # the HelloAck must come within the worker timeout


def test_no_hello_ack_within_the_worker_timeout_ends_the_worker():
    h = Harness(connect=False)
    h.tick(59.9)
    assert h.exit_code is None
    h.tick(60.0)
    assert h.exit_code == EXIT_FAILURE
    assert h.take(m.DisconnectRequest) == []  # never connected: nobody to say goodbye to


def test_hello_ack_connects_to_the_storage_it_names_and_heartbeats_at_once():
    h = Harness(connect=False)
    h.handle(ack())
    assert h.storage_address == STORAGE
    assert h.to_storage == [h.take(m.Hello)[0]]  # the same Hello, to the storage server
    [heartbeat] = h.take(m.WorkerHeartbeat)
    assert (heartbeat.agent_cpu, heartbeat.agent_rss_bytes) == (1.0, 100)  # as the shell measured them
    assert (heartbeat.processor_cpu, heartbeat.processor_rss_bytes) == (2.0, 200)
    assert h.wake == 1.0  # the worker's own interval (1 s) is the shorter


def test_a_scheduler_that_names_no_storage_means_its_port_plus_one():
    h = Harness(connect=False)
    h.handle(ack(storage=""))
    assert h.storage_address == "tcp://127.0.0.1:2346"


def test_heartbeats_go_every_interval_with_the_task_counts():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.wait()  # task 1 waits, task 3 (the newest) runs on top of it, task 2 is queued
    h.tick(0.9)
    assert h.take(m.WorkerHeartbeat) == []
    h.tick(1.0)
    [heartbeat] = h.take(m.WorkerHeartbeat)
    assert (heartbeat.queued_tasks, heartbeat.running_tasks, heartbeat.suspended_tasks) == (1, 1, 1)
    assert h.wake == 2.0


def test_heartbeats_report_what_ran_per_function():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.tell(h.processor_finishes()._replace(function="mod.square", seconds=0.5))
    h.tell(h.processor_finishes(m.TaskStatus.FAILED)._replace(function="mod.square", seconds=0.25))
    h.tick(2.0)
    [heartbeat] = h.take(m.WorkerHeartbeat)
    assert heartbeat.functions == [m.FunctionStats("mod.square", 1, 1, 0.75)]


def test_the_scheduler_may_ask_for_more_frequent_heartbeats_not_fewer():
    h = Harness(connect=False)
    h.handle(ack(heartbeat_interval=0.5))
    assert h.wake == 0.5
    other = Harness(connect=False)
    other.handle(ack(heartbeat_interval=10.0))
    assert other.wake == 1.0


def test_a_silent_scheduler_ends_the_worker_which_says_goodbye():
    h = Harness(storage_timeout_seconds=5)
    h.tick(4.0)
    h.handle(FromScheduler(m.WorkerHeartbeatEcho()))  # heard at 4
    h.tick(9.0)
    assert h.exit_code is None
    h.tick(11.0)
    assert h.exit_code == EXIT_FAILURE
    [goodbye] = h.take(m.DisconnectRequest)
    assert "nothing heard from scheduler for 7 seconds" in goodbye.reason


def test_a_refusal_before_the_hello_ack_ends_the_worker_as_refused():
    h = Harness(connect=False)
    h.handle(FromScheduler(m.Refusal(m.Version(9, 0), "protocol version 1.0 is not compatible with 9.0")))
    assert h.exit_code == EXIT_REFUSED
    assert h.take(m.DisconnectRequest) == []


def test_a_refusal_after_the_hello_ack_ends_the_worker_to_be_replaced_without_goodbye():
    h = Harness()
    h.handle(FromScheduler(m.Refusal(PROTOCOL_VERSION, "send Hello first (got WorkerHeartbeat)")))
    assert h.exit_code == EXIT_FAILURE
    assert h.take(m.DisconnectRequest) == []


def test_task_messages_before_the_hello_ack_are_dropped():
    h = Harness(connect=False)
    h.assign(make_task(1))
    h.handle(ack())
    assert h.core.queued_count == 0 and h.gets == []


def test_unexpected_messages_are_dropped():
    h = Harness()
    h.handle(FromScheduler(m.ClientHeartbeatEcho()))
    h.handle(FromStorage(m.TaskBatch([make_task(1)])))
    h.assign(make_task(2))
    h.answer_gets()
    assert h.running_task() == task_id(2) and h.exit_code is None


def test_a_disconnect_request_sends_what_is_left_and_ends_the_worker_without_goodbye():
    h = Harness(result_batch_seconds=0.005)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.finish()  # held for company: tasks are queued
    h.handle(FromScheduler(m.DisconnectRequest("scheduler shutting down")))
    assert h.exit_code == EXIT_OK
    assert [r.task_id for r in h.results()] == [task_id(1)]
    assert h.take(m.DisconnectRequest) == []


def test_a_stop_request_sends_what_is_left_then_says_goodbye():
    h = Harness(result_batch_seconds=0.005)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.finish()
    h.handle(StopRequested("received SIGTERM"))
    assert h.exit_code == EXIT_OK
    assert [type(message) for message in h.to_scheduler] == [m.TaskResultBatch, m.DisconnectRequest]
    assert h.to_scheduler[1] == m.DisconnectRequest("worker received SIGTERM")


def test_a_broken_shell_ends_the_worker_with_a_failure_and_a_goodbye():
    h = Harness()
    h.handle(Broken("cannot start a processor: OSError: out of processes"))
    assert h.exit_code == EXIT_FAILURE
    [goodbye] = h.take(m.DisconnectRequest)
    assert goodbye.reason == "worker cannot start a processor: OSError: out of processes"


def test_a_refused_handshake_ends_the_worker_as_refused_and_only_storage_refusing_us_is_told_the_scheduler():
    h = Harness()
    h.handle(HandshakeFailed("the peer at tcp://x refused key SHA256:y: it does not accept this key", False))
    assert h.exit_code == EXIT_REFUSED and h.take(m.DisconnectRequest) == []
    h = Harness()
    h.handle(HandshakeFailed("the peer at tcp://s refused key SHA256:y: it does not accept this key", True))
    assert h.exit_code == EXIT_REFUSED
    [goodbye] = h.take(m.DisconnectRequest)
    assert "refused key SHA256:y" in goodbye.reason


def test_storage_refusing_our_hello_ends_the_worker_as_refused_with_a_goodbye():
    h = Harness()
    h.handle(FromStorage(m.Refusal(m.Version(3, 0), "protocol version 1.0 is not compatible with 3.0")))
    assert h.exit_code == EXIT_REFUSED
    [goodbye] = h.take(m.DisconnectRequest)
    assert "refused by object storage" in goodbye.reason


def test_storage_refusing_later_is_answered_by_a_new_hello():
    h = Harness()
    h.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)))
    h.to_storage.clear()
    h.handle(FromStorage(m.Refusal(PROTOCOL_VERSION, "send Hello first")))
    assert h.exit_code is None
    assert [type(message) for message in h.to_storage] == [m.Hello]


def test_a_worker_that_left_handles_nothing_more():
    h = Harness()
    h.handle(StopRequested("received SIGINT"))
    assert h.core.exited
    assert h.core.handle(FromScheduler(m.TaskBatch([make_task(1)])), 1.0) == []
    assert h.core.handle(Tick(), 100.0) == []


def test_exit_is_the_last_effect():
    h = Harness()
    effects = h.core.handle(StopRequested("received SIGTERM"), 0.0)
    assert type(effects[-1]) is Exit
