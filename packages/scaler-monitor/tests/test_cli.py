"""The console scripts, run as the installed programs against a real XPUB socket."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from scaler.protocol import codec
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.messages import ClientHeartbeatEcho, Counter, StateSnapshot, WorkerSnapshot

BIN = Path(sys.executable).parent


def _script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"console script {name} is not installed beside {sys.executable}"
    return str(path)


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", ["scaler_top", "scaler_ui"])
def test_help(name):
    result = _run(_script(name), "-h")
    assert result.returncode == 0, result.stderr
    assert f"usage: {name}" in result.stdout
    assert "--config" in result.stdout


def test_ui_rejects_a_port_out_of_range():
    result = _run(_script("scaler_ui"), "tcp://127.0.0.1:2347", "--port", "70000")
    assert result.returncode == 2
    assert "70000 is not a port number" in result.stderr


def test_ui_says_when_its_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(_script("scaler_ui"), f"tcp://127.0.0.1:{free_tcp_port()}", "--port", str(port))
    assert result.returncode == 1
    assert f"cannot listen at 127.0.0.1:{port}" in result.stderr


def test_top_rejects_a_bad_address():
    result = _run(_script("scaler_top"), "127.0.0.1:2347")
    assert result.returncode == 2
    assert "invalid address" in result.stderr


def test_top_timeout_without_data_exits_1(tmp_path):
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    config = tmp_path / "scaler.toml"
    config.write_text(f'[top]\naddress = "{address}"\ntimeout = 0.3\n')
    result = _run(_script("scaler_top"), "--config", str(config))
    assert result.returncode == 1, result.stderr
    assert f"no snapshot from {address}" in result.stderr


def test_top_config_unknown_option(tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text("[top]\nrefresh = 3\n")
    result = _run(_script("scaler_top"), "--config", str(config), "tcp://127.0.0.1:2347")
    assert result.returncode == 2
    assert "unknown option 'refresh'" in result.stderr


def test_top_shows_published_snapshots_and_survives_bad_messages(publisher):
    address, socket = publisher
    snapshot = StateSnapshot(
        scheduler_cpu=42.0,
        task_states=[Counter("running", 5)],
        workers=[WorkerSnapshot(worker_id=b"W|testhost|99|f00d", slots=3)],
    )
    process = subprocess.Popen(
        [_script("scaler_top"), address, "--timeout", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert socket.poll(20_000, zmq.POLLIN), "scaler_top did not subscribe"
        assert socket.recv() == b"\x01"  # XPUB: subscription to every topic
        socket.send(b"not a capnp message")
        socket.send_multipart(codec.encode(ClientHeartbeatEcho()))
        socket.send_multipart(codec.encode(snapshot))
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert "42.0%" in stdout
    assert "W|testhost|99|f00d" in stdout
    assert "Total 1 worker(s)" in stdout
    assert f"drop malformed message from {address}" in stderr
    assert f"drop unexpected ClientHeartbeatEcho from {address}" in stderr


def test_subscription_receive_returns_none_after_its_timeout(publisher):
    from scaler.monitor.subscription import SnapshotSubscription

    address, socket = publisher
    with SnapshotSubscription(address) as subscription:
        assert socket.poll(20_000, zmq.POLLIN)
        socket.recv()
        socket.send_multipart(codec.encode(StateSnapshot(clients=4)))
        received = subscription.receive(timeout_seconds=20)
        assert received == StateSnapshot(clients=4)
        started = time.monotonic()
        assert subscription.receive(timeout_seconds=0.2) is None
        assert time.monotonic() - started >= 0.2
