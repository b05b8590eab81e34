"""A client's objects are its own, also through tasks; IDs cannot be guessed or squatted (issue 25, item 3).

Real processes (the scheduler, the storage server it starts, two workers), with keys and without. The attacks
are raw pyzmq peers (`keyed_clusters.RawPeer`, `hostile_attacks.Attacker`: the codec and a DEALER, no
`Client`): a client that names
another client's object or function in its task, a client that takes the IDs it guesses or sees, a worker
that stores objects for an owner nobody serves. Each passes on this branch and fails on the code before it,
where the task returned the other client's data, the owner's next task was silently dropped and its put
refused, the squatter was not told, and the worker's objects were kept. Delegation is shown to still work: an
`ObjectReference` passed two levels down nested tasks is read there, and only for its owner.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Iterator, List

import pytest
from cluster_processes import Processes, free_address, wait_until
from hostile_attacks import Attacker, read_through_tasks, squat_guessed_ids, squat_live_object_id, squat_live_task_id
from keyed_clusters import Cluster, RawPeer, another_client_key, start_cluster

from scaler import Client
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.errors import ObjectNotFoundError
from scaler.protocol.ids import IDGenerator, new_worker_id
from scaler.protocol.security import NO_SECURITY, SecurityConfig

SECRET = "the victim's secret"
DATA = b"the victim's data " * 5000  # 90 KB: it travels through storage, there and back

ids = IDGenerator()


@pytest.fixture(scope="module", params=[True, False], ids=["with keys", "without keys"])
def cluster(request, tmp_path_factory) -> Iterator[Cluster]:
    processes = Processes()
    try:
        directory = tmp_path_factory.mktemp("isolation")
        yield start_cluster(
            processes, free_address(), directory, request.param, scheduler_options=("--allocate-policy", "capability")
        )
    finally:
        processes.stop_all()


def reveal(secret: str) -> str:
    return secret


def echo(value: Any) -> Any:
    return value


def released(started: str, release: str) -> str:
    """Runs until the test releases it (bounded), having said it started."""
    open(started, "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


def through_two_levels(client: Client, references: List[Any]) -> bytes:
    """A task that hands the reference it received (in a list: as the reference, not its object) to a task of
    its own, which hands it to a task of its own, which reads it."""
    return client.submit(second_level, client, references).result()


def second_level(client: Client, references: List[Any]) -> bytes:
    (reference,) = references
    return client.submit(bytes.upper, reference).result()  # large: the result goes through storage too


def attacker_security(cluster: Cluster, tmp_path) -> SecurityConfig:
    """Another user's client key (with keys), or none."""
    return NO_SECURITY if cluster.keys is None else another_client_key(cluster, tmp_path, "mallory")


# --- another client's object or function, named in a task -----------------------------------------------------


def test_a_task_naming_another_clients_object_or_function_fails_and_never_reveals_it(cluster, tmp_path):
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as victim:
        secret_function = functools.partial(reveal, SECRET)
        assert victim.map(secret_function, [()] * 20) == [SECRET] * 20  # the workers' processors now hold it
        function_id = victim._builder.function_id(secret_function)  # as seen in a log: IDs are no secret
        reference = victim.send_object(DATA)
        attacker = Attacker(cluster.address, attacker_security(cluster, tmp_path))
        try:
            read_through_tasks(attacker, reference.object_id, function_id, (SECRET.encode(), DATA[:32]))
        finally:
            attacker.close()
        assert victim.submit(len, reference).result(timeout=60) == len(DATA)  # its owner's tasks read it


# --- guessed and seen IDs --------------------------------------------------------------------------------------


def test_a_squatter_of_guessed_or_live_ids_is_refused_and_never_costs_their_owner(cluster, tmp_path):
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as victim:
        assert victim.submit(echo, 1).result(timeout=60) == 1
        seen_object = victim.send_object(b"seen")
        attacker = Attacker(cluster.address, attacker_security(cluster, tmp_path))
        try:
            # the squatter takes the IDs it guesses the owner makes next (after the last it saw, the object's)
            squat_guessed_ids(attacker, seen_object.object_id)
            assert victim.submit(echo, 2).result(timeout=60) == 2  # its next task and put are its own
            assert victim.submit(len, victim.send_object(b"mine" * 10)).result(timeout=60) == 40

            # the squatter sends a task under the ID of one of the owner's tasks, running: refused to the squatter
            started, release = tmp_path / "started", tmp_path / "release"
            running = victim.submit(released, str(started), str(release))
            wait_until(started.exists, 60, "the owner's task to start")
            squat_live_task_id(attacker, running.task_id)
            release.touch()
            assert running.result(timeout=60) == "released"  # the first holder's task runs on, to its result
            squat_live_object_id(attacker, seen_object.object_id)
        finally:
            attacker.close()
        assert victim.submit(len, seen_object).result(timeout=60) == len(b"seen")


# --- delegation: a Client passed into tasks reads what its parent sent, and no more --------------------------------


def test_a_reference_passed_down_two_levels_of_nested_tasks_is_read_there_for_its_owner_only(cluster, tmp_path):
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as owner:
        reference = owner.send_object(DATA)
        assert owner.submit(through_two_levels, owner, [reference]).result(timeout=120) == DATA.upper()
        other_key = cluster.security("client") if cluster.keys is None else another_client_key(cluster, tmp_path)
        with Client(cluster.address, security=other_key, timeout_seconds=60) as other:  # knows the reference
            with pytest.raises(ObjectNotFoundError, match="not one the tasks of client .* may read"):
                other.submit(through_two_levels, other, [reference]).result(timeout=120)


# --- objects for owners nobody serves ------------------------------------------------------------------------------


def test_a_worker_stores_nothing_for_an_owner_the_scheduler_does_not_serve(cluster):
    storage_address = default_storage_address(cluster.address)  # the one the scheduler started
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as client:
        served = client.client_id
        worker = RawPeer(storage_address, m.PeerRole.WORKER, cluster.security("worker"), new_worker_id())
        try:
            kept = worker.request(m.ObjectRequest(1, m.ObjectRequestKind.PUT, served, [ids.next_id()]), (b"r",))
            assert kept.statuses == [m.ObjectStatus.OK]  # a result for a client the scheduler serves
            for owner in (b"C|nowhere|1|nobody", b""):
                refused = worker.request(m.ObjectRequest(2, m.ObjectRequestKind.PUT, owner, [ids.next_id()]), (b"x",))
                assert refused.statuses == [m.ObjectStatus.NOT_FOUND]
                assert "is not a client the scheduler serves" in refused.reason
        finally:
            worker.close()
    worker = RawPeer(storage_address, m.PeerRole.WORKER, cluster.security("worker"), new_worker_id())
    try:  # the client left: the scheduler cleared it, and a late result for it is refused

        def late_result_refused() -> bool:
            late = worker.request(m.ObjectRequest(3, m.ObjectRequestKind.PUT, served, [ids.next_id()]), (b"late",))
            return late.statuses == [m.ObjectStatus.NOT_FOUND]

        wait_until(late_result_refused, 30, "the storage server to forget the client that left")
    finally:
        worker.close()
