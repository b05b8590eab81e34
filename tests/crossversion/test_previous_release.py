"""The last release (releases.toml) and the current sources, paired every way: same protocol major, so all works.

Built by build_peers.py in the tox environment `crossversion`. The previous release's client runs
client_program.py in its own Python; ours runs here. The current sources speak a newer minor version than
the release: what they added (stream_output, protocol 1.3) is ignored by the older peer, never an error, and
what needs a newer peer (a graph sent in parts, 1.7) is not used with an older one.
"""

from __future__ import annotations

import math

import pytest
from peers import protocol_of, run_client_program, start_scheduler, start_workers, wait_for_workers

from scaler import Client
from scaler.protocol.version import PROTOCOL_VERSION, show_version

EXPECTED = {
    "submit": 4.0,
    "map": 661.46,
    "get": {"c": math.sqrt(2)},
    "object": 1_000_000,
    "large_result": 2_000_000,
    "error": "raised in the task",
}


def fail():
    raise ValueError("raised in the task")


def check_this_client(address: str) -> None:
    """What client_program.py does, with our client, plus what the older peer must ignore."""
    with Client(address, timeout_seconds=30, stream_output=True) as client:
        assert client.submit(math.sqrt, 16).result(timeout=60) == EXPECTED["submit"]
        assert round(sum(client.map(math.sqrt, [(i,) for i in range(100)])), 2) == EXPECTED["map"]
        assert client.get({"a": 2, "c": (math.sqrt, "a")}, keys=["c"]) == EXPECTED["get"]
        # larger than a part (GRAPH_PART_SIZE): in parts to a scheduler of 1.7 or later, whole to an older one
        wide = {("n", i): (abs, -i) for i in range(10_001)}
        wide["total"] = (sum, list(wide))
        assert client.get(wide, keys=["total"]) == {"total": sum(range(10_001))}
        assert client.submit(len, client.send_object(b"x" * 1_000_000)).result(timeout=60) == EXPECTED["object"]
        assert len(client.submit(bytes, 2_000_000).result(timeout=60)) == EXPECTED["large_result"]
        with pytest.raises(ValueError, match=EXPECTED["error"]):
            client.submit(fail).result(timeout=60)


def test_the_peers_speak_an_older_minor_of_the_same_major(peers_are_built):
    previous = protocol_of("previous")
    assert previous != show_version(PROTOCOL_VERSION) and previous.split(".")[0] == str(PROTOCOL_VERSION.major)


@pytest.mark.parametrize(
    "client, scheduler, workers",
    [
        ("previous", "current", "current"),
        ("previous", "current", "previous"),
        ("previous", "previous", "current"),
        ("current", "previous", "previous"),
        ("current", "current", "previous"),
        ("current", "previous", "current"),
    ],
)
def test_every_pairing_works(peers_are_built, processes, address, tmp_path, client, scheduler, workers):
    start_scheduler(processes, scheduler, address, str(tmp_path / "scheduler.log"))
    start_workers(processes, workers, address, 2, str(tmp_path / "cluster.log"))
    wait_for_workers(address, 2)
    if client == "previous":
        assert run_client_program("previous", address) == EXPECTED
    else:
        check_this_client(address)
