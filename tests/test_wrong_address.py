"""Wrong address, clear error (issue 11, item 4): a client, a worker or scaler_top given another process's port
says what answered there, within its timeout, instead of hanging."""

from __future__ import annotations

import os
import subprocess

import pytest
from cluster_processes import BIN

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import DisconnectedError


@pytest.fixture
def scheduler(processes, address):
    processes.scheduler(address)  # it starts its storage server at port + 1; its monitor is at port + 2
    return address


def test_a_client_given_the_storage_port_says_it_is_a_storage_server(scheduler):
    storage = default_storage_address(scheduler)
    with pytest.raises(DisconnectedError) as raised:
        Client(address=storage)
    assert str(raised.value) == f"{storage} is an object storage server, not a scheduler"


def test_a_client_given_the_monitor_port_says_it_is_not_a_scheduler(scheduler):
    monitor = default_monitor_address(scheduler)
    with pytest.raises(DisconnectedError) as raised:
        Client(address=monitor, timeout_seconds=60)
    assert str(raised.value).startswith(f"{monitor} is not a scheduler, or it requires CurveZMQ keys: it closed the")


def test_a_worker_given_the_storage_port_says_so_and_its_cluster_does_not_replace_it(scheduler, processes, tmp_path):
    storage = default_storage_address(scheduler)
    log = str(tmp_path / "cluster.log")
    cluster = processes.cluster(storage, 1, "--worker-timeout-seconds", "600", log_path=log)
    assert cluster.wait(120) == 1  # every worker was refused: nothing left to supervise
    text = open(log).read()
    assert f"{storage} is an object storage server, not a scheduler" in text
    assert "it was refused, not replacing it" in text


def test_scaler_top_given_the_schedulers_address_says_it_has_no_snapshot_and_why(scheduler):
    top = subprocess.run(
        [os.path.join(BIN, "scaler_top"), scheduler, "--timeout", "5"], capture_output=True, text=True, timeout=120
    )
    assert top.returncode == 1 and top.stdout == ""
    lines = top.stderr.splitlines()
    assert f"scaler_top: no snapshot from {scheduler} yet" in lines
    assert any(line.startswith(f"scaler_top: {scheduler} is not a monitor address: it closed") for line in lines)
