"""scaler_cluster and run_cluster: real supervisor and worker processes against a test-side scheduler."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from typing import Dict, List

import pytest
from worker_harness import FakeScheduler, pid_gone, start_process, stop_process, wait_until

from scaler.protocol import messages as m

SCALER_CLUSTER = shutil.which("scaler_cluster", path=os.path.dirname(sys.executable)) or "scaler_cluster"


@pytest.fixture
def cluster(tmp_path):
    """cluster(*arguments) -> Popen of scaler_cluster; stopped with everything it started after the test."""
    started: List[subprocess.Popen] = []
    log_path = str(tmp_path / "cluster.log")

    def start(*arguments: str) -> subprocess.Popen:
        process = start_process([SCALER_CLUSTER, *arguments], log_path)
        started.append(process)
        return process

    start.log_path = log_path
    try:
        yield start
    finally:
        for process in started:
            stop_process(process)
        if os.path.exists(log_path):
            with open(log_path, errors="replace") as file:
                sys.stdout.write(f"--- cluster log ---\n{file.read()}")


def accept_workers(scheduler: FakeScheduler, count: int, storage_address: str = "") -> Dict[bytes, m.Hello]:
    workers = {}
    while len(workers) < count:
        identity, hello = scheduler.accept(storage_address or "tcp://127.0.0.1:1")
        workers[identity] = hello
    return workers


def log_of(cluster) -> str:
    with open(cluster.log_path, errors="replace") as file:
        return file.read()


def test_help_lists_the_options():
    output = subprocess.run([SCALER_CLUSTER, "-h"], capture_output=True, text=True, timeout=60)
    assert output.returncode == 0
    for option in (
        "--num-of-workers",
        "--per-worker-capabilities",
        "--per-worker-queue-size",
        "--heartbeat-interval-seconds",
        "--worker-timeout-seconds",
        "--task-inline-threshold",
        "--config",
        "--event-loop",
        "--logging-level",
    ):
        assert option in output.stdout


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["--no-such-flag", "tcp://127.0.0.1:2345"], "unrecognized arguments: --no-such-flag"),
        (["-n", "0", "tcp://127.0.0.1:2345"], "0 is not a positive integer"),
        (["-pwc", "gpu=many", "tcp://127.0.0.1:2345"], "the value must be an integer"),
        (["http://127.0.0.1:2345"], "invalid address"),
        ([], "the following arguments are required: address"),
    ],
)
def test_bad_arguments_are_refused(arguments, complaint):
    output = subprocess.run([SCALER_CLUSTER, *arguments], capture_output=True, text=True, timeout=60)
    assert output.returncode == 2
    assert complaint in output.stderr


def test_cluster_starts_its_workers_and_replaces_a_dead_one(scheduler: FakeScheduler, cluster):
    process = cluster("-n", "2", "-pwc", "gpu", "-wqs", "5", scheduler.address)
    workers = accept_workers(scheduler, 2)
    for hello in workers.values():
        assert [c.name for c in hello.worker_info.capabilities] == ["gpu"]
        assert hello.worker_info.queue_capacity == 5
    victim = next(iter(workers.values())).pid
    os.kill(victim, signal.SIGKILL)
    replacement = accept_workers(scheduler, 1)
    assert not set(replacement) & set(workers)
    assert process.poll() is None
    log = log_of(cluster)
    assert "ClusterProcess: starting 2 workers, heartbeat_interval_seconds=1" in log
    assert "Worker[0] started" in log and "Worker[1] started" in log
    assert f"(pid {victim}) was killed by signal SIGKILL; replacing it" in log


def test_stop_signal_stops_every_worker_and_processor(scheduler: FakeScheduler, cluster):
    process = cluster("-n", "2", scheduler.address)
    workers = accept_workers(scheduler, 2)
    worker_pids = [hello.pid for hello in workers.values()]
    processors = [
        child.pid for pid in worker_pids for child in wait_until(lambda pid=pid: _children(pid), "a processor")
    ]
    connected = set()  # a heartbeat comes once the worker read its HelloAck (before that it has not joined, and
    while connected != set(workers):  # a stop then says no goodbye: the scheduler sees its connection close)
        connected.add(scheduler.expect(m.WorkerHeartbeat, skip=())[0])
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    for pid in worker_pids + processors:
        wait_until(lambda pid=pid: pid_gone(pid), f"process {pid} to end")
    goodbyes = set()
    while len(goodbyes) < 2:
        identity, message = scheduler.expect(m.DisconnectRequest)
        goodbyes.add(identity)
    assert goodbyes == set(workers)


def test_killed_cluster_leaves_no_worker_behind(scheduler: FakeScheduler, cluster):
    process = cluster("-n", "2", scheduler.address)
    workers = accept_workers(scheduler, 2)
    worker_pids = [hello.pid for hello in workers.values()]
    processors = [
        child.pid for pid in worker_pids for child in wait_until(lambda pid=pid: _children(pid), "a processor")
    ]
    os.kill(process.pid, signal.SIGKILL)  # only the supervisor: its children must follow on their own
    process.wait(30)
    for pid in worker_pids + processors:
        wait_until(lambda pid=pid: pid_gone(pid), f"process {pid} to end with the cluster")


def test_workers_asked_to_leave_are_not_replaced(scheduler: FakeScheduler, cluster):
    process = cluster("-n", "2", scheduler.address)
    workers = accept_workers(scheduler, 2)
    for identity in workers:
        scheduler.send(identity, m.DisconnectRequest("scheduler shutting down"))
    assert process.wait(30) == 0
    assert "not replacing it" in log_of(cluster)


def test_refused_workers_are_not_replaced(scheduler: FakeScheduler, cluster):
    process = cluster("-n", "1", scheduler.address)
    identity, _ = scheduler.expect(m.Hello)
    scheduler.send(identity, m.Refusal(m.Version(2, 0), "protocol version 1.0 is not compatible with 2.0"))
    assert process.wait(30) == 1
    assert "it was refused, not replacing it" in log_of(cluster)


def test_options_from_a_config_file(scheduler: FakeScheduler, cluster, tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text('[cluster]\nnum_of_workers = 1\nper_worker_capabilities = "linux,gpu=2"\n')
    cluster("--config", str(config), scheduler.address)
    [hello] = accept_workers(scheduler, 1).values()
    assert [(c.name, c.value) for c in hello.worker_info.capabilities] == [("linux", -1), ("gpu", 2)]


def test_run_cluster_dies_with_its_parent(scheduler: FakeScheduler, tmp_path):
    """A parent runs run_cluster in a multiprocessing child (as SchedulerClusterCombo does) and is killed."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import multiprocessing, time
            from scaler.cluster.cluster import run_cluster

            if __name__ == "__main__":
                child = multiprocessing.get_context("spawn").Process(
                    target=run_cluster, args=({scheduler.address!r}, 1), kwargs={{"logging_level": "WARNING"}}
                )
                child.start()
                time.sleep(600)
            """
        )
    )
    parent = start_process([sys.executable, str(script)], str(tmp_path / "parent.log"))
    try:
        [hello] = accept_workers(scheduler, 1).values()
        supervisor = [p.pid for p in _children(parent.pid)]
        processors = [p.pid for p in wait_until(lambda: _children(hello.pid), "a processor")]
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(30)
        for pid in [*supervisor, hello.pid, *processors]:
            wait_until(lambda pid=pid: pid_gone(pid), f"process {pid} to end with the parent")
    finally:
        stop_process(parent)


def _children(pid: int):
    import psutil

    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def test_scaler_worker_command_line():
    scaler_worker = shutil.which("scaler_worker", path=os.path.dirname(sys.executable)) or "scaler_worker"
    output = subprocess.run([scaler_worker, "-h"], capture_output=True, text=True, timeout=60)
    assert output.returncode == 0 and "--worker-timeout-seconds" in output.stdout
    output = subprocess.run([scaler_worker, "-wt", "0", "tcp://127.0.0.1:2345"], capture_output=True, text=True)
    assert output.returncode == 2 and "0.0 is not a positive number" in output.stderr
