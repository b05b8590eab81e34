"""A client's objects are its own, also through tasks; IDs cannot be guessed or squatted (issue 25, item 3).

Real processes (the scheduler, the storage server it starts, two workers), with keys and without. The attacks
are raw pyzmq peers (`keyed_clusters.RawPeer`: the codec and a DEALER, no `Client`): a client that names
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
from typing import Any, Iterator, List, Sequence

import cloudpickle
import pytest
from cluster_processes import Processes, free_address, wait_until
from keyed_clusters import Cluster, RawPeer, another_client_key, start_cluster

from scaler import Client
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.errors import ObjectNotFoundError
from scaler.protocol.ids import IDGenerator, new_client_id, new_worker_id
from scaler.protocol.security import NO_SECURITY, SecurityConfig

SECRET = "the victim's secret"
DATA = b"the victim's data " * 5000  # 90 KB: it travels through storage, there and back
NOWHERE = [m.Capability("nowhere", -1)]  # no worker offers it: such a task stays queued (capability policy)

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


class Attacker:
    """A client made by hand: a DEALER at the scheduler and one at the storage server, under one identity."""

    def __init__(self, cluster: Cluster, security: SecurityConfig) -> None:
        self.identity = new_client_id()
        self.scheduler = RawPeer(cluster.address, m.PeerRole.CLIENT, security, self.identity)
        assert type(self.scheduler.answer) is m.HelloAck, self.scheduler.answer
        address = self.scheduler.answer.object_storage_address
        self.storage = RawPeer(address, m.PeerRole.CLIENT, security, self.identity)
        self.echo_id = self.put([cloudpickle.dumps(echo)])[0]

    def put(self, payloads: List[bytes], object_ids: Sequence[bytes] = ()) -> List[bytes]:
        """Put objects of the attacker's own, under fresh IDs or ``object_ids``; their IDs."""
        object_ids = list(object_ids) or [ids.next_id() for _ in payloads]
        answer = self.storage.request(m.ObjectRequest(1, m.ObjectRequestKind.PUT, self.identity, object_ids), payloads)
        assert answer.statuses == [m.ObjectStatus.OK] * len(object_ids), answer
        return object_ids

    def task(self, function_id: bytes = b"", arguments: Sequence[m.Argument] = (), task_id: bytes = b"") -> m.Task:
        """A task of the attacker's (its echo function by default), under a fresh ID or ``task_id``."""
        return m.Task(task_id or ids.next_id(), self.identity, function_id or self.echo_id, list(arguments))

    def run(self, task: m.Task) -> m.TaskResult:
        """Submit ``task``; its result (fails the test if none comes within the peer's bound)."""
        self.scheduler.send(m.TaskBatch([task]))
        while True:
            message = self.scheduler.receive()
            if type(message) is m.TaskResultBatch:
                (result,) = message.results
                assert result.task_id == task.task_id
                return result

    def close(self) -> None:
        self.storage.close()
        self.scheduler.close()


def attacker_security(cluster: Cluster, tmp_path) -> SecurityConfig:
    """Another user's client key (with keys), or none."""
    return NO_SECURITY if cluster.keys is None else another_client_key(cluster, tmp_path, "mallory")


def failure(result: m.TaskResult) -> BaseException:
    assert result.status == m.TaskStatus.FAILED, result
    error, _ = cloudpickle.loads(result.payload)
    return error


# --- another client's object or function, named in a task -----------------------------------------------------


def test_a_task_naming_another_clients_object_or_function_fails_and_never_reveals_it(cluster, tmp_path):
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as victim:
        secret_function = functools.partial(reveal, SECRET)
        assert victim.map(secret_function, [()] * 20) == [SECRET] * 20  # the workers' processors now hold it
        function_id = victim._builder.function_id(secret_function)  # as seen in a log: IDs are no secret
        reference = victim.send_object(DATA)
        attacker = Attacker(cluster, attacker_security(cluster, tmp_path))
        try:
            by_argument = attacker.task(arguments=[m.Argument("", m.ArgumentKind.OBJECT, reference.object_id)])
            for task in (by_argument, attacker.task(function_id)):
                result = attacker.run(task)
                error = failure(result)
                assert isinstance(error, ObjectNotFoundError)
                assert f"not one the tasks of client {attacker.identity.decode()} may read" in str(error)
                assert SECRET.encode() not in result.payload and DATA[:32] not in result.payload
        finally:
            attacker.close()
        assert victim.submit(len, reference).result(timeout=60) == len(DATA)  # its owner's tasks read it


# --- guessed and seen IDs --------------------------------------------------------------------------------------


def following(seen: bytes, count: int) -> List[bytes]:
    """The IDs a generator of 8 random bytes and a counter (as before) would make after ``seen``."""
    counter = int.from_bytes(seen[8:], "big")
    return [seen[:8] + (counter + step).to_bytes(8, "big") for step in range(1, count + 1)]


def test_a_squatter_of_guessed_or_live_ids_is_refused_and_never_costs_their_owner(cluster, tmp_path):
    with Client(cluster.address, security=cluster.security("client"), timeout_seconds=60) as victim:
        assert victim.submit(echo, 1).result(timeout=60) == 1
        seen_object = victim.send_object(b"seen")
        attacker = Attacker(cluster, attacker_security(cluster, tmp_path))
        try:
            # the squatter takes the IDs it guesses the owner makes next (after the last it saw, the object's):
            # tasks that stay queued, and objects
            guesses = following(seen_object.object_id, 40)
            attacker.scheduler.send(m.TaskBatch([m.Task(guess, attacker.identity, attacker.echo_id,
                                                        capabilities=NOWHERE) for guess in guesses]))  # fmt: skip
            attacker.put([b"squatted"] * len(guesses), guesses)
            assert victim.submit(echo, 2).result(timeout=60) == 2  # its next task and put are its own
            assert victim.submit(len, victim.send_object(b"mine" * 10)).result(timeout=60) == 40

            # the squatter sends a task under the ID of one of the owner's tasks, running: refused to the squatter
            started, release = tmp_path / "started", tmp_path / "release"
            running = victim.submit(released, str(started), str(release))
            wait_until(started.exists, 60, "the owner's task to start")
            refused = attacker.run(attacker.task(arguments=[m.Argument("", m.ArgumentKind.INLINE, b"")],
                                                 task_id=running.task_id))  # fmt: skip
            assert refused.status == m.TaskStatus.REJECTED and "is taken by another task" in refused.error_text
            release.touch()
            assert running.result(timeout=60) == "released"  # the first holder's task runs on, to its result
            taken = attacker.storage.request(
                m.ObjectRequest(2, m.ObjectRequestKind.PUT, attacker.identity, [seen_object.object_id]), (b"evil",)
            )
            assert type(taken) is m.Refusal and "not this peer's to replace" in taken.reason
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
