"""Failures are noticed in seconds, not a minute (issue 11, item 3): a peer whose process dies is noticed by
its connection closing. Each test sets the timeouts that used to notice it (a silent peer's) to 600 s, so
that only the closed connection can end its bounded wait in time; docs/scheduling.md has the table."""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from cluster_processes import hello_answered, next_snapshot, wait_until, worker_count

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import DisconnectedError

NEVER = "600"  # seconds: the timeouts of silent peers, out of reach of every bounded wait below


def square(value: int) -> int:
    return value * value


def slow_square(value: int) -> int:
    time.sleep(0.25)
    return value * value


def sleep_for(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def length(data: bytes) -> int:
    return len(data)


def start(processes, address, n_workers=1):
    """Storage, scheduler and ``n_workers`` workers, none of which forgets a silent peer in the tests' time."""
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage, "--worker-timeout-seconds", NEVER,
                        "--client-timeout-seconds", NEVER)  # fmt: skip
    cluster = processes.cluster(address, n_workers, "--worker-timeout-seconds", NEVER)
    wait_until(lambda: worker_count(default_monitor_address(address)) == n_workers, 60, f"{n_workers} worker(s)")
    return cluster


def test_the_tasks_of_a_killed_worker_agent_run_elsewhere(processes, address):
    cluster = start(processes, address, 2)
    with Client(address=address, timeout_seconds=float(NEVER)) as client:
        futures = [client.submit(slow_square, i) for i in range(40)]  # each worker holds about 20
        wait_until(lambda: sum(f.done() for f in futures) >= 4, 60, "the first results")
        psutil.Process(cluster.pid).children()[0].kill()
        assert [f.result(timeout=120) for f in futures] == [i * i for i in range(40)]


def test_the_tasks_of_a_killed_client_are_cancelled_and_its_worker_is_free_again(processes, address):
    start(processes, address, 1)
    script = textwrap.dedent(f"""
        import time
        from scaler import Client
        client = Client(address={address!r})
        client.submit(time.sleep, 3600)
        print("submitted", flush=True)
        time.sleep(3600)
    """)  # fmt: skip
    dying = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert dying.stdout.readline().strip() == "submitted"
        wait_until(lambda: _assigned(address) == 1, 60, "the task to reach the only worker")
        dying.kill()
    finally:
        dying.kill()
        dying.wait(30)
    with Client(address=address) as client:
        assert client.submit(square, 7).result(timeout=120) == 49  # only once the dead client's task is cancelled


def test_a_dead_scheduler_is_noticed_at_once_and_waited_for_or_not_as_each_client_says(processes, address, caplog):
    start(processes, address, 1)
    scheduler = processes.processes[1]
    waiting = Client(address=address, timeout_seconds=float(NEVER))  # waits for it to come back (60 s by default)
    impatient = Client(address=address, timeout_seconds=float(NEVER), reconnect_seconds=0)
    try:
        with caplog.at_level(logging.WARNING, logger="scaler.client.client_core"):
            futures = [client.submit(sleep_for, 3600) for client in (waiting, impatient)]
            scheduler.kill()
            error = futures[1].exception(timeout=60)
            assert isinstance(error, DisconnectedError)
            assert str(error) == f"lost the connection to the scheduler at {address}"
            assert not impatient.connected
            with pytest.raises(DisconnectedError):
                impatient.submit(square, 2)
            wait_until(lambda: f"lost the connection to the scheduler at {address}; waiting up to 60s" in caplog.text,
                       30, "the waiting client to say it waits")  # fmt: skip
            assert not futures[0].done() and waiting.connected
    finally:
        waiting.disconnect()
        impatient.disconnect()
    with pytest.raises(concurrent.futures.CancelledError):  # given up by the disconnect, as any pending future
        futures[0].exception(timeout=60)


def test_a_client_to_an_address_where_nothing_answers_fails_within_its_default_timeout(address):
    outcome = []

    def connect() -> None:
        try:
            Client(address=address)
        except Exception as error:  # noqa: BLE001 - the outcome is checked below
            outcome.append(error)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(60)  # the default timeout is 10 s
    assert not thread.is_alive(), "Client() to an address where nothing answers did not fail within its timeout"
    (error,) = outcome
    assert isinstance(error, DisconnectedError)
    assert str(error) == f"no scheduler answered at {address} within 10s"


def test_a_task_that_needs_a_dead_storage_server_fails_at_once_not_after_the_timeouts(processes, address):
    start(processes, address, 1)
    storage = processes.processes[0]
    with Client(address=address, timeout_seconds=float(NEVER)) as client:
        reference = client.send_object(b"x" * 100_000, name="data")
        assert client.submit(length, b"warm").result(timeout=60) == 4
        storage.kill()
        storage.wait(30)
        error = client.submit(length, reference).exception(timeout=60)
        assert isinstance(error, DisconnectedError), error


def test_after_a_storage_server_restarts_the_scheduler_workers_and_clients_use_it_by_themselves(processes, address):
    cluster = start(processes, address, 1)
    storage_address = default_storage_address(address)
    with Client(address=address, timeout_seconds=float(NEVER)) as client:
        assert client.submit(square, 3).result(timeout=60) == 9
        processes.kill_group(processes.processes[0], signal.SIGKILL)
        processes.processes[0].wait(30)
        processes.storage(storage_address)  # the same address: its port is free at once
        # the function was put in the old server: the client puts it again, the worker fetches it again
        assert client.submit(square, 4).result(timeout=60) == 16
        assert client.submit(length, client.send_object(b"y" * 100_000)).result(timeout=60) == 100_000
    with Client(address=address, timeout_seconds=float(NEVER)) as client:
        assert client.submit(square, 5).result(timeout=60) == 25
    assert cluster.poll() is None and hello_answered(address)


def test_workers_wait_for_their_scheduler_to_come_back_and_join_it_again(processes, address):
    cluster = start(processes, address, 2)
    agents = sorted(child.pid for child in psutil.Process(cluster.pid).children())
    processes.processes[1].kill()  # the scheduler
    processes.scheduler(address, "--object-storage-address", default_storage_address(address))  # at its address
    wait_until(lambda: worker_count(default_monitor_address(address)) == 2, 60, "the workers to join again")
    assert sorted(child.pid for child in psutil.Process(cluster.pid).children()) == agents  # not replaced


def _assigned(address: str) -> int:
    snapshot = next_snapshot(default_monitor_address(address))
    counts = {counter.name: counter.value for counter in snapshot.task_states} if snapshot else {}
    return counts.get("assigned", 0)
