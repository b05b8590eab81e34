"""Fair shares with real processes (issue 25): one client cannot take all of the storage server's memory nor
all of the scheduler's queue. A greedy client reaches its quota and is told so, naming the quota and the
option that raises it, while another client's work goes on."""

from __future__ import annotations

from typing import List

import pytest
from cluster_processes import wait_until, worker_count

from scaler import Client
from scaler.protocol.addresses import default_monitor_address
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
    with Client(shared_cluster, timeout_seconds=30) as greedy, Client(shared_cluster, timeout_seconds=30) as other:
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
