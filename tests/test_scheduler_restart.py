"""A scheduler killed (SIGKILL) and started again on its address loses no work (docs/scheduling.md, "Restarts").

Real processes: an object storage server of its own (the scheduler alone restarts; what the storage server does
when it restarts is tested below), a scheduler, two workers, and the client in this process. The clients and
workers wait for the scheduler to come back, say Hello again, and the clients send again what has not ended: every
future ends with its right value, and no result reaches a client twice (the client logs each result it drops as
one it already had, and none is dropped). Every kind of work at once, so that one restart costs one cluster:
`map` and `submit`, a graph partly run, nested tasks whose parents wait in their processors, tasks whose
arguments are in object storage; and the same with keys.
"""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import time
from typing import Any, Dict, List

import psutil
import pytest
from cluster_processes import next_snapshot, wait_until, worker_count
from keyed_clusters import Cluster

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import ObjectNotFoundError
from scaler.protocol.keygen import write_cluster_keys

TASK_SECONDS = 0.05


def square(value: int) -> int:
    time.sleep(TASK_SECONDS)
    return value * value


def add(a: int, b: int) -> int:
    time.sleep(TASK_SECONDS)
    return a + b


def total(values: List[int]) -> int:
    return sum(values)


def length(data: bytes) -> int:
    time.sleep(TASK_SECONDS)
    return len(data)


def fan_out(count: int) -> int:
    """A parent task: its children run while it waits in its processor (a Client made in a task)."""
    from scaler import Client

    inner = Client()
    return sum(inner.map(square, [(i,) for i in range(count)]))


def graph_of(width: int) -> Dict[str, Any]:
    graph: Dict[str, Any] = {f"a{i}": (square, i) for i in range(width)}
    graph.update({f"b{i}": (add, f"a{i}", f"a{i + 1}") for i in range(width - 1)})
    graph["total"] = (total, [f"b{i}" for i in range(width - 1)])
    return graph


