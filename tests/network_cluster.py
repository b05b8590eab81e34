"""A Scaler cluster on hosts made of network namespaces (`network_hosts`), for tests/test_vanished_hosts.py and
benchmarks/vanished_hosts.py: storage and scheduler on one host (or storage on a host of its own), one worker per
worker host, client programs (`network_peer.py`) on a client host, every process's output in a log file.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_processes import BIN, Processes, wait_until
from network_hosts import Host, Network

NEVER = "600"
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "network_peer.py")
SCHEDULER_PORT = 2345
STORAGE_PORT = 2346
_PROGRESS = ("connected", "result")


class Peer:
    """A `network_peer.py` program running on a host; `expect` waits, bounded, for its next event."""

    def __init__(self, processes: Processes, host: Host, *arguments: str) -> None:
        self.process = processes.start("python", PEER, *arguments, prefix=host.command, stdout=subprocess.PIPE)
        self._events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(b"{"):
                self._events.put(json.loads(line))
        self._events.put({"event": "exited", "code": self.process.wait()})

    def expect(self, event: str, timeout: float) -> Dict[str, Any]:
        """The next event (but the progress ones, "connected" and "result", unless asked for), which must be
        ``event`` and come within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self._events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no {event!r} from {self.process.args[-3:]} within {timeout:g} s") from None
            if got["event"] in _PROGRESS and event != got["event"]:
                continue
            assert got["event"] == event, f"expected {event!r}, got {got}"
            return got


class Cluster:
    """Storage and scheduler on one host (or storage on its own), one worker per worker host, logs in a folder."""

    def __init__(self, network: Network, processes: Processes, logs: Path, *, workers: int = 2,
                 storage_host: bool = False, defaults: bool = False) -> None:  # fmt: skip
        self.network = network
        self.processes = processes
        self.logs = logs
        self.scheduler_host = network.host("scheduler")
        self.storage_host = network.host("storage") if storage_host else self.scheduler_host
        self.client_host = network.host("client")
        self.worker_hosts = [network.host(f"worker{index}") for index in range(workers)]
        self.address = self.scheduler_host.tcp(SCHEDULER_PORT)
        self.storage_address = self.storage_host.tcp(STORAGE_PORT)
        timeouts = [] if defaults else ["--worker-timeout-seconds", NEVER, "--client-timeout-seconds", NEVER]
        self._start(self.storage_host, "scaler_object_storage_server", self.storage_address, "--insecure")
        self.scheduler = self._start(self.scheduler_host, "scaler_scheduler", self.address, "--insecure",
                                     "--object-storage-address", self.storage_address, *timeouts)  # fmt: skip
        self.wait_answering(self.client_host)
        worker_timeout = [] if defaults else ["--worker-timeout-seconds", NEVER]
        self.clusters = [
            self._start(host, "scaler_cluster", "-n", "1", self.address, *worker_timeout, log=f"cluster-{host.name}")
            for host in self.worker_hosts
        ]
        for host in self.worker_hosts:
            wait_until(lambda host=host: "connected to scheduler" in self.log(f"cluster-{host.name}"), 60,
                       f"the worker on {host.name} to join")  # fmt: skip

    def _start(self, host: Host, program: str, *arguments: str, log: Optional[str] = None) -> Any:
        path = self.logs / f"{log or program}.log"
        return self.processes.start(program, *arguments, prefix=host.command, log_path=str(path))

    def wait_answering(self, host: Host) -> None:
        command = [*host.command, os.path.join(BIN, "python"), PEER, "wait", self.address]
        assert subprocess.run(command, timeout=90).returncode == 0, f"no scheduler answered at {self.address}"

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def peer(self, *arguments: str, host: Optional[Host] = None) -> Peer:
        return Peer(self.processes, host or self.client_host, arguments[0], self.address, *arguments[1:])

    def scheduler_says(self, pattern: str) -> List[str]:
        return re.findall(pattern, self.log("scaler_scheduler"))
