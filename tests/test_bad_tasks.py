"""One bad task never hurts another (issue 11, item 2): a task that cannot be read is refused alone, and a task
a worker does not hold is queued again from its heartbeat. Real scheduler, storage and workers; the bad peers
are made by hand (raw_peers.py)."""

from __future__ import annotations

import zmq
from cluster_processes import wait_until, worker_count
from raw_peers import RawClient, RawPeer, identity, value_of, without_nul

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, default_storage_address


def square(value: int) -> int:
    return value * value


def test_a_task_that_cannot_be_read_is_refused_to_its_client_alone_and_every_other_task_runs(processes, address):
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 1)
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    context = zmq.Context()
    raw = RawClient(context, address, storage)
    try:
        raw.connect()
        first, damaged, last = raw.task(square, 2), raw.task(square, 3), raw.task(square, 4)
        damaged.arguments[0].name = "named"
        frame = codec.encode(m.TaskBatch([first, damaged, last]))[0]
        with Client(address=address) as other:
            others = [other.submit(square, i) for i in range(20)]
            raw.scheduler.send_frames([without_nul(frame, b"named")])
            results = raw.results(3)
            assert [f.result(timeout=60) for f in others] == [i * i for i in range(20)]
        refused = results[damaged.task_id]
        assert refused.status == m.TaskStatus.REJECTED
        assert refused.error_text == (
            "the scheduler refused this task: it cannot be read: arguments[0].name: "
            "a text field lacks its terminating NUL byte"
        )
        assert value_of(results[first.task_id]) == 4 and value_of(results[last.task_id]) == 16
    finally:
        raw.close()
        context.destroy(linger=0)


def test_a_task_a_worker_does_not_hold_is_queued_again_from_its_heartbeat(processes, address):
    """The worker (by hand) answers two of the three tasks it is sent and loses the third: its heartbeat says so,
    and the scheduler sends that task again, with a new attempt. Worker timeout 600 s: only the heartbeat can
    bring it back."""
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage, "--worker-timeout-seconds", "600")
    context = zmq.Context()
    worker = RawPeer(context, address, identity("W"))
    client = RawClient(context, address, storage)
    try:
        assert type(worker.hello(m.PeerRole.WORKER)) is m.HelloAck
        client.connect()
        tasks = [m.Task(task_id=bytes([n]) * 16, function_id=b"f" * 16) for n in (1, 2, 3)]
        client.scheduler.send(m.TaskBatch(tasks))
        batch = worker.expect(m.TaskBatch)
        assert batch.sequence == 1 and len(batch.tasks) == 3
        kept, lost = batch.tasks[::2], batch.tasks[1]
        worker.send(m.TaskResultBatch([_done(task) for task in kept]))
        worker.send(m.WorkerHeartbeat(last_batch=batch.sequence, held_tasks=0, held_digest=0))
        again = worker.expect(m.TaskBatch, timeout=30)
        assert [(t.task_id, t.attempt) for t in again.tasks] == [(lost.task_id, 2)] and again.sequence == 2
        worker.send(m.TaskResultBatch([_done(again.tasks[0])]))
        results = client.results(3)
        assert {task_id: result.attempt for task_id, result in results.items()} == {
            tasks[0].task_id: 1, tasks[1].task_id: 2, tasks[2].task_id: 1,
        }  # fmt: skip
    finally:
        worker.close()
        client.close()
        context.destroy(linger=0)


def _done(task: m.Task) -> m.TaskResult:
    return m.TaskResult(task.task_id, task.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.NONE, b"", "")
