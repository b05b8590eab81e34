from __future__ import annotations

import os
import sys
from typing import Iterator, List

import cloudpickle
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import worker_tasks  # noqa: E402
from worker_harness import (  # noqa: E402
    FakeScheduler,
    StorageClient,
    TaskDriver,
    start_process,
    start_storage_server,
    stop_process,
    worker_command,
)

cloudpickle.register_pickle_by_value(worker_tasks)


@pytest.fixture(scope="module")
def storage_server(tmp_path_factory) -> Iterator:
    server = start_storage_server(str(tmp_path_factory.mktemp("storage") / "storage.log"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def storage(storage_server) -> Iterator[StorageClient]:
    client = StorageClient(storage_server.address)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def scheduler() -> Iterator[FakeScheduler]:
    fake = FakeScheduler()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def start_worker(tmp_path, request) -> Iterator:
    """start_worker(scheduler_address, *options) -> Popen of a worker agent; stopped (with its processors)
    after the test, whatever happens. Its log is printed when the test fails."""
    started: List = []
    log_path = str(tmp_path / "worker.log")

    def start(scheduler_address: str, *options: str):
        process = start_process(worker_command(scheduler_address, *options), log_path)
        started.append(process)
        return process

    start.log_path = log_path
    start.started = started
    try:
        yield start
    finally:
        for process in started:
            stop_process(process)
        if os.path.exists(log_path):
            with open(log_path, errors="replace") as file:
                sys.stdout.write(f"--- worker log ---\n{file.read()}")


@pytest.fixture
def driver(scheduler, storage, storage_server, start_worker) -> TaskDriver:
    """A running worker, already accepted by the fake scheduler, and a TaskDriver to give it tasks."""
    start_worker(scheduler.address, "--heartbeat-interval-seconds", "0.5")
    worker_id, _ = scheduler.accept(storage_server.address)
    return TaskDriver(scheduler, storage, worker_id)
