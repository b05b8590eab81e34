"""scaler_symphony_cluster on a real scheduler, storage server and client, its tasks run by the fake Symphony.

The worker runs as its own process with the fake `soamapi` on its PYTHONPATH (packages/soamapi-fake). Its
Scaler service runs on threads of the worker's process (quick, and a task there can reach the fake grid to
inject a failure) or, where the service program itself or a process's end matters, as `python -m
scaler.symphony.service` processes. The grid records what it did (`record`): the tests read how many tasks
ran at once in Symphony from there.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import psutil
import pytest
import soamapi_fake
from cluster_processes import next_snapshot, wait_until, worker_count

from scaler import Client
from scaler.protocol.addresses import default_monitor_address
from scaler.protocol.errors import RemoteTaskError, TaskTimeoutError, WorkerDiedError

APPLICATION = "ScalerApp"
THREAD_SERVICE = "scaler.symphony.service:ScalerService"
PROCESS_SERVICE = [sys.executable, "-m", "scaler.symphony.service"]


class SymphonyWorker:
    """A scaler_symphony_cluster process and the fake grid it runs its tasks on."""

    def __init__(self, process: Any, directory: Path) -> None:
        self.process = process
        self.record = directory / "grid.jsonl"
        self.log = directory / "symphony.log"

    def events(self, kind: str = "") -> List[Dict[str, Any]]:
        if not self.record.exists():
            return []
        events = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [event for event in events if not kind or event["event"] == kind]

    def max_running(self) -> int:
        return max((event["running"] for event in self.events("start")), default=0)


@pytest.fixture
def cluster(processes, address, tmp_path, monkeypatch):
    """Starts a scheduler and one Symphony worker of it:
    ``cluster(base_concurrency, mode="thread", scheduler_options=())``; then ``Client(address)`` reaches them."""

    def start(base_concurrency: int, mode: str = "thread", scheduler_options: Sequence[str] = ()) -> SymphonyWorker:
        processes.scheduler(address, *scheduler_options, log_path=str(tmp_path / "scheduler.log"))
        service = THREAD_SERVICE if mode == "thread" else PROCESS_SERVICE
        config = {
            "applications": [{"name": APPLICATION, "service": service, "mode": mode}],
            "record": str(tmp_path / "grid.jsonl"),
        }
        monkeypatch.setenv("PYTHONPATH", soamapi_fake.shim_path())
        monkeypatch.setenv(soamapi_fake.CONFIG_VARIABLE, json.dumps(config))
        process = processes.start(
            "scaler_symphony_cluster", address, APPLICATION, "--base-concurrency", str(base_concurrency),
            log_path=str(tmp_path / "symphony.log"),
        )  # fmt: skip
        monitor = default_monitor_address(address)
        wait_until(lambda: process.poll() is None and worker_count(monitor) == 1, 60, "the Symphony worker")
        return SymphonyWorker(process, tmp_path)

    return start


def _assigned(address: str) -> int:
    """Tasks the scheduler has assigned to its workers, as its next monitor snapshot says."""
    snapshot = next_snapshot(default_monitor_address(address), timeout=10)
    return -1 if snapshot is None else sum(worker.assigned_tasks for worker in snapshot.workers)


# ----------------------------------------------------------------------------- task functions


def square(value: int) -> int:
    return value * value


def add(a: int, b: int) -> int:
    return a + b


def fibonacci(client: Client, n: int) -> int:
    if n < 2:
        return n
    a = client.submit(fibonacci, client, n - 1)
    b = client.submit(fibonacci, client, n - 2)
    return a.result() + b.result()


def _keywords(a: int, b: bytes = b"") -> Any:
    return a, b


def hold(directory: str, tag: str) -> str:
    """Mark this task started, then wait for the release file of ``directory`` (a minute at most)."""
    open(os.path.join(directory, "started", tag), "a").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(directory, "release")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return tag


def end_the_session_once(marker: str) -> str:
    """The first run ends the worker's Symphony session (the fake grid runs this task in the worker's process)."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        soamapi_fake.grid().abort_sessions("injected by the test")
    return "survived"


