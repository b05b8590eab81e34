"""A real worker agent (and processor) on failures, driven by a fake scheduler: a task it cannot read, a
scheduler whose connection closes, a HelloAck from the wrong kind of peer. (A storage server that restarts:
tests/test_failure_detection.py, with real processes.)"""

from __future__ import annotations

import worker_tasks as tasks
from worker_harness import FakeScheduler, TaskDriver

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION

NEVER = "600"  # a timeout long enough that only the failure handling under test can end the wait in time


def test_a_task_the_worker_cannot_read_is_rejected_alone_and_the_others_of_its_batch_run(driver: TaskDriver):
    first, damaged, last = (driver.task(tasks.add, n, 1) for n in (1, 2, 3))
    damaged.arguments[0].name = "abc"
    frame = bytearray(codec.encode(m.TaskBatch([first, damaged, last], sequence=1))[0])
    end = frame.find(b"abc\x00")
    frame[end + 3] = ord("d")  # the argument's name loses its NUL byte (the scheduler refuses such a task)
    driver.scheduler.socket.send_multipart([driver.worker_id, bytes(frame)])
    rejected = driver.result(damaged.task_id)
    assert rejected.status == m.TaskStatus.REJECTED
    assert rejected.error_text == (
        "the worker cannot read this task: arguments[0].name: a text field lacks its terminating NUL byte"
    )
    assert driver.value(first.task_id) == 2 and driver.value(last.task_id) == 4


def test_a_worker_whose_scheduler_connection_closes_says_hello_again_when_it_is_back(
    scheduler, storage_server, start_worker
):
    worker = start_worker(scheduler.address, "--worker-timeout-seconds", NEVER)
    identity, _ = scheduler.accept(storage_server.address)
    scheduler.restart()  # its connections close, as a scheduler's whose process died or whose host vanished
    again, _ = scheduler.accept(storage_server.address)  # the same process, not a new worker
    assert again == identity and worker.poll() is None
    scheduler.expect(m.WorkerHeartbeat)
    log = open(start_worker.log_path).read()
    assert "lost the connection to scheduler" in log and f"connected to scheduler {scheduler.address} again" in log


def test_a_worker_whose_scheduler_does_not_come_back_within_its_timeout_leaves(scheduler, storage_server, start_worker):
    worker = start_worker(scheduler.address, "--worker-timeout-seconds", "2")
    scheduler.accept(storage_server.address)
    scheduler.close()
    assert worker.wait(60) == 1
    assert f"no answer from scheduler {scheduler.address} within 2 seconds" in open(start_worker.log_path).read()


def test_a_worker_given_an_object_storage_servers_address_says_so_and_exits_not_to_be_replaced(
    storage_server, start_worker
):
    worker = start_worker(storage_server.address, "--worker-timeout-seconds", NEVER)
    assert worker.wait(60) == 78
    assert (
        f"{storage_server.address} is an object storage server, not a scheduler" in open(start_worker.log_path).read()
    )


def test_a_hello_ack_from_a_peer_that_is_not_a_scheduler_ends_the_worker(scheduler: FakeScheduler, start_worker):
    worker = start_worker(scheduler.address)
    identity, _ = scheduler.expect(m.Hello)
    scheduler.send(identity, m.HelloAck(PROTOCOL_VERSION, "", 0.0, 0.0, m.PeerRole.MONITOR))
    assert worker.wait(60) == 78
    assert f"{scheduler.address} is a monitor, not a scheduler" in open(start_worker.log_path).read()
