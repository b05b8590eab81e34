"""A shared cluster with hostile neighbours: a legitimate client's stage (`prepare`), and every attack of
`hostile_attacks.py` at once, each in a process of its own (`AttackProcesses`: a process, so that no attacker
takes the client's interpreter), once or round after round until stopped. `test_hostile_neighbours.py` asserts
on it; `benchmarks/hostile_neighbours.py` measures the client in it.

Each attack holds a key of the role it attacks with on a cluster with keys (another user's client key, a worker
key, a monitor key it revokes itself), or none; the unauthenticated ones none at all."""

from __future__ import annotations

import functools
import multiprocessing
import os
import queue
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import cloudpickle
import zmq
from hostile_attacks import (
    ANSWER_SECONDS,
    NOWHERE,
    PORT_OFFSETS,
    STREAMED_MIB,
    Attacker,
    announce_huge_frame,
    answered,
    chain_graph,
    forge_output,
    greeted,
    hello_then_close,
    huge_message_sent,
    over_the_limit,
    read_through_tasks,
    revoked_subscription_ends,
    squat_guessed_ids,
    squat_live_object_id,
    squat_live_task_id,
    still_open,
    stream,
)
from keyed_clusters import Cluster, RawPeer, another_client_key, another_key
from raw_peers import RawClient

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.ids import new_worker_id
from scaler.protocol.message_limits import HANDSHAKE_SECONDS
from scaler.protocol.process_control import die_with_parent
from scaler.protocol.security import NO_SECURITY, SecurityConfig

SECRET = b"the neighbour's secret"
DATA = SECRET * 4096  # 88 KiB: an object that goes through storage
CHURN = 2_000  # connections that say Hello and close, a round
CHURN_WAVE = 1_000  # of them open at once
HUGE = 100_000  # nodes of the one huge graph message (23 MB)
SCHEDULER_OPTIONS = ("--allocate-policy", "capability")  # what never runs (`hostile_attacks.NOWHERE`) waits
STOP_SECONDS = 60.0  # for the attackers to end their round once told to stop

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module: its tasks go whole


# --- the legitimate client's stage ----------------------------------------------------------------------------


def reveal(secret: bytes) -> bytes:
    return secret


@dataclass(frozen=True)
class Scene:
    """What the attackers know: the cluster, and the legitimate client's IDs (no secret: they are printed in output
    prefixes, `repr`s, errors and logs)."""

    cluster: Cluster
    directory: str  # the attackers' key pairs
    client_id: bytes
    waiting_task_id: bytes  # a task of the client's that waits in the scheduler's queue (for `NOWHERE`)
    object_id: bytes  # an object of the client's holding `DATA`
    function_id: bytes  # a function of the client's that returns `SECRET`, held by the workers' processors

    @property
    def secure(self) -> bool:
        return self.cluster.keys is not None

    @property
    def mechanism(self) -> bytes:
        """What a ZMTP greeting to the daemons says."""
        return b"CURVE" if self.secure else b"NULL"

    def port(self, target: str) -> int:
        return int(self.cluster.address.rpartition(":")[2]) + PORT_OFFSETS[target]

    def attacker_key(self, name: str) -> SecurityConfig:
        """Another user's client key ``name`` (with keys: made at its first use in this process), or none."""
        if not self.secure:
            return NO_SECURITY
        if name not in _client_keys:
            _client_keys[name] = another_client_key(self.cluster, self.directory, name)
        return _client_keys[name]


_client_keys: Dict[str, SecurityConfig] = {}  # an attacker's process keeps its keys from round to round


def prepare(client: Client, cluster: Cluster, directory: str) -> Tuple[Scene, Any, Any]:
    """The client's secret function run on the workers, its object sent, its task that waits for a capability no
    worker has (the client cancels it when the scene is over: the cancel is confirmed only if the scheduler still
    holds it as the client's): the scene, the waiting task's future, the object's reference."""
    os.makedirs(directory, exist_ok=True)
    secret_function = functools.partial(reveal, SECRET)
    assert client.map(secret_function, [()] * 4) == [SECRET] * 4
    reference = client.send_object(DATA)
    (nowhere,) = NOWHERE
    waiting = client.submit_verbose(secret_function, capabilities={nowhere.name: nowhere.value})
    function_id = client._builder.function_id(secret_function)  # as seen in a log
    scene = Scene(cluster, directory, client.client_id, waiting.task_id, reference.object_id, function_id)
    return scene, waiting, reference


# --- the attacks: each round of each is a function of the scene and the round's number ----------------------------


def connection_churn(scene: Scene, round_: int) -> None:
    security = scene.attacker_key("churner")
    hello_then_close(scene.cluster.address, security, CHURN, CHURN_WAVE, tag=f"churn{round_}")


def frames_over_the_limit(scene: Scene, round_: int) -> None:
    """A 2 GiB frame announced on every port before authentication (or without it); a client's frame over the
    limit it was told."""
    for target in PORT_OFFSETS:
        connection = greeted(scene.port(target), scene.mechanism)
        try:
            announce_huge_frame(connection)
            assert stream(connection, STREAMED_MIB) < STREAMED_MIB, f"the {target} took a frame announced as 2 GiB"
        finally:
            connection.close()
    over_the_limit(scene.cluster.address, scene.attacker_key("oversized"))


