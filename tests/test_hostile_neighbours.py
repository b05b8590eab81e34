"""A client among hostile neighbours (issue 25), with real processes: while a legitimate `Client` runs a long map,
graphs and nested tasks, every attack of `hostile_attacks.py` runs at once against the same cluster, each in a
process of its own (`hostile_scene.AttackProcesses`): thousands of connections that say Hello and close, a frame
of 2 GiB announced on every port before authentication, handshakes that stall, a client's frame over the limit
it was told, tasks that name the client's object and function, its live task and object IDs squatted, output
forged for its task by a worker, one graph of 100,000 nodes in one message, and, with keys, a monitor
key revoked while it watches. Each attack is refused as its own test shows (it fails in its process
otherwise); every result of the client is right, and it is never disconnected, on either side: its timeout
and the scheduler's for it are 5 s. With keys (each attacker holds a key of the role it attacks with: another
user's client key, a worker key, a monitor key) and without.
"""

from __future__ import annotations

import time

import pytest
from hostile_attacks import FORGED
from hostile_scene import DATA, SCHEDULER_OPTIONS, AttackProcesses, attacks, prepare
from keyed_clusters import Cluster, start_cluster

from scaler import Client
from scaler.protocol.ids import show

TIMEOUT = 5.0  # seconds: the client's own, and the scheduler's for its clients
RESULT_SECONDS = 120.0
MAP = 1_000  # tasks of each round's map
SCENE_SECONDS = 300.0  # for the attacks to end


def square(value: int) -> int:
    return value * value


def add(a: int, b: int) -> int:
    return a + b


def nested_squares(client: Client, n: int) -> int:
    """A task that submits tasks through the client it was given."""
    return sum(client.map(square, [(i,) for i in range(n)]))


def work(client: Client, reference) -> None:
    """A round of the client's work: a map, a graph (a chain, and a node that reads its object), nested tasks."""
    assert client.map(square, [(i,) for i in range(MAP)]) == [i * i for i in range(MAP)]
    graph = {"x0": 0, **{f"x{i}": (add, f"x{i - 1}", i) for i in range(1, 50)}, "size": (len, reference)}
    assert client.get(graph, keys=["x49", "size"]) == {"x49": sum(range(50)), "size": len(DATA)}
    nested = client.submit(nested_squares, client, 20)
    assert nested.result(timeout=RESULT_SECONDS) == sum(i * i for i in range(20))


@pytest.fixture(params=[True, False], ids=["with keys", "without keys"])
def neighbourhood(request, processes, address, tmp_path) -> Cluster:
    """A scheduler (which starts its storage server) and two workers, with keys or without."""
    options = (*SCHEDULER_OPTIONS, "--client-timeout-seconds", str(TIMEOUT))
    return start_cluster(processes, address, tmp_path, request.param, scheduler_options=options)


def test_a_client_among_hostile_neighbours_gets_every_result_and_is_never_disconnected(neighbourhood, tmp_path, capfd):
    security = neighbourhood.security("client")
    with Client(neighbourhood.address, security=security, timeout_seconds=TIMEOUT, stream_output=True) as client:
        scene, waiting, reference = prepare(client, neighbourhood, str(tmp_path / "scene"))
        with AttackProcesses(scene, attacks(scene.secure)) as attackers:
            rounds = 0
            deadline = time.monotonic() + SCENE_SECONDS
            while rounds == 0 or attackers.running():  # the client works for as long as any attack runs
                assert time.monotonic() < deadline, "the attacks never ended"
                work(client, reference)
                rounds += 1
            outcomes = attackers.outcomes()
        failed = [f"{name}:\n{error}" for name, (_, error) in outcomes.items() if error]
        assert not failed, "\n".join(failed)
        work(client, reference)  # and after them
        assert waiting.cancel(timeout=RESULT_SECONDS)  # the scheduler still held it, as the client's
        assert client.connected
        log = neighbourhood.log()  # before the client leaves
    assert f"client {show(scene.client_id)} timed out" not in log
    assert f"client {show(scene.client_id)} disconnected" not in log
    assert "Traceback" not in log
    assert "dropped 2 output(s) from worker" in log  # the forged output, the one of no task silently
    printed = capfd.readouterr()
    assert FORGED not in printed.out and FORGED not in printed.err
