"""scaler_top in a pseudo-terminal of 80 x 24, fed by a real XPUB socket: keys pressed, screens read."""

import re
import sys
from pathlib import Path

import pexpect
import pytest
import zmq

from scaler.protocol import codec
from scaler.protocol.messages import StateSnapshot, WorkerHeartbeat, WorkerSnapshot

SCALER_TOP = str(Path(sys.executable).parent / "scaler_top")
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def top(publisher):
    address, _ = publisher
    child = pexpect.spawn(SCALER_TOP, [address], dimensions=(24, 80), env={"TERM": "xterm"}, encoding="utf-8")
    try:
        yield child
    finally:
        child.terminate(force=True)


def _screen_after(child: pexpect.spawn, text: str) -> list:
    """The lines of the screen drawn with ``text`` on it."""
    child.expect_exact(text, timeout=20)
    start = (child.before + text).rsplit("\x1b[H", 1)[-1]
    child.expect_exact("\x1b[J", timeout=20)  # each screen ends by clearing what is below it
    return [_ESCAPE.sub("", line).rstrip("\r") for line in (start + child.before).split("\n")]


def _worker_order(lines: list) -> list:
    return [line.split()[0] for line in lines if line.startswith("W|")]


def test_keys_sort_reverse_show_help_and_quit(publisher, top):
    address, socket = publisher
    lines = _screen_after(top, f"no snapshot from {address} yet")
    assert any(line.startswith("h help  q quit") for line in lines)

    assert socket.poll(20_000, zmq.POLLIN), "scaler_top did not subscribe"
    assert socket.recv() == b"\x01"
    workers = [
        WorkerSnapshot(worker_id=b"W|alpha|1|aa", heartbeat=WorkerHeartbeat(processor_cpu=0.0), slots=1),
        WorkerSnapshot(worker_id=b"W|beta|2|bb", heartbeat=WorkerHeartbeat(processor_cpu=99.0), slots=1),
    ]
    socket.send_multipart(codec.encode(StateSnapshot(scheduler_cpu=12.5, workers=workers)))
    lines = _screen_after(top, "sorted by worker, A to Z")
    assert _worker_order(lines) == ["W|alpha|1|aa", "W|beta|2|bb"]
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]

    top.send("c")
    lines = _screen_after(top, "sorted by cpu, largest first")
    assert _worker_order(lines) == ["W|beta|2|bb", "W|alpha|1|aa"]
    assert any("[cpu]" in line for line in lines)

    top.send("R")
    lines = _screen_after(top, "sorted by cpu, smallest first")
    assert _worker_order(lines) == ["W|alpha|1|aa", "W|beta|2|bb"]

    top.send("h")
    lines = _screen_after(top, "Keys:")
    assert any("c cpu" in line for line in lines)

    top.send("q")
    top.expect(pexpect.EOF, timeout=20)
    top.close()
    assert top.exitstatus == 0