def stalled_handshakes(scene: Scene, round_: int) -> None:
    connections = [greeted(scene.port(target), scene.mechanism) for target in PORT_OFFSETS]
    try:
        assert not still_open(connections, HANDSHAKE_SECONDS + 10), "a stalled handshake was kept"
    finally:
        for connection in connections:
            connection.close()


def another_clients_objects(scene: Scene, round_: int) -> None:
    attacker = Attacker(scene.cluster.address, scene.attacker_key("reader"))
    try:
        read_through_tasks(attacker, scene.object_id, scene.function_id, (SECRET,))
    finally:
        attacker.close()


def squatted_ids(scene: Scene, round_: int) -> None:
    attacker = Attacker(scene.cluster.address, scene.attacker_key("squatter"))
    try:
        squat_guessed_ids(attacker, scene.object_id)
        squat_live_task_id(attacker, scene.waiting_task_id)
        squat_live_object_id(attacker, scene.object_id)
    finally:
        attacker.close()


def forged_output(scene: Scene, round_: int) -> None:
    forger = RawPeer(scene.cluster.address, m.PeerRole.WORKER, scene.cluster.security("worker"), new_worker_id())
    try:
        assert type(forger.answer) is m.HelloAck, forger.answer
        forge_output(forger, scene.client_id, scene.waiting_task_id)
    finally:
        forger.close()


def one_huge_message(scene: Scene, round_: int) -> None:
    """A graph of `HUGE` nodes in one message; done once the scheduler took it whole (it answered the heartbeat
    sent after it)."""
    context = zmq.Context()
    address = scene.cluster.address
    hostile = RawClient(context, address, default_storage_address(address), scene.attacker_key("huge"))
    try:
        assert type(hostile.storage.hello(m.PeerRole.CLIENT)) is m.HelloAck
        frames = codec.encode(chain_graph(hostile.peer_id, hostile.task(len, ()).function_id, HUGE))
        huge_message_sent(hostile, frames)
        deadline = time.monotonic() + 4 * ANSWER_SECONDS
        while not answered(hostile, timeout=0.5):
            assert time.monotonic() < deadline, "the scheduler never took the whole graph"
            hostile.scheduler.send(m.ClientHeartbeat())  # the raw peer is alive too (its echoes come after)
    finally:
        hostile.close()
        context.term()


def revoked_monitor_key(scene: Scene, round_: int) -> None:
    security, key_file = another_key(scene.cluster, scene.directory, "monitors", f"ops{round_}", "monitor")
    revoked_subscription_ends(scene.cluster.monitor_address, security, key_file, ANSWER_SECONDS)


ATTACKS: Dict[str, Callable[[Scene, int], None]] = {
    "connection churn": connection_churn,
    "frames over the limit": frames_over_the_limit,
    "stalled handshakes": stalled_handshakes,
    "another client's objects through tasks": another_clients_objects,
    "squatted IDs": squatted_ids,
    "forged task output": forged_output,
    "one huge graph message": one_huge_message,
    "a revoked monitor key": revoked_monitor_key,
}
WITH_KEYS_ONLY = {"a revoked monitor key"}


def attacks(secure: bool) -> List[str]:
    """The attacks there are against a cluster with keys, or without."""
    return [name for name in ATTACKS if secure or name not in WITH_KEYS_ONLY]


# --- the attackers' processes ----------------------------------------------------------------------------------


def _attacker(name: str, scene: Scene, until_stopped: bool, stop: Any, outcomes: Any, parent: int) -> None:
    """One attacker's process: its rounds, then what came of them, on ``outcomes``."""
    die_with_parent(signal.SIGKILL, parent)
    rounds = 0
    try:
        while rounds == 0 or (until_stopped and not stop.is_set()):
            ATTACKS[name](scene, rounds)
            rounds += 1
        outcomes.put((name, rounds, ""))
    except BaseException:  # pytest's failures are BaseExceptions too
        outcomes.put((name, rounds, traceback.format_exc()))


class AttackProcesses:
    """The attacks ``names``, each in a process of its own, all started on entry: one round each, or round after
    round until `outcomes` (``until_stopped``). Leaving stops them: those that do not end within `STOP_SECONDS`
    are killed."""

    def __init__(self, scene: Scene, names: Sequence[str], until_stopped: bool = False) -> None:
        context = multiprocessing.get_context("spawn")  # not a fork of a process with ZeroMQ's threads
        self._stop = context.Event()
        self._outcomes = context.Queue()
        self._processes = [
            context.Process(target=_attacker, args=(name, scene, until_stopped, self._stop, self._outcomes,
                                                    os.getpid()), name=name, daemon=True)
            for name in names
        ]  # fmt: skip

    def __enter__(self) -> AttackProcesses:
        for process in self._processes:
            process.start()
        return self

    def running(self) -> bool:
        return any(process.is_alive() for process in self._processes)

    def outcomes(self, timeout: float = STOP_SECONDS) -> Dict[str, Tuple[int, str]]:
        """Stop them after their round; for each attack, its rounds and what failed ("" if nothing did)."""
        self._stop.set()
        found: Dict[str, Tuple[int, str]] = {}
        deadline = time.monotonic() + timeout
        while len(found) < len(self._processes):
            try:
                name, rounds, error = self._outcomes.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            found[name] = (rounds, error)
        for process in self._processes:
            found.setdefault(process.name, (0, f"did not end within {timeout:g} s of being told to stop"))
        return found

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        deadline = time.monotonic() + STOP_SECONDS
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
