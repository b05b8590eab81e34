"""The workers filed by load (`WorkerLoads`, draining ones too) against a plain scan of every worker, and the
silence of peers (`Silence`) against the rule it stands for."""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.protocol.security import OPEN
from scaler.scheduler.peers import Client, Silence, Worker
from scaler.scheduler.worker_loads import WorkerLoads

CAPABILITY_SETS = [(), ("gpu",), ("gpu", "linux"), ("linux",)]
NEEDS: List[Optional[FrozenSet[str]]] = [None, frozenset({"gpu"}), frozenset({"linux"}), frozenset({"gpu", "linux"})]


def worker(n: int, capacity: int, capabilities=()) -> Worker:
    info = m.WorkerInfo(1, capacity, [m.Capability(name, -1) for name in capabilities])
    return Worker(b"W|%d" % n, m.Hello(worker_info=info), 0.0, OPEN)


def hold(w: Worker, count: int, waiting: int = 0) -> None:
    """``w`` holds ``count`` tasks, ``waiting`` of them waiting for tasks they submitted."""
    w.tasks = {b"t|%d|%d" % (id(w), i): 1 for i in range(count)}
    w.waiting = set(list(w.tasks)[:waiting])


def scan(workers: Dict[bytes, Worker], needs: Optional[FrozenSet[str]]) -> Optional[int]:
    """The least load of a worker with room and ``needs``, by looking at every worker."""
    loads = [w.load for w in workers.values() if w.load < w.capacity and (needs is None or needs <= w.capabilities)]
    return min(loads) if loads else None


_OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["join", "leave", "load", "pick", "touch_only", "drain"]), st.integers(0, 10**6)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_OPERATIONS)
def test_the_pick_is_always_a_least_loaded_worker_with_room_and_the_capabilities(operations):
    loads = WorkerLoads()
    workers: Dict[bytes, Worker] = {}
    count = 0
    for operation, n in operations:
        if operation == "join":
            w = worker(count, 1 + n % 5, CAPABILITY_SETS[n % len(CAPABILITY_SETS)])
            count += 1
            hold(w, n % 7, n % 3)
            workers[w.worker_id] = w
            loads.add(w)
        elif operation == "leave" and workers:
            w = workers.pop(sorted(workers)[n % len(workers)])
            loads.remove(w)
        elif operation in ("load", "touch_only") and workers:
            w = workers[sorted(workers)[n % len(workers)]]
            hold(w, n % 7, (n // 7) % 3)
            loads.touch(w)
            if operation == "touch_only":
                continue  # not refreshed yet: the next refresh files it
        elif operation == "drain" and workers:  # its group is to stop: no room, no balancing
            w = workers[sorted(workers)[n % len(workers)]]
            if not w.draining:
                loads.drain(w)
        elif operation == "pick" and workers:  # a task given to the pick, as the dispatch does
            loads.refresh()
            needs = NEEDS[n % len(NEEDS)]
            picked = loads.least_loaded(needs)
            assert (picked.load if picked else None) == scan(workers, needs)
            if picked is not None:
                picked.tasks[b"given|%d" % n] = 1
                loads.took(picked)
        loads.refresh()
        balanced = [w for w in workers.values() if not w.draining]
        assert loads.total_load == sum(w.load for w in balanced)
        assert loads.balanced_count == len(balanced)
        assert loads.idle_count() == sum(w.load == 0 for w in balanced)
        order = [w.load for w in loads.most_loaded()]
        assert order == sorted((w.load for w in balanced), reverse=True)
        for needs in NEEDS:
            picked = loads.least_loaded(needs)
            assert (picked.load if picked else None) == scan(workers, needs)


def test_workers_of_equal_load_take_tasks_in_turn():
    loads = WorkerLoads()
    a, b, c = worker(1, 10), worker(2, 10), worker(3, 10)
    for w in (a, b, c):
        loads.add(w)
    picks = []
    for i in range(6):
        picked = loads.least_loaded(None)
        picks.append(picked.worker_id)
        picked.tasks[b"%d" % i] = 1
        loads.took(picked)
    assert picks == [a.worker_id, b.worker_id, c.worker_id] * 2


def test_a_full_worker_is_never_picked_and_comes_back_once_it_has_room():
    loads = WorkerLoads()
    full = worker(1, 2)
    loads.add(full)
    hold(full, 2)
    loads.touch(full)
    loads.refresh()
    assert loads.least_loaded(None) is None
    hold(full, 2, waiting=1)  # a task that waits takes no room
    loads.touch(full)
    loads.refresh()
    assert loads.least_loaded(None) is full


def _client(n: int, last_seen: float) -> Client:
    client = Client(b"C|%d" % n, 0.0, OPEN)
    client.last_seen = last_seen
    return client


def test_silence_finds_only_the_peers_silent_for_longer_than_the_timeout():
    silence = Silence(10.0)
    peers = {client.client_id: client for client in (_client(1, 0.0), _client(2, 0.0), _client(3, 0.0))}
    for peer_id in peers:
        silence.watch(peer_id, 0.0)
    assert silence.silent(peers, 10.0) == []  # not longer than the timeout yet
    peers[b"C|2"].last_seen = 8.0  # it spoke since
    del peers[b"C|3"]  # it left
    assert [peer.client_id for peer in silence.silent(peers, 10.5)] == [b"C|1"]
    del peers[b"C|1"]
    assert silence.silent(peers, 18.0) == []
    assert [peer.client_id for peer in silence.silent(peers, 18.5)] == [b"C|2"]


def test_a_peer_that_said_hello_again_under_the_same_id_is_watched_once():
    silence = Silence(10.0)
    peers = {b"C|1": _client(1, 0.0)}
    silence.watch(b"C|1", 0.0)
    peers[b"C|1"] = _client(1, 5.0)  # the same ID, a new peer
    silence.watch(b"C|1", 5.0)
    assert silence.silent(peers, 12.0) == []
    assert len(silence.silent(peers, 15.5)) == 1