def fails() -> None:
    raise ValueError("bad input")


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception does not pickle")


def raises_unpicklable() -> None:
    raise Unpicklable("odd")


def returns_a_lock() -> Any:
    return threading.Lock()


def _holding(tmp_path: Path) -> Path:
    (tmp_path / "held" / "started").mkdir(parents=True)
    return tmp_path / "held"


def _started(held: Path) -> List[str]:
    return sorted(path.name for path in (held / "started").iterdir())


# ----------------------------------------------------------------------------- tests


def test_a_map_of_a_thousand_tasks_keeps_at_most_base_concurrency_tasks_in_symphony(cluster, address):
    worker = cluster(4)
    with Client(address=address, timeout_seconds=60) as client:
        assert client.map(square, [(value,) for value in range(1000)]) == [value * value for value in range(1000)]
    assert len(worker.events("start")) == 1000
    assert 1 <= worker.max_running() <= 4


def test_tasks_wait_for_room_under_the_base_concurrency(cluster, address, tmp_path):
    worker = cluster(2)
    held = _holding(tmp_path)
    with Client(address=address, timeout_seconds=60) as client:
        futures = [client.submit(hold, str(held), str(number)) for number in range(5)]
        wait_until(lambda: len(_started(held)) == 2, 60, "two tasks to run")
        (held / "release").touch()
        assert sorted(future.result(timeout=60) for future in futures) == [str(number) for number in range(5)]
    assert worker.max_running() == 2  # two ran together while held, never more


def test_object_references_large_arguments_and_large_results_go_through_object_storage(cluster, address):
    cluster(2)
    large = bytes(range(256)) * 4096  # 1 MiB: stored, not inline
    with Client(address=address, timeout_seconds=60) as client:
        reference = client.send_object(list(range(1000)), name="numbers")
        assert client.submit(sum, reference).result(timeout=60) == sum(range(1000))
        assert client.submit(len, large).result(timeout=60) == len(large)
        assert client.submit(bytes.upper, large).result(timeout=60) == large.upper()
        assert client.submit_verbose(_keywords, (1,), {"b": large[:5]}).result(timeout=60) == (1, large[:5])


def test_a_graph_runs_on_symphony(cluster, address):
    cluster(2)
    graph = {"a": 2, "b": (square, "a"), "c": (add, "a", "b"), "d": (add, "c", "c")}
    with Client(address=address, timeout_seconds=60) as client:
        assert client.get(graph, keys=["d", "b"]) == {"d": 12, "b": 4}


@pytest.mark.parametrize("base_concurrency", [1, 2])
def test_nested_fibonacci_runs_past_the_base_concurrency(cluster, address, base_concurrency):
    worker = cluster(base_concurrency)
    with Client(address=address, timeout_seconds=60) as client:
        assert client.submit(fibonacci, client, 10).result(timeout=240) == 55
    assert len(worker.events("start")) == 177  # every task of the tree ran once
    # parents waiting in Symphony while their children ran there: more at once than the base concurrency
    assert worker.max_running() > base_concurrency


def test_cancel_removes_a_queued_task_and_aborts_a_running_one(cluster, address, tmp_path):
    worker = cluster(1, "process")
    held = _holding(tmp_path)
    with Client(address=address, timeout_seconds=60) as client:
        running = client.submit(hold, str(held), "running")
        wait_until(lambda: _started(held) == ["running"], 60, "the first task to run")
        queued = client.submit(hold, str(held), "queued")
        wait_until(lambda: _assigned(address) == 2, 60, "the second task to wait in the worker")
        assert queued.cancel() and queued.cancelled()
        assert running.cancel() and running.cancelled()
        wait_until(lambda: worker.events("abort"), 60, "the running task to be aborted in Symphony")
        assert client.submit(square, 3).result(timeout=60) == 9  # the one place is free again
    assert _started(held) == ["running"]  # the queued task never ran
    [submitted, _] = worker.events("submit")
    assert [event["task"] for event in worker.events("abort")] == [submitted["task"]]


