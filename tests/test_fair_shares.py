"""Fair shares with real processes (issue 25): one client cannot take all of the storage server's memory nor
all of the scheduler's queue. A greedy client reaches its quota and is told so, naming the quota and the
option that raises it, while another client's work goes on."""

from __future__ import annotations

import time
from typing import List

import pytest
import zmq
from cluster_processes import next_snapshot, wait_until, worker_count
from raw_peers import RawClient, RawPeer, identity

from scaler import Client, SchedulerClusterCombo
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import ObjectStorageRefusedError

MIB = 1 << 20


def size_of(data: bytes) -> int:
    return len(data)


def make_bytes(size: int) -> bytes:
    return bytes(size)


@pytest.fixture
def shared_cluster(processes, address):
    """A storage server of 64 MiB whose clients may hold 16 MiB each, a scheduler, one worker."""
    host, _, port = address.rpartition(":")
    processes.storage(f"{host}:{int(port) + 1}", "--max-memory", "64M", "--max-client-memory", "16M")
    processes.scheduler(address)
    processes.cluster(address, 1)
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    return address


def test_a_client_at_its_storage_quota_is_refused_naming_it_and_another_client_goes_on(shared_cluster):
    # the greedy client's put waits for room its whole timeout (its own tasks' ends would free some), then fails;
    # a worker's result over the quota fails its task at once, so that no worker waits on one client's share
    with Client(shared_cluster, timeout_seconds=5) as greedy, Client(shared_cluster, timeout_seconds=30) as other:
        kept: List[object] = []
        with pytest.raises(ObjectStorageRefusedError) as refused:
            for _ in range(64):  # 64 x 4 MiB would fill the whole server
                kept.append(greedy.send_object(bytes(4 * MIB)))
        assert len(kept) == 3  # a fourth of 4 MiB and its pickle's few bytes would take it over 16 MiB
        assert "does not fit in the quota of its owner" in str(refused.value)
        assert "(scaler_object_storage_server --max-client-memory)" in str(refused.value)
        with pytest.raises(ObjectStorageRefusedError, match="--max-client-memory"):
            greedy.submit(make_bytes, 8 * MIB).result(timeout=60)  # its result would be its own too

        arguments = [bytes(MIB + n) for n in range(12)]  # large: through storage, as the results
        assert other.map(size_of, [(argument,) for argument in arguments]) == [len(a) for a in arguments]
        assert len(other.submit(make_bytes, 8 * MIB).result(timeout=60)) == 8 * MIB

        def greedy_shown() -> bool:  # the monitor: what each client holds, beside the quotas
            snapshot = next_snapshot(default_monitor_address(shared_cluster))
            if snapshot is None or snapshot.client_memory_quota != 16 * MIB:
                return False
            stored = {client.client_id: client.stored_bytes for client in snapshot.client_snapshots}
            return 12 * MIB <= stored.get(greedy.client_id, 0) <= 16 * MIB

        wait_until(greedy_shown, 30, "the greedy client's objects in the monitor's snapshot")


# --- the scheduler's queue ------------------------------------------------------------------------------------

QUOTA = 50  # the scheduler's --max-client-tasks here


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def square(x: int) -> int:
    return x * x


@pytest.fixture
def queue_quota_cluster(processes, address):
    """A scheduler (which starts its storage server) whose clients may have 50 tasks each there, one worker."""
    processes.scheduler(address, "--max-client-tasks", str(QUOTA))
    processes.cluster(address, 1)
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    return address


def test_a_map_larger_than_the_quota_runs_whole(queue_quota_cluster):
    """The client holds back what is over its quota and sends it as tasks end: the scheduler refuses nothing."""
    with Client(queue_quota_cluster, timeout_seconds=30) as client:
        assert client.map(square, [(i,) for i in range(20 * QUOTA)]) == [i * i for i in range(20 * QUOTA)]


def test_a_client_over_its_quota_is_refused_naming_it_and_another_clients_work_goes_on(queue_quota_cluster):
    """A client that does not hold back (made by hand, as any peer before 1.8) has what is over its quota refused;
    another client's tasks still run."""
    context = zmq.Context()
    greedy = RawClient(context, queue_quota_cluster, default_storage_address(queue_quota_cluster))
    try:
        greedy.connect()
        tasks = [greedy.task(nap, 0.05) for _ in range(3 * QUOTA)]
        greedy.scheduler.send(m.TaskBatch(tasks))
        with Client(queue_quota_cluster, timeout_seconds=30) as other:
            assert other.map(square, [(i,) for i in range(3 * QUOTA)]) == [i * i for i in range(3 * QUOTA)]
        results = greedy.results(len(tasks))
        refused = [r for r in results.values() if r.status == m.TaskStatus.REJECTED]
        assert len(refused) == 2 * QUOTA
        assert all(
            f"has its quota of {QUOTA} tasks queued here (scaler_scheduler --max-client-tasks)" in r.error_text
            for r in refused
        )
        assert sum(r.status == m.TaskStatus.SUCCESS for r in results.values()) == QUOTA
    finally:
        greedy.close()
        context.term()


def test_the_combo_sets_both_quotas():
    combo = SchedulerClusterCombo(n_workers=1, max_client_tasks=5, max_client_memory=8 * MIB, logging_level="WARNING")
    context = zmq.Context()
    peers = [
        RawPeer(context, address, identity("C"))
        for address in (combo.get_address(), default_storage_address(combo.get_address()))
    ]
    try:
        acks = [peer.hello(m.PeerRole.CLIENT) for peer in peers]
        assert [ack.client_quota for ack in acks] == [5, 8 * MIB]
        with Client(combo.get_address(), timeout_seconds=30) as client:
            assert client.map(square, [(i,) for i in range(40)]) == [i * i for i in range(40)]
    finally:
        for peer in peers:
            peer.close()
        context.term()
        combo.shutdown()
