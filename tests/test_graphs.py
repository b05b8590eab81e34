"""Graph tasks on a real cluster: client.get end to end, failures, cancel, freeing, 100,000 nodes, nesting."""

from __future__ import annotations

import concurrent.futures
import operator
import threading
import time

import pytest
from cluster_processes import next_snapshot, wait_until

import scaler.client.client
from scaler import Client, GraphCycleError, GraphKeyError, SchedulerClusterCombo
from scaler.protocol.addresses import default_monitor_address
from scaler.scheduler.graph_index import graphblas_available


def inc(i):
    return i + 1


def add(a, b):
    return a + b


def minus(a, b):
    return a - b


def fail(message):
    raise ValueError(message)


def sleep_then(value, seconds):
    time.sleep(seconds)
    return value


def make_block(previous, size):
    """A result too large to travel inline: it goes through object storage."""
    return bytes([(len(previous) // size + 1) % 256]) * size


def nested_square(client, value):
    return client.submit(operator.mul, value, value).result()


def graph_inside_a_task(n):
    with Client() as client:  # inside a worker: finds its scheduler
        return client.get({"a": n, "b": (inc, "a"), "c": (add, "a", "b")}, keys=["c"])["c"]


def graph_in_parts_inside_a_task(n):
    scaler.client.client.GRAPH_PART_SIZE = 3  # this processor's clients send graphs of more than 3 tasks in parts
    with Client() as client:
        chain = {"x-0": n, **{f"x-{i}": (inc, f"x-{i - 1}") for i in range(1, 10)}}
        return client.get(chain, keys=["x-9"])["x-9"]


README_GRAPH = {
    "a": 2,
    "b": 2,
    "c": (inc, "a"),  # c = a + 1 = 2 + 1 = 3
    "d": (add, "a", "b"),  # d = a + b = 2 + 2 = 4
    "e": (minus, "d", "c"),  # e = d - c = 4 - 3 = 1
}


@pytest.fixture(scope="module")
def cluster():
    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture
def client(cluster):
    with Client(address=cluster.get_address(), timeout_seconds=60) as client:
        yield client


def test_the_readme_example(client):
    assert client.get(README_GRAPH, keys=["e"]) == {"e": 1}
    futures = client.get(README_GRAPH, keys=["e", "c", "a"], block=False)
    assert {key: future.result(timeout=60) for key, future in futures.items()} == {"e": 1, "c": 3, "a": 2}


def test_graph_values_of_every_kind(client):
    reference = client.send_object([1, 2, 3], name="numbers")
    graph = {
        "none": None,
        "is_none": (operator.is_, "none", None),
        "x": 3,
        "y": (inc, "x"),
        "twice": (add, "y", "y"),  # a duplicate dependency
        "alias": "twice",
        "nested": (list, [["x", "y"], ("y", {"k": "x"}), (inc, (inc, "y"))]),
        "container": ["x", {"y": "y"}],
        "ref": reference,
        "length": (len, "ref"),
        "ref_in_list": (len, [reference, "ref"]),
        "text": "not a key",
    }
    keys = ["is_none", "twice", "alias", "nested", "container", "length", "ref", "ref_in_list", "text", "none"]
    assert client.get(graph, keys=keys) == {
        "is_none": True,
        "twice": 8,
        "alias": 8,
        "nested": [[3, 4], (4, {"k": 3}), 6],
        "container": [3, {"y": 4}],
        "length": 3,
        "ref": [1, 2, 3],
        "ref_in_list": 2,
        "text": "not a key",
        "none": None,
    }


def test_a_failure_fails_exactly_its_dependants_with_the_original_exception(client):
    graph = {
        "bad": (fail, "broken input"),
        "after_bad": (inc, "bad"),
        "further": (add, "after_bad", "ok"),
        "ok": (inc, 1),
        "also_ok": (add, "ok", "ok"),
    }
    futures = client.get(graph, keys=["further", "after_bad", "also_ok", "ok"], block=False)
    assert futures["also_ok"].result(timeout=60) == 4 and futures["ok"].result(timeout=60) == 2
    for key in ("after_bad", "further"):
        error = futures[key].exception(timeout=60)
        assert type(error) is ValueError and str(error) == "broken input"
        assert "fail" in str(error.__cause__)  # the remote traceback
    with pytest.raises(ValueError, match="broken input"):
        client.get(graph, keys=["further"])
    assert client.get(graph, keys=["also_ok"]) == {"also_ok": 4}


def test_cycles_and_missing_keys_are_refused_before_anything_runs(client):
    with pytest.raises(GraphCycleError, match="'a' -> 'b' -> 'a'"):
        client.get({"a": (inc, "b"), "b": (inc, "a")}, keys=["a"])
    with pytest.raises(GraphKeyError, match="'missing'"):
        client.get(README_GRAPH, keys=["e", "missing"])
    with pytest.raises(GraphKeyError, match="'missing'"):
        client.dask_get(README_GRAPH, ["missing"])


def test_cancelling_a_graph_cancels_its_pending_nodes(cluster, client):
    graph = {("slow", i): (sleep_then, i, 60) for i in range(4)}
    graph["total"] = (sum, [("slow", i) for i in range(4)])
    graph["next"] = (inc, "total")
    futures = client.get(graph, keys=["next", "total"], block=False)
    monitor = default_monitor_address(cluster.get_address())
    wait_until(lambda: _running_tasks(monitor) == 4, 30, "the four slow nodes at the workers")
    assert all(future.cancel() for future in futures.values())
    assert all(future.cancelled() for future in futures.values())
    wait_until(lambda: _running_tasks(monitor) == 0, 30, "the graph's nodes cancelled on the workers")
    assert client.submit(inc, 1).result(timeout=30) == 2


def _running_tasks(monitor: str) -> int:
    snapshot = next_snapshot(monitor)
    if snapshot is None:
        return -1
    counts = {counter.name: counter.value for counter in snapshot.task_states}
    return counts.get("queued", 0) + counts.get("assigned", 0) + counts.get("canceling", 0)


def test_a_failure_with_block_cancels_the_other_keys(cluster, client):
    graph = {"slow": (sleep_then, 1, 60), "bad": (fail, "stop"), "after": (inc, "slow")}
    with pytest.raises(ValueError, match="stop"):
        client.get(graph, keys=["after", "bad"])
    monitor = default_monitor_address(cluster.get_address())
    wait_until(lambda: _running_tasks(monitor) == 0, 30, "the slow node cancelled")


def test_graph_nodes_may_submit_tasks_and_graphs_may_be_submitted_from_tasks(client):
    graph = {"client": client, "x": (inc, 6), "square": (nested_square, "client", "x")}
    assert client.get(graph, keys=["square"]) == {"square": 49}
    assert client.submit(graph_inside_a_task, 10).result(timeout=120) == 21
    assert client.get({"n": 4, "inner": (graph_inside_a_task, "n")}, keys=["inner"]) == {"inner": 9}


def test_100000_node_graph(client):
    """A reduction tree of 100,000 nodes: 50,000 cheap leaves, pairwise sums up to one root."""
    leaves = 50_000
    graph = {("leaf", i): (inc, i) for i in range(leaves)}
    level = [("leaf", i) for i in range(leaves)]
    depth = 0
    while len(level) > 1:
        depth += 1
        upper = [("sum", depth, k) for k in range(0, len(level) - 1, 2)]
        for name, k in zip(upper, range(0, len(level) - 1, 2), strict=True):
            graph[name] = (add, level[k], level[k + 1])
        if len(level) % 2:
            upper.append(level[-1])
        level = upper
    assert len(graph) >= 99_999
    result = client.get(graph, keys=[level[0]])
    assert result == {level[0]: sum(range(1, leaves + 1))}


def test_a_graph_sent_in_parts_runs_fails_and_cancels_as_one_graph(cluster, client, monkeypatch):
    """Parts of three tasks (a graph larger than a part leaves in parts, the first running before the rest)."""
    monkeypatch.setattr(scaler.client.client, "GRAPH_PART_SIZE", 3)
    chain = {"x-0": 0, **{f"x-{i}": (inc, f"x-{i - 1}") for i in range(1, 12)}}
    assert client.get(chain, keys=["x-11", "x-2"]) == {"x-11": 11, "x-2": 2}
    failing = dict(chain, **{"x-1": (fail, "early part")})  # the failure is in the first part, its target last
    with pytest.raises(ValueError, match="early part"):
        client.get(failing, keys=["x-11"])
    unpicklable = dict(chain, **{"x-9": (add, "x-8", threading.Lock())})  # encoded after earlier parts left
    with pytest.raises(TypeError, match="lock"):
        client.get(unpicklable, keys=["x-11"])
    cyclic = dict(chain, **{"x-7": (add, "x-6", "x-10")})  # found after the first two parts left
    with pytest.raises(GraphCycleError, match="'x-10' -> 'x-9' -> 'x-8' -> 'x-7' -> 'x-10'"):
        client.get(cyclic, keys=["x-11"])
    wait_until(lambda: _running_tasks(default_monitor_address(cluster.get_address())) == 0, 30, "nothing left")
    assert client.get(chain, keys=["x-11"]) == {"x-11": 11}


def test_graphs_in_parts_on_one_worker_with_a_queue_of_one(monkeypatch):
    """The smallest cluster: parts of a graph, and a graph in parts submitted by a task, never wait on each other."""
    monkeypatch.setattr(scaler.client.client, "GRAPH_PART_SIZE", 2)
    with SchedulerClusterCombo(n_workers=1, per_worker_queue_size=1, logging_level="WARNING") as combo:
        with Client(address=combo.get_address(), timeout_seconds=60) as client:
            wide = {("n", i): (inc, i) for i in range(9)}
            wide["total"] = (sum, list(wide))
            assert client.get(wide, keys=["total", ("n", 0)]) == {"total": 45, ("n", 0): 1}
            assert client.submit(graph_in_parts_inside_a_task, 1).result(timeout=60) == 10
            graph = {"n": 5, "inner": (graph_in_parts_inside_a_task, "n"), "twice": (add, "inner", "inner")}
            assert client.get(graph, keys=["twice"]) == {"twice": 28}


@pytest.mark.parametrize(
    "sorter",
    [
        "python",
        pytest.param(
            "graphblas",
            marks=pytest.mark.skipif(not graphblas_available(), reason="python-graphblas is not installed"),
        ),
    ],
)
def test_large_results_go_through_storage_and_are_freed_as_soon_as_used(processes, address, sorter):
    """With 40 MiB of storage a chain of twenty 8 MiB results runs only if each is freed once its dependant ran."""
    storage = address.rsplit(":", 1)[0] + f":{int(address.rsplit(':', 1)[1]) + 1}"
    processes.storage(storage, "--max-memory", "40M")
    processes.scheduler(address, "--object-storage-address", storage, "--graph-sorter", sorter,
                        "--graph-inline-bytes", "0")  # fmt: skip
    processes.cluster(address, 2)
    size = 8 * 1024 * 1024
    graph = {"block-0": b""}
    for i in range(1, 21):
        graph[f"block-{i}"] = (make_block, f"block-{i - 1}", size)
    graph["length"] = (len, "block-20")
    with Client(address=address) as client:
        assert client.get(graph, keys=["length"]) == {"length": size}
        assert client.get(README_GRAPH, keys=["e"]) == {"e": 1}  # small results through storage too
        failing = dict(graph, **{"block-5": (fail, "in the middle")})
        with pytest.raises(ValueError, match="in the middle"):
            client.get(failing, keys=["length"])
        assert client.get(graph, keys=["length"]) == {"length": size}  # nothing leaked by the failure


def test_a_client_that_leaves_takes_its_graph_with_it(cluster):
    monitor = default_monitor_address(cluster.get_address())
    client = Client(address=cluster.get_address())
    graph = {("slow", i): (sleep_then, i, 60) for i in range(3)}
    graph["total"] = (sum, [("slow", i) for i in range(3)])
    futures = client.get(graph, keys=["total"], block=False)
    wait_until(lambda: _running_tasks(monitor) >= 2, 30, "slow nodes running")
    client.disconnect()
    with pytest.raises(concurrent.futures.CancelledError):  # given up by leaving, as the earlier engine ends them
        futures["total"].result(timeout=30)
    wait_until(lambda: _running_tasks(monitor) == 0, 30, "the departed client's nodes cancelled")
    with Client(address=cluster.get_address()) as other:
        done, _ = concurrent.futures.wait([other.submit(inc, 1)], timeout=30)
        assert len(done) == 1
