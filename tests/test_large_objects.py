"""Objects as large as the user needs (issue 28): the maximum object size is an option of the combo (and of
every command), its refusal names it, and a result of more than 1 GiB flows with the cap raised; a storage
server spills what is past its memory budget to disk and reads it back right; a client holds a large result
once; a client and a worker whose objects a full storage server refuses wait for room."""

from __future__ import annotations

import hashlib
import os
import re

import pytest
from cluster_processes import wait_until

from scaler import Client, ObjectStorageRefusedError, SchedulerClusterCombo
from scaler.protocol.addresses import default_storage_address

MIB = 1 << 20


def make(size: int) -> bytes:
    return b"\x01" * size


def test_the_maximum_object_size_is_the_combos_and_its_refusal_names_it():
    combo = SchedulerClusterCombo(n_workers=1, max_object_size="1MiB", logging_paths=("/dev/null",))
    try:
        with Client(address=combo.get_address(), timeout_seconds=60) as client:
            with pytest.raises(ObjectStorageRefusedError) as error:
                client.submit(make, 2 * MIB).result(timeout=60)
            assert client.submit(make, MIB // 2).result(timeout=60) == make(MIB // 2)
    finally:
        combo.shutdown()
    text = str(error.value)
    assert "over the maximum object size of 1.0 MiB" in text and "max_object_size=" in text


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


def test_a_result_of_more_than_a_gibibyte_flows_with_the_cap_raised_and_the_client_holds_it_once():
    size = (1 << 30) + 64 * MIB
    combo = SchedulerClusterCombo(n_workers=1, max_object_size="2GiB", logging_paths=("/dev/null",))
    try:
        with Client(address=combo.get_address(), timeout_seconds=120) as client:
            future = client.submit(make, size)
            before = _status_bytes("VmRSS")
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # this process's peak (VmHWM) starts again from now
            result = future.result(timeout=300)
            peak = _status_bytes("VmHWM") - before
            assert len(result) == size and result[:1] == result[-1:] == b"\x01"
            assert result.count(0) == 0
            del result
    finally:
        combo.shutdown()
    assert peak <= 1.1 * size  # the bytes is made out of the received frame, whose pages go as it is copied


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_three_times_the_storage_servers_memory_flow_through_it_and_every_object_reads_back_right(
    processes, address, tmp_path
):
    """The storage server holds 64 MiB in memory; 24 objects of 8 MiB (192 MiB) go to it and are all read by
    tasks, the first ones long after they were spilled to disk."""
    storage = default_storage_address(address)
    spill = tmp_path / "spill"
    processes.storage(storage, "--memory-limit", "64M", "--spill-directory", str(spill))
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 1, "--memory-limit", "none")
    objects = [bytes([index]) * (8 * MIB - index) for index in range(24)]
    with Client(address=address, timeout_seconds=60) as client:
        references = [client.send_object(data) for data in objects]
        [spill_files] = [os.listdir(spill / name) for name in os.listdir(spill)]
        assert len(spill_files) >= 16  # at most 8 of 8 MiB fit in 64 MiB
        digests = client.map(digest, [(reference,) for reference in references])
        assert digests == [hashlib.sha256(data).hexdigest() for data in objects]


def test_a_client_whose_arguments_fill_the_storage_server_waits_for_room_instead_of_failing(processes, address):
    """16 MiB of memory, no spilling: 24 tasks of a 4 MiB argument each are more than it holds at once; the
    client's puts are refused (storage full) and go again as finished tasks free their arguments."""
    storage = default_storage_address(address)
    processes.storage(storage, "--memory-limit", "16M", "--spill-directory", "none")
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 1, "--memory-limit", "none")
    arguments = [bytes([index]) * (4 * MIB) for index in range(24)]
    with Client(address=address, timeout_seconds=60) as client:
        digests = client.map(digest, [(argument,) for argument in arguments])
    assert digests == [hashlib.sha256(argument).hexdigest() for argument in arguments]


def tagged(index: int) -> bytes:
    return bytes([index]) * (4 * MIB)


def test_a_workers_results_refused_by_a_full_storage_server_are_held_and_put_again(processes, address, tmp_path):
    """24 MiB of memory, no spilling, and another client's 22 MiB in it: the worker's results of 4 MiB (over the
    inline threshold: they go through storage) are refused, held and put again; once that client leaves (its
    object freed), they are stored and reach their client, each right."""
    storage = default_storage_address(address)
    log = tmp_path / "storage.log"
    processes.storage(storage, "--memory-limit", "24M", "--spill-directory", "none", "--max-client-memory", "64M",
                      log_path=str(log))  # fmt: skip
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 1, "--memory-limit", "none")
    with Client(address=address, timeout_seconds=60) as client:
        with Client(address=address, timeout_seconds=60) as other:
            other.send_object(b"\x00" * (22 * MIB))
            futures = [client.submit(tagged, index) for index in range(3)]

            def refused() -> bool:
                text = log.read_text()
                return "put from W|" in text and "does not fit: storage holds" in text

            wait_until(refused, 30, "a result of the worker refused by the full storage server")
            assert not any(future.done() for future in futures)  # held by the worker, not failed
        results = [future.result(timeout=60) for future in futures]
    assert results == [tagged(index) for index in range(3)]
