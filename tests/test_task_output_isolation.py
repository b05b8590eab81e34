"""Task output goes only to its own client (issue 25, item 4), with real processes.

The client is a process of its own that streams its task's output (``Client(stream_output=True)``); the test
reads what that process prints. A raw worker (a pyzmq DEALER: with a worker key on a cluster with keys, with no
key on one without) names the client and its running task in a forged `TaskOutputBatch`: none of it may reach
the client. What the client's own task prints reaches it, its terminal control sequences shown escaped.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from typing import Dict

from hostile_attacks import FORGED, forge_output
from keyed_clusters import RawPeer

from scaler.protocol import messages as m
from scaler.protocol.ids import new_worker_id
from scaler.protocol.security import KEY_FILE_VARIABLE, SERVER_KEY_FILE_VARIABLE

DEADLINE_SECONDS = 60.0

# The client's process: one task that prints terminal control sequences, then waits for the test's go (a file).
CLIENT_PROGRAM = r"""
import os, sys, time
from scaler import Client

def printing_task(go: str) -> str:
    print("\x1b]0;title set by a task\x07\x1b[2Jtask started", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    print("task goes on")
    return "done"

with Client(sys.argv[1], stream_output=True) as client:
    future = client.submit(printing_task, sys.argv[2])
    print(f"ids {client.client_id.hex()} {future.task_id.hex()}", flush=True)
    print(f"result {future.result(timeout=120)}", flush=True)
"""


class ProcessOutput:
    """What a process prints on its standard output (and error), read as it comes, each wait bounded."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process = process
        self._selector = selectors.DefaultSelector()
        self._selector.register(process.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        self.text = ""

    def wait_for(self, needle: str, timeout: float = DEADLINE_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{needle!r} never came; the client printed {self.text!r}"
            if self._selector.select(remaining):
                chunk = os.read(self._process.stdout.fileno(), 65536)  # type: ignore[union-attr]
                assert chunk, f"the client ended before {needle!r}; it printed {self.text!r}"
                self.text += chunk.decode(errors="replace")

    def close(self) -> None:
        self._selector.close()


def _client_environment(cluster) -> Dict[str, str]:
    security = cluster.security("client")
    environment = dict(os.environ)
    if security.key_file is not None:
        environment[KEY_FILE_VARIABLE] = security.key_file
        environment[SERVER_KEY_FILE_VARIABLE] = security.server_key_file
    return environment


def test_a_worker_prints_only_the_output_of_the_tasks_it_holds_to_their_own_client(any_cluster, tmp_path):
    go = tmp_path / "go"
    process = subprocess.Popen(
        [sys.executable, "-c", CLIENT_PROGRAM, any_cluster.address, str(go)], env=_client_environment(any_cluster),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    printed = ProcessOutput(process)
    forger = None
    try:
        printed.wait_for("task started")  # its task runs on a real worker: the forger holds nothing
        ids = re.search("ids ([0-9a-f]+) ([0-9a-f]+)\n", printed.text)
        assert ids is not None, printed.text
        client_id, task_id = bytes.fromhex(ids[1]), bytes.fromhex(ids[2])
        forger = RawPeer(any_cluster.address, m.PeerRole.WORKER, any_cluster.security("worker"), new_worker_id())
        assert type(forger.answer) is m.HelloAck
        forge_output(forger, client_id, task_id)  # then its output leaves before the task's own next line
        go.touch()
        printed.wait_for("result done")
        assert process.wait(DEADLINE_SECONDS) == 0
    finally:
        if forger is not None:
            forger.close()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(DEADLINE_SECONDS)
        printed.close()
    assert "task goes on" in printed.text  # the task's own output, after the forgery, came
    assert FORGED not in printed.text
    assert "dropped 2 output(s) from worker" in any_cluster.log()  # and, silently, the one of no task
    # the task's control sequences are shown, escaped, and none reached the terminal
    assert "\\x1b]0;title set by a task\\x07\\x1b[2Jtask started\n" in printed.text
    assert "\x1b" not in printed.text and "\x07" not in printed.text
