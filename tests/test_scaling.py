"""Elastic clusters with real processes: a scheduler, ``scaler_worker_manager native`` and the OpenGRIS webhook
(``scaler_native_worker_adapter``) grow and shrink worker groups with the load (docs/scaling.md).

Short delays keep the tests lean: work waits 0.2 s before groups start for it, groups idle 1 s are stopped.
Every wait is bounded; no test asserts how long anything took."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, List

import pytest
from cluster_processes import BIN, Processes, next_snapshot, wait_until

from scaler import Client
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, free_tcp_port
from scaler.protocol.keygen import write_cluster_keys

SCALE = ("--scale-up-after-seconds", "0.2", "--scale-down-idle-seconds", "1")
WAIT = 60  # seconds any one thing may take on a loaded machine


def snapshot_where(monitor: str, condition: Callable[[m.StateSnapshot], bool], what: str) -> m.StateSnapshot:
    found: List[m.StateSnapshot] = []

    def check() -> bool:
        snapshot = next_snapshot(monitor, timeout=5)
        if snapshot is not None and condition(snapshot):
            found.append(snapshot)
            return True
        return False

    wait_until(check, WAIT, what, interval=0.1)
    return found[0]


def logged(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


def manager(processes: Processes, address: str, log: Path, *options: str) -> subprocess.Popen:
    return processes.start("scaler_worker_manager", "native", address, *options, log_path=str(log))


def run_once(directory: str, i: int) -> int:
    """Square ``i``, recording each run in a file of its own (a task run twice writes two lines)."""
    time.sleep(0.002)
    with open(os.path.join(directory, str(i)), "a") as file:
        file.write(f"{os.getpid()}\n")
    return i * i


def run_burst(address: str, runs: Path, count: int = 5000) -> int:
    """Run ``count`` tasks of `run_once`; check every result and that each task ran once; return how many
    processors ran them."""
    runs.mkdir()
    with Client(address=address, timeout_seconds=WAIT) as client:
        results = client.map(run_once, [(str(runs), i) for i in range(count)])
    assert results == [i * i for i in range(count)]
    lines = {int(path.name): path.read_text().split() for path in runs.iterdir()}
    assert sorted(lines) == list(range(count))
    assert [i for i, ran in lines.items() if len(ran) != 1] == []  # none ran twice
    return len({pid for ran in lines.values() for pid in ran})


def agent_pid(x: int) -> int:
    return os.getppid()  # the processor's parent: the worker agent, whose pid is in the worker's ID


def test_load_on_an_empty_cluster_starts_a_managers_workers_and_they_stop_once_idle(processes, address, tmp_path):
    processes.scheduler(address, *SCALE, log_path=str(tmp_path / "scheduler.log"))
    log = tmp_path / "manager.log"
    manager(processes, address, log, "--max-workers", "2")
    monitor = default_monitor_address(address)
    snapshot = snapshot_where(monitor, lambda s: len(s.managers) == 1 and s.managers[0].heartbeat.kind, "the manager")
    assert snapshot.workers == [] and snapshot.managers[0].heartbeat.groups == []
    with Client(address=address, timeout_seconds=WAIT) as client:
        pids = client.map(agent_pid, [(i,) for i in range(20)])
        snapshot = next_snapshot(monitor, timeout=5)
    assert snapshot is not None
    group_of = {w.worker_id.decode().split("|")[2]: w.group_id for w in snapshot.workers}
    assert all(group_of.get(str(pid), b"").startswith(b"M|") for pid in set(pids))  # workers of the manager's groups
    snapshot_where(monitor, lambda s: not s.workers and not s.managers[0].heartbeat.groups, "idle groups to stop")
    assert logged(log, "stopped") and processes.processes[-1].poll() is None  # the manager stays, ready


def test_a_burst_of_5000_tasks_while_groups_retire_and_start_runs_every_task_once(processes, address, tmp_path):
    """Groups live four seconds: during the burst (5 s of sleeps at least, on two workers at most) they retire
    (drained: they give back what they have not started, stop once they hold nothing) and new ones start;
    every result is right and no task ran twice."""
    scheduler_log = tmp_path / "scheduler.log"
    processes.scheduler(address, *SCALE, log_path=str(scheduler_log))
    manager(processes, address, tmp_path / "manager.log", "--max-workers", "2", "--group-lifetime-seconds", "4")
    assert run_burst(address, tmp_path / "runs") > 2  # groups came and went during the burst
    assert logged(scheduler_log, "drained: its manager stops it")


def test_a_task_that_needs_a_capability_starts_a_group_that_offers_it(processes, address, tmp_path):
    processes.scheduler(address, *SCALE, "--allocate-policy", "capability")
    processes.cluster(address, 1)  # a worker without the capability
    manager(processes, address, tmp_path / "manager.log", "--max-workers", "1", "--per-worker-capabilities", "gpu")
    monitor = default_monitor_address(address)
    snapshot_where(monitor, lambda s: len(s.workers) == 1 and s.managers and s.managers[0].heartbeat.kind, "both")
    with Client(address=address, timeout_seconds=WAIT) as client:
        gpu = client.submit_verbose(agent_pid, (1,), {}, capabilities={"gpu": 1}).result(WAIT)
        snapshot = next_snapshot(monitor, timeout=5)
    assert snapshot is not None
    workers = {w.worker_id.decode().split("|")[2]: w for w in snapshot.workers}
    assert {c.name for c in workers[str(gpu)].capabilities} == {"gpu"}
    assert workers[str(gpu)].group_id.startswith(snapshot.managers[0].manager_id + b"/")


def test_the_webhook_starts_and_shuts_down_groups_through_the_adapter(processes, address, tmp_path):
    port = free_tcp_port()
    adapter_log = tmp_path / "adapter.log"
    processes.start("scaler_native_worker_adapter", address, "--port", str(port), "--max-workers", "2",
                    log_path=str(adapter_log))  # fmt: skip
    wait_until(lambda: logged(adapter_log, "serving the worker adapter webhook"), WAIT, "the adapter")
    processes.scheduler(address, *SCALE, "--adapter-webhook-url", f"http://127.0.0.1:{port}/")
    monitor = default_monitor_address(address)
    with Client(address=address, timeout_seconds=WAIT) as client:
        assert client.map(pow, [(i, 2) for i in range(50)]) == [i * i for i in range(50)]
    snapshot = snapshot_where(
        monitor, lambda s: not s.workers and s.managers and not s.managers[0].heartbeat.groups, "groups shut down"
    )
    assert snapshot.managers[0].heartbeat.kind == "webhook"
    assert logged(adapter_log, "Adapter: started worker group native-")
    assert logged(adapter_log, "Adapter: shutting down worker group native-")


def test_with_keys_a_manager_connects_with_its_own_key_and_its_workers_with_theirs(processes, address, tmp_path):
    keys = write_cluster_keys(str(tmp_path / "keys"))
    processes.scheduler(address, *SCALE, *keys.server.to_arguments(), probe=keys.client)
    wrong = tmp_path / "wrong.log"
    refused = manager(processes, address, wrong, "--max-workers", "1", "--manager-key-file", keys.worker.key_file,
                      *keys.worker.to_arguments())  # fmt: skip
    assert refused.wait(WAIT) == 78
    assert "is authorized as worker, not as a worker_manager" in wrong.read_text()
    manager(processes, address, tmp_path / "manager.log", "--max-workers", "1", "--manager-key-file",
            keys.manager.key_file, *keys.worker.to_arguments())  # fmt: skip
    with Client(address=address, timeout_seconds=WAIT, security=keys.client) as client:
        assert client.map(pow, [(i, 2) for i in range(10)]) == [i * i for i in range(10)]


# ----------------------------------------------------------------------------- bad input


def test_a_manager_with_bad_options_or_no_scheduler_says_why_and_exits(tmp_path):
    def run(*arguments: str, timeout: float = WAIT) -> subprocess.CompletedProcess:
        command = [os.path.join(BIN, "scaler_worker_manager"), *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    cases = [
        (("native", address), "--max-workers is required (or max-workers in [native_worker_manager] of --config)"),
        (("native", address, "--max-workers", "2", "--min-groups", "3"), "--min-groups 3 is more than the 2"),
        (("native", address, "--max-workers", "1", "--workers-per-group", "2"), "is less than --workers-per-group"),
        (("slurm", address, "--max-jobs", "1", "--time-limit", "1", "--drain-margin-seconds", "90"), "not longer"),
        (("kubernetes", address), "choose what runs the worker groups: native or slurm, not 'kubernetes'"),
        (("native", "tcp://127.0.0.1", "--max-workers", "1"), "tcp://127.0.0.1"),
    ]
    for arguments, says in cases:
        done = run(*arguments)
        assert done.returncode == 2 and says in done.stderr, (arguments, done.stderr)
        assert "Traceback" not in done.stderr
    done = run("native", address, "--max-workers", "1", "--worker-timeout-seconds", "1")  # nothing listens there
    assert done.returncode == 1 and f"no answer from the scheduler at {address} within 1s" in done.stdout


@pytest.fixture
def hanging_webhook() -> Iterator[str]:
    """A webhook that never answers (until the test ends)."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            release.wait(WAIT)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_a_webhook_that_hangs_or_is_not_there_never_stalls_scheduling(processes, address, tmp_path, hanging_webhook):
    log = tmp_path / "scheduler.log"
    processes.scheduler(address, *SCALE, "--adapter-webhook-url", hanging_webhook,
                        "--adapter-webhook-timeout-seconds", "1", log_path=str(log))  # fmt: skip
    processes.cluster(address, 1)
    with Client(address=address, timeout_seconds=WAIT) as client:
        assert client.map(pow, [(i, 2) for i in range(100)]) == [i * i for i in range(100)]
    wait_until(lambda: logged(log, "get_worker_adapter_info failed (no answer within 1s)"), WAIT, "the timeout logged")
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        nobody = closed.getsockname()[1]
    second = tmp_path / "second.log"
    other = f"tcp://127.0.0.1:{free_tcp_port(count=3)}"
    processes.scheduler(other, "--adapter-webhook-url", f"http://127.0.0.1:{nobody}/", log_path=str(second))
    wait_until(lambda: logged(second, "get_worker_adapter_info failed (cannot reach it"), WAIT, "the refusal logged")
    done = subprocess.run([os.path.join(BIN, "scaler_scheduler"), other, "--adapter-webhook-url", "ftp://x/"],
                          capture_output=True, text=True, timeout=WAIT)  # fmt: skip
    assert done.returncode == 1 and "is not an http:// or https:// URL" in done.stderr
