"""A rolling upgrade: the last release's scheduler (releases.toml) replaced by the current one under a running job.

The job's client and workers are the current ones (they wait for a lost scheduler and resume with the one that
comes back, whatever version the lost one was); the object storage server runs on its own, so that it outlives
the schedulers. The release's scheduler is killed (SIGKILL, as a crash or an impatient upgrade does) while
tasks run, the current one starts on its address, and every future ends with its right value, each once.
"""

from __future__ import annotations

import logging
import os
import signal
import time

from cluster_processes import wait_until
from peers import peer_bin, start_workers, wait_for_workers

from scaler import Client
from scaler.protocol.addresses import default_storage_address


def square(value: int) -> int:
    time.sleep(0.05)
    return value * value


def length(data: bytes) -> int:
    return len(data)


def test_the_releases_scheduler_replaced_by_the_current_one_under_a_running_job_loses_nothing(
    peers_are_built, processes, address, tmp_path
):
    storage = default_storage_address(address)
    processes.storage(storage, log_path=str(tmp_path / "storage.log"))
    previous_scheduler = os.path.join(peer_bin("previous"), "scaler_scheduler")
    previous = processes.start(
        previous_scheduler, address, "--object-storage-address", storage, log_path=str(tmp_path / "previous.log")
    )
    start_workers(processes, "current", address, 2, str(tmp_path / "cluster.log"))
    wait_for_workers(address, 2)
    dropped = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: dropped.append(record) if "dropped result" in record.getMessage() else None
    client_logger = logging.getLogger("scaler.client.tasks_in_flight")
    client_logger.setLevel(logging.DEBUG)
    client_logger.addHandler(handler)
    try:
        with Client(address=address, timeout_seconds=30) as client:
            data = client.send_object(b"u" * 200_000)
            futures = [client.submit(square, i) for i in range(150)] + [client.submit(length, data) for _ in range(5)]
            graph = client.get({"a": 3, "b": (square, "a"), "c": (square, "b")}, keys=["c"], block=False)
            wait_until(lambda: sum(f.done() for f in futures) >= 30, 120, "the first results")
            previous.send_signal(signal.SIGKILL)
            previous.wait(30)
            processes.scheduler(address, "--object-storage-address", storage, log_path=str(tmp_path / "current.log"))
            assert [f.result(timeout=120) for f in futures] == [i * i for i in range(150)] + [200_000] * 5
            assert graph["c"].result(timeout=120) == 81
            assert client.submit(square, 12).result(timeout=60) == 144  # and it goes on with the new one
    finally:
        client_logger.removeHandler(handler)
    assert dropped == [], "a result reached the client twice"
    assert "from before it lost its scheduler" in (tmp_path / "current.log").read_text()
