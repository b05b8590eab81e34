"""A real worker agent (and processor) on failures, driven by a fake scheduler: a task it cannot read, a
scheduler whose connection closes, a HelloAck from the wrong kind of peer; an effect that fails, in the worker's
agent and in a worker manager's. (A storage server that restarts:
tests/test_failure_detection.py, with real processes.)"""

from __future__ import annotations

import logging
from typing import List

import pytest
import worker_tasks as tasks
from worker_harness import FakeScheduler, TaskDriver

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker import WorkerAgent, WorkerConfig
from scaler.worker_manager.manager_agent import ManagerAgent
from scaler.worker_manager.manager_core import ManagerSettings

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


class _Works:
    """An effect whose handler works (the test's)."""


class _Fails:
    """An effect whose handler raises (the test's)."""


def _broken(effect: object) -> None:
    raise RuntimeError("cannot carry this out")


@pytest.mark.parametrize("agent_kind", ["worker", "worker manager"])
def test_an_effect_that_fails_is_dropped_alone_and_the_agent_goes_on(agent_kind, monkeypatch, caplog):
    """The reader, the watch and the clock of an agent deliver through one method: an effect that fails there
    is logged and dropped, and the effects after it are carried out (nothing stops the agent's loop)."""
    if agent_kind == "worker":
        agent: object = WorkerAgent(WorkerConfig("tcp://127.0.0.1:1"), handle_signals=False)
        handlers = agent._effect_handlers  # type: ignore[attr-defined]
    else:
        settings = ManagerSettings("tcp://127.0.0.1:1", "native", workers_per_group=1, max_groups=1)
        agent = ManagerAgent(settings, None)  # type: ignore[arg-type]  # no group is started
        handlers = agent._effects  # type: ignore[attr-defined]
    done: List[object] = []
    monkeypatch.setitem(handlers, _Fails, _broken)
    monkeypatch.setitem(handlers, _Works, done.append)
    monkeypatch.setattr(agent._core, "handle", lambda event, now: [_Fails(), _Works()])  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR):
        agent._deliver(object())  # type: ignore[attr-defined]
    assert [type(effect) for effect in done] == [_Works]
    assert "failed to carry out _Fails" in caplog.text and "cannot carry this out" in caplog.text
