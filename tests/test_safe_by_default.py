"""What the programs refuse to expose, with real processes (issue 25, the smaller items): plain HTTP (the
scheduler's Prometheus endpoint, scaler_ui) beyond loopback without authentication or an explicit --insecure, and
authorized keys that another user could change (as ssh's StrictModes refuses them), at start and while running.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request

import pytest
from cluster_processes import BIN, free_address, wait_until

from scaler import Client
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.keygen import write_cluster_keys

WITHIN_SECONDS = 30.0


def _refused(*command: str) -> subprocess.CompletedProcess:
    """Run a program that must refuse to start (bounded: one that starts would run until the timeout)."""
    result = subprocess.run([os.path.join(BIN, command[0]), *command[1:]], capture_output=True, text=True, timeout=30)
    assert result.returncode != 0, result
    return result


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def test_the_schedulers_metrics_beyond_loopback_need_insecure(processes):
    address, metrics = free_address(), str(free_tcp_port())
    options = ("--metrics-port", metrics, "--metrics-host", "0.0.0.0")
    refused = _refused("scaler_scheduler", address, *options).stderr
    assert "scaler_scheduler: error: the scheduler would serve its Prometheus metrics at 0.0.0.0" in refused
    assert "other hosts can reach, over plain HTTP without authentication" in refused and "--insecure" in refused
    processes.scheduler(address, *options, "--insecure")  # a deliberate choice: served
    wait_until(lambda: _answers(f"http://127.0.0.1:{metrics}/metrics"), WITHIN_SECONDS, "the metrics")


def test_scaler_ui_beyond_loopback_needs_a_token_or_insecure(processes):
    monitor_address = free_address()  # nothing publishes there: the page is served all the same
    port = str(free_tcp_port())
    refused = _refused("scaler_ui", monitor_address, "--host", "0.0.0.0", "--port", port).stderr
    assert "scaler_ui: error: scaler_ui would serve its page and Prometheus metrics at 0.0.0.0" in refused
    assert "Give it --token" in refused and "--insecure" in refused
    processes.start("scaler_ui", monitor_address, "--host", "0.0.0.0", "--port", port, "--insecure")
    wait_until(lambda: _answers(f"http://127.0.0.1:{port}/"), WITHIN_SECONDS, "the page")


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_object_storage_server"])
@pytest.mark.parametrize("where, mode, says", [
    ("", 0o777, "every user (mode 0777)"),
    ("clients", 0o775, "its group (mode 0775)"),
    ("workers/worker.key", 0o666, "every user (mode 0666)"),
], ids=["the directory", "a role's directory", "a key file"])  # fmt: skip
def test_a_daemon_refuses_authorized_keys_that_another_user_could_write(program, where, mode, says, tmp_path):
    keys = write_cluster_keys(str(tmp_path / "keys"))
    path = os.path.join(keys.server.authorized_keys, where) if where else keys.server.authorized_keys
    os.chmod(path, mode)
    refused = _refused(program, free_address(), *keys.server.to_arguments()).stderr
    assert f"{program}: error: " in refused and f"{path} can be written by {says}: run chmod go-w {path}" in refused


def test_keys_that_become_writable_by_others_are_refused_while_the_scheduler_runs(secure_cluster):
    clients = os.path.join(secure_cluster.keys.server.authorized_keys, "clients")
    client = Client(secure_cluster.address, security=secure_cluster.security("client"), heartbeat_interval_seconds=0.5)
    try:
        assert client.submit(len, "ab").result(timeout=60) == 2
        os.chmod(clients, 0o777)  # anyone on the host could now authorize a key of their own
        wait_until(lambda: not client.connected, WITHIN_SECONDS, "the client keys to be refused")
        with pytest.raises(DisconnectedError, match="no longer authorized"):
            client.submit(len, "ab").result(timeout=60)
    finally:
        client.disconnect()
        os.chmod(clients, 0o755)
    assert f"{clients} can be written by every user (mode 0777)" in secure_cluster.log()
