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

import re
import time

from cluster_processes import wait_until
from network_cluster import Cluster


def test_a_vanished_worker_hosts_tasks_run_elsewhere_at_once(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path)
    mapping = cluster.peer("map", "20", "0.5")
    mapping.expect("connected", 60)
    for _ in range(3):
        mapping.expect("result", 60)
    cluster.worker_hosts[0].cut()
    done = mapping.expect("done", 45)  # 600 s for a silent worker: only the dead connection can end this in time
    assert done["values"] == [i * i for i in range(20)]
    assert len(cluster.scheduler_says(r"worker \S+ disconnected \(its connection closed\)")) == 1


def test_a_vanished_client_hosts_tasks_are_cancelled_and_free_their_worker(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path, workers=1)
    marker = tmp_path / "running"
    cluster.peer("hold", str(marker))
    wait_until(marker.exists, 60, "the client's task to run")
    cluster.client_host.cut()
    # a client on another host: its task runs on the only worker only once the vanished client's task is cancelled
    other = cluster.peer("map", "1", "0", host=cluster.scheduler_host)
    assert other.expect("done", 45)["values"] == [0]
    # it may come back (its wait, reconnect_seconds): its session and objects are kept, but its tasks stop now
    assert len(cluster.scheduler_says(r"client \S+ lost its connection: its tasks are cancelled")) == 1


def test_a_vanished_scheduler_host_is_noticed_waited_for_and_then_the_clients_futures_fail_naming_it(
    network, processes, tmp_path
):
    cluster = Cluster(network, processes, tmp_path, workers=1)
    marker = tmp_path / "running"
    mapping = cluster.peer("hold", str(marker), "--reconnect", "5")
    wait_until(marker.exists, 60, "the client's task to run")
    cluster.scheduler_host.cut()
    error = mapping.expect("error", 45)  # noticed in seconds, then waited for 5 s
    assert (error["type"], error["message"]) == (
        "DisconnectedError", f"lost the connection to the scheduler at {cluster.address}, which did not come back "
        "within 5s"
    )  # fmt: skip
    worker_log = "cluster-worker0"
    wait_until(lambda: f"lost the connection to scheduler {cluster.address}" in cluster.log(worker_log), 30,
               "the worker to notice")  # fmt: skip


def test_a_vanished_storage_host_fails_what_waits_on_it(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path, workers=1, storage_host=True)
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


def test_a_worker_host_cut_off_for_20_seconds_rejoins_without_a_restart_and_what_it_finished_meanwhile_is_dropped(
    network, processes, tmp_path
):
    cluster = Cluster(network, processes, tmp_path)
    worker_log = "cluster-worker0"
    (worker_id,) = re.findall(r"Worker (\S+): connecting to scheduler", cluster.log(worker_log))
    linger = tmp_path / "linger"
    mapping = cluster.peer("map", "20", "0.5", "--linger", str(linger))
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
    # what it finished while cut off it names in its Hello; the scheduler, whose client has every result, cancels
    # and drops it; the client, still connected, gets no result twice (a task after it is the barrier)
    assert cluster.scheduler_says(rf"worker {re.escape(worker_id)} holds \d+ task\(s\) from before")
    linger.touch()
    assert mapping.expect("lingered", 60)["dropped"] == 0
    again = cluster.peer("map", "20", "0.5")  # both workers again
    assert again.expect("done", 60)["values"] == [i * i for i in range(20)]


def test_a_client_cut_off_for_6_seconds_loses_nothing_and_longer_than_its_wait_fails_clearly_then_connects_again(
    network, processes, tmp_path
):
    cluster = Cluster(network, processes, tmp_path, workers=1)
    mapping = cluster.peer("map", "20", "0.2")
    for _ in range(2):
        mapping.expect("result", 60)
    cluster.client_host.cut()
    time.sleep(6)  # longer than a dead connection's 3 s: both sides see the connection closed
    cluster.client_host.restore()
    assert mapping.expect("done", 60)["values"] == [i * i for i in range(20)]  # it said Hello again, sent them again
    assert cluster.scheduler_says(r"client \S+ lost its connection") and cluster.scheduler_says(r"client \S+ is back")

    mapping = cluster.peer("map", "10", "1", "--again", "--reconnect", "5")
    mapping.expect("result", 60)
    cluster.client_host.cut()
    error = mapping.expect("error", 45)
    assert (error["type"], error["message"]) == (
        "DisconnectedError", f"lost the connection to the scheduler at {cluster.address}, which did not come back "
        "within 5s"
    )  # fmt: skip
    cluster.client_host.restore()
    assert mapping.expect("again", 60)["value"] == 9


# ----------------------------------------------------------------------------- no false alarms: default settings

_ALARMS = r"disconnected \(its connection closed\)|lost its connection|timed out|lost the connection"


def _no_alarm(cluster: Cluster) -> None:
    for name in ("scaler_scheduler", *(f"cluster-{host.name}" for host in cluster.worker_hosts)):
        assert not re.findall(_ALARMS, cluster.log(name)), f"{name}: {cluster.log(name)[-2000:]}"


def test_a_task_that_holds_the_gil_in_c_for_30_seconds_is_no_alarm(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path, workers=1, defaults=True)
    assert cluster.peer("gil", "30", "--defaults").expect("done", 120)["value"] == 30
    _no_alarm(cluster)


def test_a_1_gb_argument_over_a_1_gbit_link_is_no_alarm(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path, workers=1, defaults=True)
    for host in (cluster.client_host, cluster.scheduler_host, cluster.worker_hosts[0]):
        host.limit("1gbit")  # 8 s to send 1 GB (client to storage, storage to worker): longer than 3 s
    assert cluster.peer("large", "1000", "--defaults").expect("done", 240)["value"] == 10**9
    _no_alarm(cluster)


def test_a_scheduler_busy_with_a_100000_node_graph_is_no_alarm(network, processes, tmp_path):
    cluster = Cluster(network, processes, tmp_path, workers=1, defaults=True)
    graph = cluster.peer("graph", "100000", "--defaults")
    graph.expect("connected", 60)
    mapping = cluster.peer("map", "20", "0.5", "--defaults", host=cluster.scheduler_host)
    assert mapping.expect("done", 240)["values"] == [i * i for i in range(20)]
    assert graph.expect("done", 240)["value"] == sum(range(1, 100001))
    _no_alarm(cluster)
