"""A peer of another protocol major version is refused, on both sides, with an error naming both versions.

The peer is the current sources built to claim protocol 2.0 (build_peers.py): everything else about it is
ours, so only the version rule tells it apart.
"""

from __future__ import annotations

import math
import os
import subprocess

import pytest
from peers import peer_bin, protocol_of, run_client_program, start_scheduler, start_workers, wait_for_workers

from scaler import Client, ProtocolError
from scaler.protocol.version import PROTOCOL_VERSION, show_version

OURS = show_version(PROTOCOL_VERSION)
REFUSAL = "protocol version {theirs} is not compatible with protocol version {ours}: major versions differ"


def test_the_peer_claims_major_2(peers_are_built):
    assert protocol_of("next-major") == "2.0"


def test_this_scheduler_refuses_a_major_2_client_and_goes_on(peers_are_built, processes, address, tmp_path):
    log = tmp_path / "scheduler.log"
    start_scheduler(processes, "current", address, str(log))
    start_workers(processes, "current", address, 1, str(tmp_path / "cluster.log"))
    wait_for_workers(address, 1)
    report = run_client_program("next-major", address)
    assert list(report) == ["refused"] and report["refused"].startswith("ProtocolError: ")
    assert REFUSAL.format(theirs="2.0", ours=OURS) in report["refused"]
    assert REFUSAL.format(theirs="2.0", ours=OURS) in log.read_text()  # the scheduler says why, and serves on
    with Client(address, timeout_seconds=30) as client:
        assert client.submit(math.sqrt, 16).result(timeout=60) == 4.0


def test_this_client_refuses_a_major_2_scheduler(peers_are_built, processes, address, tmp_path):
    start_scheduler(processes, "next-major", address, str(tmp_path / "scheduler.log"))
    with pytest.raises(ProtocolError) as refused:
        Client(address, timeout_seconds=30)
    assert REFUSAL.format(theirs=OURS, ours="2.0") in str(refused.value)


@pytest.mark.parametrize("scheduler, worker", [("current", "next-major"), ("next-major", "current")])
def test_a_worker_of_another_major_is_refused_and_exits(peers_are_built, processes, address, tmp_path, scheduler,
                                                        worker):  # fmt: skip
    start_scheduler(processes, scheduler, address, str(tmp_path / "scheduler.log"))
    log = tmp_path / "worker.log"
    process = processes.start(os.path.join(peer_bin(worker), "scaler_worker"), address, log_path=str(log))
    try:
        code = process.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {worker} worker did not exit when refused: {log.read_text()}")
    theirs, ours = (OURS, "2.0") if worker == "current" else ("2.0", OURS)
    assert code != 0 and REFUSAL.format(theirs=theirs, ours=ours) in log.read_text()
