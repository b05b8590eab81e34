"""Hosts that vanish without a word, and partitions that heal, across network namespaces (issue 27).

Each component runs on a host of its own (`network_hosts`: a network namespace joined to the others by a
switch), as real processes speaking real TCP; a host "vanishes" when its cable is pulled (`Host.cut`: its
packets are dropped, nobody gets a FIN or a RST). The timeouts of silent peers (the worker's, the client's,
the scheduler's for either) are set to 600 s, out of reach of every bounded wait here, so that only the
detection of a dead connection (`scaler.protocol.connection_liveness`: 3 s) can end those waits in time; the
tests of false alarms keep the default settings. The bounds of the waits are generous for a shared 2-core
machine; how fast each case is noticed is measured by benchmarks/vanished_hosts.py (docs/scheduling.md).
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


def _cluster(network: Network, processes: Processes, tmp_path: Path, **options: Any) -> Cluster:
    return Cluster(network, processes, tmp_path, **options)


def test_a_vanished_worker_hosts_tasks_run_elsewhere_at_once(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path)
    mapping = cluster.peer("map", "20", "0.5")
    mapping.expect("connected", 60)
    for _ in range(3):
        mapping.expect("result", 60)
    cluster.worker_hosts[0].cut()
    done = mapping.expect("done", 45)  # 600 s for a silent worker: only the dead connection can end this in time
    assert done["values"] == [i * i for i in range(20)]
    assert len(cluster.scheduler_says(r"worker \S+ disconnected \(its connection closed\)")) == 1


def test_a_vanished_client_hosts_tasks_are_cancelled_and_free_their_worker(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path, workers=1)
    marker = tmp_path / "running"
    cluster.peer("hold", str(marker))
    wait_until(marker.exists, 60, "the client's task to run")
    cluster.client_host.cut()
    # a client on another host: its task runs on the only worker only once the vanished client's task is cancelled
    other = cluster.peer("map", "1", "0", host=cluster.scheduler_host)
    assert other.expect("done", 45)["values"] == [0]
    assert len(cluster.scheduler_says(r"client \S+ disconnected \(its connection closed\)")) == 1


def test_a_vanished_scheduler_host_fails_the_clients_futures_naming_it_and_its_workers_notice(
    network, processes, tmp_path
):
    cluster = _cluster(network, processes, tmp_path, workers=1)
    marker = tmp_path / "running"
    mapping = cluster.peer("hold", str(marker))
    wait_until(marker.exists, 60, "the client's task to run")
    cluster.scheduler_host.cut()
    error = mapping.expect("error", 45)
    assert (error["type"], error["message"]) == (
        "DisconnectedError", f"lost the connection to the scheduler at {cluster.address}"
    )
    worker_log = "cluster-worker0"
    wait_until(lambda: f"lost the connection to scheduler {cluster.address}" in cluster.log(worker_log), 30,
               "the worker to notice")  # fmt: skip


def test_a_vanished_storage_host_fails_what_waits_on_it(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path, workers=1, storage_host=True)
    putting = cluster.peer("objects")
    putting.expect("connected", 60)
    putting.expect("stored", 30)
    cluster.storage_host.cut()
    error = putting.expect("error", 45)  # a put waits 600 s for its answer: only the dead connection ends it
    assert error["type"] == "DisconnectedError"
    assert cluster.storage_address in error["message"], error
    worker_log = "cluster-worker0"
    wait_until(lambda: f"lost the connection to object storage {cluster.storage_address}" in cluster.log(worker_log),
               30, "the worker to notice")  # fmt: skip


def test_a_worker_host_cut_off_for_20_seconds_rejoins_without_a_restart(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path)
    worker_log = "cluster-worker0"
    (worker_id,) = re.findall(r"Worker (\S+): connecting to scheduler", cluster.log(worker_log))
    mapping = cluster.peer("map", "20", "0.5")
    for _ in range(3):
        mapping.expect("result", 60)
    cut = time.monotonic()
    cluster.worker_hosts[0].cut()
    assert mapping.expect("done", 45)["values"] == [i * i for i in range(20)]  # while the host is away
    time.sleep(max(0.0, cut + 20 - time.monotonic()))  # the partition lasts 20 s
    cluster.worker_hosts[0].restore()
    wait_until(lambda: "connected to scheduler" in cluster.log(worker_log).split("lost the connection")[-1], 60,
               "the worker to rejoin")  # fmt: skip
    log = cluster.log(worker_log)
    assert log.count("connecting to scheduler") == 1 and "exiting" not in log, "the worker was restarted"
    assert len(cluster.scheduler_says(rf"worker {re.escape(worker_id)} connected")) == 2
    again = cluster.peer("map", "20", "0.5")  # both workers again; what the first did while cut off is not delivered
    assert again.expect("done", 60)["values"] == [i * i for i in range(20)]


def test_a_client_cut_off_briefly_loses_nothing_and_longer_fails_clearly_then_connects_again(
    network, processes, tmp_path
):
    cluster = _cluster(network, processes, tmp_path, workers=1)
    mapping = cluster.peer("map", "20", "0.2")
    for _ in range(2):
        mapping.expect("result", 60)
    cluster.client_host.cut()
    time.sleep(1.5)  # the cut lasts less than a dead connection's 3 s: TCP retransmits what was lost meanwhile
    cluster.client_host.restore()
    assert mapping.expect("done", 60)["values"] == [i * i for i in range(20)]

    mapping = cluster.peer("map", "10", "1", "--again")
    mapping.expect("result", 60)
    cluster.client_host.cut()
    error = mapping.expect("error", 45)
    assert (error["type"], error["message"]) == (
        "DisconnectedError", f"lost the connection to the scheduler at {cluster.address}"
    )
    cluster.client_host.restore()
    assert mapping.expect("again", 60)["value"] == 9


# ----------------------------------------------------------------------------- no false alarms: default settings

_ALARMS = r"disconnected \(its connection closed\)|timed out|lost the connection"


def _no_alarm(cluster: Cluster) -> None:
    for name in ("scaler_scheduler", *(f"cluster-{host.name}" for host in cluster.worker_hosts)):
        assert not re.findall(_ALARMS, cluster.log(name)), f"{name}: {cluster.log(name)[-2000:]}"


def test_a_task_that_holds_the_gil_in_c_for_30_seconds_is_no_alarm(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path, workers=1, defaults=True)
    assert cluster.peer("gil", "30", "--defaults").expect("done", 120)["value"] == 30
    _no_alarm(cluster)


def test_a_1_gb_argument_over_a_1_gbit_link_is_no_alarm(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path, workers=1, defaults=True)
    for host in (cluster.client_host, cluster.scheduler_host, cluster.worker_hosts[0]):
        host.limit("1gbit")  # 8 s to send 1 GB (client to storage, storage to worker): longer than 3 s
    assert cluster.peer("large", "1000", "--defaults").expect("done", 240)["value"] == 10**9
    _no_alarm(cluster)


def test_a_scheduler_busy_with_a_100000_node_graph_is_no_alarm(network, processes, tmp_path):
    cluster = _cluster(network, processes, tmp_path, workers=1, defaults=True)
    graph = cluster.peer("graph", "100000", "--defaults")
    graph.expect("connected", 60)
    mapping = cluster.peer("map", "20", "0.5", "--defaults", host=cluster.scheduler_host)
    assert mapping.expect("done", 240)["values"] == [i * i for i in range(20)]
    assert graph.expect("done", 240)["value"] == sum(range(1, 100001))
    _no_alarm(cluster)
