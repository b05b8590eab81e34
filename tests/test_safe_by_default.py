"""What the programs refuse to expose, with real processes (issue 25, the smaller items): plain HTTP (the
scheduler's Prometheus endpoint, scaler_ui) beyond loopback without authentication or an explicit --insecure.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request

from cluster_processes import BIN, free_address, wait_until

from scaler.protocol.addresses import free_tcp_port

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