def test_a_task_that_outlives_its_timeout_is_aborted_in_symphony(cluster, address, tmp_path):
    worker = cluster(1, "process")
    held = _holding(tmp_path)
    with Client(address=address, timeout_seconds=60) as client:
        late = client.submit_verbose(hold, (str(held), "late"), timeout_seconds=1)
        with pytest.raises(TaskTimeoutError):
            late.result(timeout=60)
        wait_until(lambda: worker.events("abort"), 60, "the task to be aborted in Symphony")
        assert client.submit(square, 6).result(timeout=60) == 36  # its place is free again
    assert _started(held) == ["late"]


def test_exceptions_and_results_that_cannot_travel_reach_the_client_as_errors(cluster, address):
    cluster(2)
    with Client(address=address, timeout_seconds=60) as client:
        with pytest.raises(ValueError, match="bad input") as raised:
            client.submit(fails).result(timeout=60)
        assert any("Traceback in the Symphony service" in note for note in getattr(raised.value, "__notes__", []))
        with pytest.raises(RemoteTaskError, match="Unpicklable: odd"):
            client.submit(raises_unpicklable).result(timeout=60)
        with pytest.raises(TypeError, match="lock"):
            client.submit(returns_a_lock).result(timeout=60)
        assert client.submit(square, 5).result(timeout=60) == 25  # the worker serves on


@pytest.mark.parametrize("deaths", [3, 1])
def test_a_session_that_dies_mid_run_reruns_or_fails_its_tasks_naming_why(cluster, address, tmp_path, deaths):
    worker = cluster(4, scheduler_options=["--max-task-deaths", str(deaths)])
    held = _holding(tmp_path)
    with Client(address=address, timeout_seconds=60) as client:
        holders = [client.submit(hold, str(held), str(number)) for number in range(3)]
        wait_until(lambda: len(_started(held)) == 3, 60, "three tasks to run")
        killer = client.submit(end_the_session_once, str(tmp_path / "ended once"))
        wait_until(lambda: worker.events("session_failed"), 60, "the session to end")
        (held / "release").touch()
        if deaths > 1:  # each task died once with the session: the scheduler ran it again, in a new session
            assert [future.result(timeout=60) for future in holders] == ["0", "1", "2"]
            assert killer.result(timeout=60) == "survived"
            assert len({event["session"] for event in worker.events("start")}) == 2
        else:
            for future in [*holders, killer]:
                with pytest.raises(WorkerDiedError, match="Symphony session .* ended: .*injected by the test"):
                    future.result(timeout=60)
            assert client.submit(square, 4).result(timeout=60) == 16  # a new session serves on
    assert "opening a new one" in worker.log.read_text()


def test_shutdown_closes_the_session_and_leaves_nothing_behind(cluster, address, tmp_path):
    worker = cluster(2, "process")
    held = _holding(tmp_path)
    with Client(address=address, timeout_seconds=60) as client:
        assert client.map(square, [(value,) for value in range(20)]) == [value * value for value in range(20)]
        still_running = client.submit(hold, str(held), "running")
        wait_until(lambda: _started(held) == ["running"], 60, "a task to run")
        services = psutil.Process(worker.process.pid).children(recursive=True)
        assert services, "the service instances run as processes of the worker"
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(60) == 0
        events = [event["event"] for event in worker.events()]
        assert "close" in events and "start" not in events[events.index("close") :]  # its session, destroyed
        _, alive = psutil.wait_procs(services, timeout=30)
        assert alive == []
        assert not still_running.done()  # the scheduler holds it for another worker
    log = worker.log.read_text()
    assert "could not" not in log and "Traceback" not in log
