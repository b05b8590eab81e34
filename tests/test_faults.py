"""Failures of real processes started from the command-line programs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import zmq
from cluster_processes import free_address, hello_answered, wait_until, worker_count

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import DisconnectedError, ShutdownRefusedError
from scaler.protocol.version import PROTOCOL_VERSION


def square(value: int) -> int:
    return value * value


def slow_square(value: int) -> int:
    time.sleep(1)
    return value * value


def start_cli_cluster(processes, address, n_workers=2, worker_timeout=60, *scheduler_options):
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage, "--worker-timeout-seconds",
                        str(worker_timeout), *scheduler_options)  # fmt: skip
    cluster = processes.cluster(address, n_workers, "--worker-timeout-seconds", "30")
    wait_until(lambda: worker_count(default_monitor_address(address)) == n_workers, 60, f"{n_workers} workers")
    return cluster


def test_the_three_programs_run_ten_thousand_tasks(processes, address):
    start_cli_cluster(processes, address)
    with Client(address=address) as client:
        assert client.submit(square, 4).result() == 16
        assert client.map(square, [(i,) for i in range(10_000)]) == [i * i for i in range(10_000)]
        futures = [client.submit(square, i) for i in range(10_000)]
        assert [f.result(timeout=120) for f in futures] == [i * i for i in range(10_000)]


def test_scheduler_alone_starts_its_own_storage(processes, address):
    processes.scheduler(address)
    assert hello_answered(default_storage_address(address))
    processes.cluster(address, 1)
    with Client(address=address) as client:
        assert client.submit(square, 5).result(timeout=60) == 25


def test_killing_a_worker_mid_run_loses_no_task(processes, address):
    cluster = start_cli_cluster(processes, address, 2, 4)
    with Client(address=address) as client:
        futures = [client.submit(slow_square, i) for i in range(40)]  # each worker holds 20 when one dies
        wait_until(lambda: sum(f.done() for f in futures) >= 4, 60, "the first results")
        agents = psutil.Process(cluster.pid).children()
        assert len(agents) == 2
        agents[0].kill()
        assert [f.result(timeout=300) for f in futures] == [i * i for i in range(40)]


def test_garbage_to_scheduler_and_storage_is_dropped_and_both_keep_serving(processes, address):
    start_cli_cluster(processes, address, 1)
    context = zmq.Context.instance()
    for target in (address, default_storage_address(address)):
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(target)
        valid = codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "x", m.WorkerInfo()))[0]
        for payload in (os.urandom(7), os.urandom(800), valid[:-8], valid[: len(valid) // 2], b""):
            socket.send(payload)
        socket.send_multipart([os.urandom(16), os.urandom(16), os.urandom(3)])
        socket.close(linger=1000)
    assert hello_answered(address) and hello_answered(default_storage_address(address))
    with Client(address=address) as client:
        assert client.submit(square, 7).result(timeout=60) == 49


def test_a_client_of_another_major_version_is_refused_naming_both(processes, address):
    processes.scheduler(address)
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(address)
    socket.send_multipart(codec.encode(m.Hello(m.Version(PROTOCOL_VERSION.major + 1, 0), m.PeerRole.CLIENT)))
    assert socket.poll(10_000)
    refusal, _ = codec.decode(socket.recv_multipart())
    socket.close()
    assert isinstance(refusal, m.Refusal)
    assert f"{PROTOCOL_VERSION.major + 1}.0" in refusal.reason
    assert f"{PROTOCOL_VERSION.major}.{PROTOCOL_VERSION.minor}" in refusal.reason


def test_a_scheduler_that_dies_fails_pending_futures(processes, address):
    start_cli_cluster(processes, address, 1)
    scheduler = processes.processes[1]
    client = Client(address=address, timeout_seconds=3, heartbeat_interval_seconds=0.5, reconnect_seconds=1)
    try:
        future = client.submit(time.sleep, 30)
        processes.kill_group(scheduler)
        with pytest.raises(DisconnectedError, match="which did not come back within 1s"):
            future.result(timeout=60)
    finally:
        client.disconnect()


def test_connecting_where_no_scheduler_answers_is_a_clear_error():
    with pytest.raises(DisconnectedError, match="no scheduler"):
        Client(address=free_address(), timeout_seconds=1)


def test_a_disconnecting_client_has_its_tasks_cancelled_and_objects_deleted(processes, address):
    start_cli_cluster(processes, address, 1)
    client = Client(address=address)
    reference = client.send_object(b"x" * 100, name="kept")
    futures = [client.submit(time.sleep, 60) for _ in range(3)]
    wait_until(lambda: _task_states(address).get("assigned", 0) >= 1, 30, "a running task")
    client.disconnect()
    wait_until(lambda: _task_states(address).get("cancelled", 0) == 3, 30, "the client's tasks cancelled")
    assert all(f.done() for f in futures)
    wait_until(lambda: not _object_exists(default_storage_address(address), reference.object_id), 30,
               "the client's object deleted")  # fmt: skip
    with Client(address=address) as other:  # the worker is free again
        assert other.submit(square, 3).result(timeout=60) == 9


def test_protected_scheduler_refuses_client_shutdown_with_an_error_that_says_so(processes, address):
    start_cli_cluster(processes, address, 1, 60, "--protected")
    with Client(address=address) as client:
        with pytest.raises(ShutdownRefusedError, match=r"refused to shut down: .*protected"):
            client.shutdown()
        assert client.submit(square, 2).result(timeout=60) == 4


def test_client_shutdown_stops_an_unprotected_scheduler(processes, address):
    start_cli_cluster(processes, address, 1)
    scheduler = processes.processes[1]
    with Client(address=address) as client:
        assert client.shutdown() is True
    scheduler.wait(30)
    assert scheduler.returncode == 0


def test_combo_leaves_nothing_behind_when_its_parent_is_terminated(tmp_path):
    address = free_address()
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        from scaler import SchedulerClusterCombo
        combo = SchedulerClusterCombo(address="{address}", n_workers=1, logging_level="WARNING")
        print("ready", flush=True)
        time.sleep(600)
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parent.stdout.readline().strip() == b"ready"
        descendants = psutil.Process(parent.pid).children(recursive=True)
        assert len(descendants) >= 3
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in descendants),
                   30, "every child of the killed parent to exit")  # fmt: skip
        assert not hello_answered(address, timeout=0.5)
    finally:
        os.killpg(parent.pid, signal.SIGKILL) if parent.poll() is None else None


def test_combo_shutdown_is_idempotent_and_frees_its_ports():
    from scaler import SchedulerClusterCombo

    combo = SchedulerClusterCombo(n_workers=1, logging_level="WARNING")
    address = combo.get_address()
    with Client(address=address) as client:
        assert client.submit(square, 3).result(timeout=60) == 9
    combo.shutdown()
    combo.shutdown()
    port = int(address.rsplit(":", 1)[1])
    import socket

    for candidate in (port, port + 1, port + 2):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", candidate))


def _task_states(address: str) -> dict:
    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(default_monitor_address(address))
    try:
        if not socket.poll(5000):
            return {}
        snapshot, _ = codec.decode(socket.recv_multipart())
        return {counter.name: counter.value for counter in snapshot.task_states}
    finally:
        socket.close()


def _object_exists(storage_address: str, object_id: bytes) -> bool:
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(storage_address)
    try:
        socket.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "t", m.WorkerInfo())))
        assert socket.poll(5000)
        socket.recv_multipart()
        socket.send_multipart(codec.encode(m.ObjectRequest(1, m.ObjectRequestKind.GET, b"", [object_id])))
        assert socket.poll(5000)
        response, _ = codec.decode(socket.recv_multipart())
        return response.statuses[0] == m.ObjectStatus.OK
    finally:
        socket.close()