class DroppedResults(logging.Handler):
    """Counts the results the client drops as ones it already had (or never asked for)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "dropped result of unknown or finished task" in record.getMessage():
            self.count += 1


@pytest.fixture
def dropped():
    handler = DroppedResults()
    client_logger = logging.getLogger("scaler.client.tasks_in_flight")
    level = client_logger.level
    client_logger.setLevel(logging.DEBUG)
    client_logger.addHandler(handler)
    try:
        yield handler
    finally:
        client_logger.removeHandler(handler)
        client_logger.setLevel(level)


def start(processes, address: str, tmp_path, secure: bool = False) -> Cluster:
    """Storage, scheduler (told the storage's address) and two workers; with keys when ``secure``."""
    keys = write_cluster_keys(str(tmp_path / "keys")) if secure else None
    cluster = Cluster(address, keys, str(tmp_path / "scheduler-1.log"))
    server = keys.server.to_arguments() if keys else []
    processes.storage(default_storage_address(address), *server, probe=cluster.security("client"),
                      log_path=str(tmp_path / "storage.log"))  # fmt: skip
    restart(processes, cluster, 1)
    processes.cluster(address, 2, *cluster.security("worker").to_arguments(), log_path=str(tmp_path / "cluster.log"))
    wait_until(lambda: worker_count(cluster.monitor_address, 5, cluster.security("monitor")) == 2, 60, "2 workers")
    return cluster


def restart(processes, cluster: Cluster, number: int) -> None:
    """Start scheduler ``number`` (1: the first) on the cluster's address."""
    server = cluster.keys.server.to_arguments() if cluster.keys else []
    log_path = cluster.log_path.replace("-1.log", f"-{number}.log")
    processes.scheduler(cluster.address, "--object-storage-address", default_storage_address(cluster.address),
                        *server, probe=cluster.security("client"), log_path=log_path)  # fmt: skip


def clients_connected(cluster: Cluster) -> int:
    snapshot = next_snapshot(cluster.monitor_address, 5, cluster.security("monitor"))
    return snapshot.clients if snapshot is not None else 0


def kill_scheduler(processes) -> None:
    scheduler = [p for p in processes.processes if "scaler_scheduler" in p.args[0] and p.poll() is None]
    for process in scheduler:
        process.send_signal(signal.SIGKILL)
        process.wait(30)


def test_a_scheduler_killed_twice_under_every_kind_of_work_loses_none_and_delivers_each_result_once(
    processes, address, tmp_path, dropped
):
    cluster = start(processes, address, tmp_path)
    with Client(address=address, timeout_seconds=30) as client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        data = client.send_object(b"x" * 200_000, name="data")
        nested = [client.submit(fan_out, 10) for _ in range(3)]
        submitted = [client.submit(square, i) for i in range(150)]
        mapped = pool.submit(client.map, square, [(i,) for i in range(150)])
        graph = client.get(graph_of(40), keys=["total", "b3"], block=False)
        stored = [client.submit(length, data) for _ in range(20)]
        futures = [*submitted, *graph.values(), *nested, *stored]
        # the first kill while a parent task waits for its children (a Client made in it is connected)
        wait_until(lambda: clients_connected(cluster) >= 2, 120, "a parent task's Client")
        for number, share in ((2, 0.0), (3, 0.6)):  # killed early, then again once the work sent again runs
            wait_until(lambda share=share: sum(f.done() for f in futures) >= share * len(futures), 120, "progress")
            kill_scheduler(processes)
            restart(processes, cluster, number)
        assert [f.result(timeout=120) for f in submitted] == [i * i for i in range(150)]
        assert mapped.result(timeout=120) == [i * i for i in range(150)]
        width = 40
        expected_b = [i * i + (i + 1) ** 2 for i in range(width - 1)]
        assert {key: future.result(timeout=120) for key, future in graph.items()} == {
            "total": sum(expected_b), "b3": expected_b[3]
        }  # fmt: skip
        assert [f.result(timeout=120) for f in nested] == [sum(i * i for i in range(10))] * 3
        assert [f.result(timeout=120) for f in stored] == [200_000] * 20
        assert client.connected
    assert dropped.count == 0, f"{dropped.count} result(s) reached the client twice"
    second = (tmp_path / "scheduler-2.log").read_text()
    assert "from before it lost its scheduler" in second  # the workers said what they held


def test_with_keys_clients_and_workers_come_back_with_the_same_keys_and_a_client_waits_at_most_its_bound(
    processes, address, tmp_path, dropped
):
    cluster = start(processes, address, tmp_path, secure=True)
    keys = cluster.keys.client
    with Client(address=address, timeout_seconds=30, security=keys) as client:
        data = client.send_object(b"y" * 100_000)
        futures = [client.submit(square, i) for i in range(100)] + [client.submit(length, data) for _ in range(10)]
        futures += [client.submit(fan_out, 5)]
        wait_until(lambda: sum(f.done() for f in futures) >= 20, 120, "the first results")
        kill_scheduler(processes)
        restart(processes, cluster, 2)
        assert [f.result(timeout=120) for f in futures] == [i * i for i in range(100)] + [100_000] * 10 + [30]
    assert dropped.count == 0
    with Client(address=address, timeout_seconds=30, security=keys, reconnect_seconds=2) as client:
        future = client.submit(time.sleep, 3600)
        kill_scheduler(processes)  # and not started again
        error = future.exception(timeout=60)
    assert str(error) == f"lost the connection to the scheduler at {address}, which did not come back within 2s"


# --- the object storage server restarts -------------------------------------------------------------------


def storage_and_scheduler(processes, address: str, tmp_path, *storage_options: str):
    storage = default_storage_address(address)
    process = processes.storage(storage, *storage_options, log_path=str(tmp_path / "storage-1.log"))
    processes.scheduler(address, "--object-storage-address", storage, log_path=str(tmp_path / "scheduler.log"))
    processes.cluster(address, 1, log_path=str(tmp_path / "cluster.log"))
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    return storage, process


def restart_storage(processes, storage: str, process, tmp_path, *options: str) -> None:
    processes.kill_group(process, signal.SIGKILL)
    process.wait(30)
    processes.storage(storage, *options, log_path=str(tmp_path / "storage-2.log"))


def test_a_storage_server_with_a_directory_keeps_its_objects_when_it_restarts(processes, address, tmp_path):
    directory = ["--object-directory", str(tmp_path / "objects")]
    storage, process = storage_and_scheduler(processes, address, tmp_path, *directory)
    with Client(address=address, timeout_seconds=30) as client:
        assert client.submit(square, 5).result(timeout=60) == 25
        data = client.send_object(b"z" * 300_000)  # in storage, not read by any worker yet
        restart_storage(processes, storage, process, tmp_path, *directory)
        assert client.submit(length, data).result(timeout=60) == 300_000  # kept there, and its function
        assert client.submit(square, 7).result(timeout=60) == 49


def test_a_storage_server_without_a_directory_restarts_empty_and_tasks_that_need_what_it_held_fail_naming_it(
    processes, address, tmp_path
):
    storage, process = storage_and_scheduler(processes, address, tmp_path)
    with Client(address=address, timeout_seconds=30) as client:
        assert client.submit(square, 5).result(timeout=60) == 25
        data = client.send_object(b"w" * 300_000)  # in storage, not read by any worker yet
        restart_storage(processes, storage, process, tmp_path)
        error = client.submit(length, data).exception(timeout=60)
        assert isinstance(error, ObjectNotFoundError) and data.object_id.hex() in str(error), error
        assert client.submit(square, 6).result(timeout=60) == 36  # the function is put again


def test_the_storage_server_a_scheduler_starts_keeps_its_objects_in_the_schedulers_object_directory(
    processes, address, tmp_path
):
    """``scaler_scheduler --object-directory``: the storage server it starts (none given) keeps every object there,
    dies with the scheduler, and the one the next scheduler starts serves them again."""
    directory = ["--object-directory", str(tmp_path / "objects")]
    scheduler = processes.scheduler(address, *directory, log_path=str(tmp_path / "scheduler-1.log"))
    processes.cluster(address, 1, log_path=str(tmp_path / "cluster.log"))
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    started = psutil.Process(scheduler.pid).children(recursive=True)
    assert [child.cmdline()[1:3] for child in started] == [["-m", "scaler.storage"]]  # the storage server it started
    with Client(address=address, timeout_seconds=30) as client:
        assert client.submit(square, 5).result(timeout=60) == 25
        data = client.send_object(b"y" * 300_000)  # in storage, not read by any worker yet
        scheduler.send_signal(signal.SIGKILL)
        scheduler.wait(30)
        psutil.wait_procs(started, timeout=30)
        assert not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in started)
        processes.scheduler(address, *directory, log_path=str(tmp_path / "scheduler-2.log"))
        assert client.submit(length, data).result(timeout=60) == 300_000  # kept there, and its function

