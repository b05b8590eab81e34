"""The peers of other versions (built by build_peers.py, which the tox environment `crossversion` runs): where
they are, how to start them, how to run a client of theirs."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import zmq
from cluster_processes import BIN, Processes, wait_until, worker_count

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address
from scaler.protocol.version import PROTOCOL_VERSION

PEERS = os.environ.get("SCALER_CROSSVERSION_PEERS", "")
PROGRAM = os.path.join(os.path.dirname(__file__), "client_program.py")


def peer_bin(name: str) -> str:
    """The bin directory of a peer: ``previous`` (the last release), ``next-major`` (claims protocol 2.0), or
    ``current`` (this environment)."""
    if name == "current":
        return BIN
    if not PEERS:
        pytest.fail("SCALER_CROSSVERSION_PEERS is not set: run tox -e crossversion (it builds the peers first)")
    return os.path.join(PEERS, name, "bin")


def answers(address: str, timeout: float = 0.5) -> bool:
    """Whether something at ``address`` answers a Hello at all (HelloAck, or a Refusal from another version)."""
    socket = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(address)
        socket.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.MONITOR, os.getpid(), "probe",
                                                   m.WorkerInfo())))  # fmt: skip
        return bool(socket.poll(int(timeout * 1000)))
    finally:
        socket.close(linger=0)


def start_scheduler(processes: Processes, peer: str, address: str, log: str) -> None:
    process = processes.start(os.path.join(peer_bin(peer), "scaler_scheduler"), address, log_path=log)
    wait_until(lambda: process.poll() is None and answers(address), 60, f"the {peer} scheduler at {address}")


def start_workers(processes: Processes, peer: str, address: str, count: int, log: str) -> None:
    processes.start(os.path.join(peer_bin(peer), "scaler_cluster"), "-n", str(count), address, log_path=log)


def wait_for_workers(address: str, count: int) -> None:
    wait_until(lambda: worker_count(default_monitor_address(address)) == count, 60, f"{count} workers")


def run_client_program(peer: str, address: str) -> dict:
    """`client_program.py` run by a peer's Python against ``address``: what it reported."""
    python = os.path.join(peer_bin(peer), "python")
    started = time.monotonic()
    done = subprocess.run([python, PROGRAM, address], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{peer} client program failed after {time.monotonic() - started:.0f}s: {done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def protocol_of(peer: str) -> str:
    """The protocol version a peer's distributions speak."""
    code = "import scaler.protocol.version as v; print(v.show_version(v.PROTOCOL_VERSION))"
    return subprocess.run([os.path.join(peer_bin(peer), "python"), "-c", code], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()  # fmt: skip
