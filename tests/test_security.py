"""Security with real processes (issue 14): the three attacks fail, refusals are clear on both sides, a whole
workload runs with keys, and a daemon will not listen on the network without them.

The attacks are raw pyzmq peers (no `Client`), as the issue reports them; each is also run against a cluster
without keys where it succeeds there (the control: the attack is real), or where ownership applies, fails
there too.
"""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
from dataclasses import replace

import cloudpickle
import pytest
from cluster_processes import BIN, free_address, hello_answered, next_snapshot, wait_until
from keyed_clusters import RawPeer, another_client_key, start_cluster

from scaler import Client, SchedulerClusterCombo
from scaler.monitor.subscription import SnapshotSubscription
from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError, ProtocolError
from scaler.protocol.ids import IDGenerator, new_client_id, new_worker_id
from scaler.protocol.keygen import write_key_pair
from scaler.protocol.security import NO_SECURITY, fingerprint, load_key_pair

ids = IDGenerator()


def touch(path: str) -> int:
    return os.system(f"touch {path}")


# --- (a) code execution by a process with no Client -----------------------------------------------------------


def test_a_process_without_a_client_submits_code_only_to_a_cluster_without_keys(any_cluster, tmp_path):
    marker = tmp_path / "owned"
    attacker = RawPeer(any_cluster.address, m.PeerRole.CLIENT, NO_SECURITY, new_client_id())
    try:
        if any_cluster.keys is not None:
            assert isinstance(attacker.answer, str) and "requires CurveZMQ keys" in attacker.answer
        else:  # the control: without keys the attack of the issue works
            assert type(attacker.answer) is m.HelloAck
            storage = RawPeer(attacker.answer.object_storage_address, m.PeerRole.CLIENT, NO_SECURITY, attacker.identity)
            function_id = ids.next_id()
            function = cloudpickle.dumps(functools.partial(touch, str(marker)))
            put = m.ObjectRequest(1, m.ObjectRequestKind.PUT, attacker.identity, [function_id])
            assert storage.request(put, (function,)).statuses == [m.ObjectStatus.OK]
            storage.close()
            task = m.Task(task_id=ids.next_id(), client_id=attacker.identity, function_id=function_id)
            attacker.send(m.TaskBatch([task]))
            (result,) = attacker.receive_a(m.TaskResultBatch).results
            assert result.status == m.TaskStatus.SUCCESS and marker.exists()
            return
    finally:
        attacker.close()
    with Client(any_cluster.address, security=any_cluster.security("client")) as client:
        assert client.submit(len, "ok").result(timeout=60) == 2  # the workers were free: nothing else ran
    snapshot = next_snapshot(any_cluster.monitor_address, 10, any_cluster.security("monitor"))
    assert snapshot is not None
    assert sum(counter.value for counter in snapshot.task_states) == 1 and not marker.exists()


# --- (b) a fake worker that receives another client's task and forges its result --------------------------------


def secret_value(seed: int) -> str:
    return f"secret {seed}"


def test_a_process_registers_as_a_worker_only_without_keys(processes, address, tmp_path):
    insecure = start_cluster(processes, address, tmp_path / "insecure", secure=False, n_workers=0)
    fake = RawPeer(insecure.address, m.PeerRole.WORKER, NO_SECURITY, new_worker_id())
    try:  # the control: without keys the fake worker gets the client's task and the client takes its forgery
        assert type(fake.answer) is m.HelloAck
        with Client(insecure.address) as victim:
            future = victim.submit(secret_value, 42)
            batch = fake.receive()
            while type(batch) is not m.TaskBatch:
                batch = fake.receive()
            (task,) = batch.tasks
            assert task.client_id == victim.client_id and task.arguments
            forged = m.TaskResult(task.task_id, task.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE,
                                  pickle.dumps("forged"), "")  # fmt: skip
            fake.send(m.TaskResultBatch([forged]))
            assert future.result(timeout=60) == "forged"
    finally:
        fake.close()

    secure = start_cluster(processes, free_address(), tmp_path / "secure", secure=True)
    assert secure.keys is not None
    for security, refusal in ((NO_SECURITY, "requires CurveZMQ keys"),
                              (secure.keys.client, "is authorized as client, not as a worker"),
                              (secure.keys.monitor, "is authorized as monitor, not as a worker")):  # fmt: skip
        fake = RawPeer(secure.address, m.PeerRole.WORKER, security, new_worker_id())
        try:
            answer = fake.answer
            assert refusal in (answer if isinstance(answer, str) else answer.reason)
        finally:
            fake.close()
    with Client(secure.address, security=secure.keys.client) as victim:
        assert victim.submit(secret_value, 42).result(timeout=60) == "secret 42"
    snapshot = next_snapshot(secure.monitor_address, 10, secure.keys.monitor)
    assert snapshot is not None and len(snapshot.workers) == 2  # the real ones only


# --- (c) deleting (or reading, or replacing) another client's objects ------------------------------------------


def test_a_client_touches_no_other_clients_objects_with_or_without_keys(any_cluster, tmp_path):
    attacker_security = NO_SECURITY if any_cluster.keys is None else another_client_key(any_cluster, tmp_path)
    with Client(any_cluster.address, security=any_cluster.security("client")) as victim:
        reference = victim.send_object(b"the victim's data" * 1000)
        stolen = reference.object_id
        scheduler = RawPeer(any_cluster.address, m.PeerRole.CLIENT, attacker_security, new_client_id())
        storage_address = scheduler.answer.object_storage_address
        storage = RawPeer(storage_address, m.PeerRole.CLIENT, attacker_security, scheduler.identity)
        try:
            assert type(storage.answer) is m.HelloAck
            kinds = m.ObjectRequestKind
            read = storage.request(m.ObjectRequest(1, kinds.GET, b"", [stolen]))
            assert read.statuses == [m.ObjectStatus.NOT_FOUND]
            deleted = storage.request(m.ObjectRequest(2, kinds.DELETE, victim.client_id, [stolen]))
            assert deleted.statuses == [m.ObjectStatus.NOT_FOUND]
            cleared = storage.request(m.ObjectRequest(3, kinds.CLEAR_OWNER, victim.client_id, []))
            assert type(cleared) is m.Refusal and "only its own objects" in cleared.reason
            replaced = storage.request(m.ObjectRequest(4, kinds.PUT, scheduler.identity, [stolen]), (b"evil",))
            assert type(replaced) is m.Refusal and "not this peer's to replace" in replaced.reason
            instructions = m.ObjectInstructionKind
            scheduler.send(m.ObjectInstruction(instructions.DELETE, victim.client_id, [stolen]))
            scheduler.send(m.ObjectInstruction(instructions.CLEAR, victim.client_id, []))
            assert type(scheduler.request(m.ClientHeartbeat())) is m.ClientHeartbeatEcho  # both were handled
        finally:
            storage.close()
            scheduler.close()
        assert victim.submit(len, reference).result(timeout=60) == len(b"the victim's data" * 1000)


# --- refusals are clear on both sides -----------------------------------------------------------------------------


def test_an_unknown_key_is_refused_clearly_and_logged_once_and_the_scheduler_serves_on(secure_cluster, tmp_path):
    _, secret = write_key_pair(str(tmp_path), "stranger")
    stranger = replace(secure_cluster.security("client"), key_file=secret)
    shown = fingerprint(load_key_pair(secret).public)
    for _ in range(3):
        with pytest.raises(ProtocolError, match="does not accept this key") as refused:
            Client(secure_cluster.address, security=stranger, timeout_seconds=30)
        assert shown in str(refused.value)
    with Client(secure_cluster.address, security=secure_cluster.security("client")) as client:
        assert client.submit(len, "abc").result(timeout=60) == 3
    refusals = [line for line in secure_cluster.log().splitlines() if f"refused key {shown}" in line]
    assert len(refusals) == 1 and "unknown key" in refusals[0]  # rate-limited: once per key and minute


@pytest.mark.parametrize("role", ["worker", "monitor"])
def test_a_worker_key_or_a_monitor_key_cannot_submit(secure_cluster, role):
    with pytest.raises(ProtocolError, match=f"authorized as {role}, not as a client"):
        Client(secure_cluster.address, security=secure_cluster.security(role), timeout_seconds=30)


def test_a_client_or_a_worker_without_keys_is_told_keys_are_required(secure_cluster, processes, tmp_path):
    with pytest.raises((ProtocolError, DisconnectedError), match="requires CurveZMQ keys"):
        Client(secure_cluster.address, timeout_seconds=30)
    log = tmp_path / "worker.log"
    worker = processes.start("scaler_worker", secure_cluster.address, log_path=str(log))
    assert worker.wait(60) == 78  # refused: scaler_cluster would not replace it
    assert "requires CurveZMQ keys" in log.read_text()


def test_the_monitor_feed_takes_monitor_keys_only(secure_cluster):
    with SnapshotSubscription(secure_cluster.monitor_address, secure_cluster.security("monitor")) as monitor:
        snapshot = monitor.receive(30)
        assert snapshot is not None and len(snapshot.workers) == 2
    for role in ("client", "worker"):
        with SnapshotSubscription(secure_cluster.monitor_address, secure_cluster.security(role)) as refused:
            with pytest.raises(ProtocolError, match="refused key"):
                refused.receive(30)
    result = subprocess.run(
        [os.path.join(BIN, "scaler_top"), secure_cluster.monitor_address, "--timeout", "30",
         *secure_cluster.security("client").to_arguments()],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "scaler_top: error:" in result.stderr and "refused key" in result.stderr


def test_a_key_removed_from_the_authorized_keys_is_refused_without_a_restart(secure_cluster, tmp_path):
    alice = another_client_key(secure_cluster, tmp_path, "alice")
    client = Client(secure_cluster.address, security=alice, heartbeat_interval_seconds=0.5)
    try:
        assert client.submit(len, "ab").result(timeout=60) == 2
        os.remove(os.path.join(secure_cluster.keys.server.authorized_keys, "clients", "alice.key"))
        with pytest.raises(ProtocolError, match="does not accept this key"):
            Client(secure_cluster.address, security=alice, timeout_seconds=30)
        # the keys were read again at that handshake: the connection already made is refused at its next message
        wait_until(lambda: not client.connected, 30, "the revoked client to be refused")
        with pytest.raises(DisconnectedError, match="no longer authorized"):
            client.submit(len, "ab").result(timeout=60)
    finally:
        client.disconnect()


# --- a whole workload with keys -------------------------------------------------------------------------------------


def fibonacci(client: Client, n: int) -> int:
    if n < 2:
        return n
    a, b = client.submit(fibonacci, client, n - 1), client.submit(fibonacci, client, n - 2)
    return a.result() + b.result()


def inc(value: int) -> int:
    return value + 1


def total(*values: int) -> int:
    return sum(values)


def test_a_whole_workload_runs_with_keys(secure_cluster):
    with Client(secure_cluster.address, security=secure_cluster.security("client")) as client:
        assert client.map(inc, [(i,) for i in range(2000)]) == list(range(1, 2001))
        graph = {"a": 1, "b": (inc, "a"), "c": (inc, "b"), "d": (total, "a", "b", "c")}
        assert client.get(graph, keys=["d"]) == {"d": 6}
        assert client.submit(fibonacci, client, 8).result(timeout=120) == 21  # nested, with the task key
        large = os.urandom(5 * 1024 * 1024)  # through storage, there and back
        assert client.submit(bytes.upper, large).result(timeout=60) == large.upper()
        shared = client.send_object(large)
        assert client.map(len, [(shared,)] * 4) == [len(large)] * 4


def test_a_secure_local_cluster_is_one_flag():
    with SchedulerClusterCombo(n_workers=1, security=True, logging_level="WARNING") as combo:
        with Client(combo.get_address(), security=combo.security) as client:
            assert client.submit(fibonacci, client, 5).result(timeout=120) == 5
        with pytest.raises((ProtocolError, DisconnectedError), match="requires CurveZMQ keys"):
            Client(combo.get_address(), timeout_seconds=30)
        keys = combo.security.key_file
        assert keys is not None and os.stat(os.path.dirname(keys)).st_mode & 0o077 == 0
    assert not os.path.exists(keys)  # the ephemeral keys went with the cluster


# --- safe by default ---------------------------------------------------------------------------------------------


def _program_output(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, command[0]), *command[1:]], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("program", ["scaler_scheduler", "scaler_object_storage_server"])
@pytest.mark.parametrize("host", ["0.0.0.0", "*"])
def test_a_daemon_on_a_reachable_address_without_keys_refuses_to_start(program, host):
    port = free_address().rsplit(":", 1)[1]
    result = _program_output(program, f"tcp://{host}:{port}")
    assert result.returncode != 0
    assert "other hosts can reach" in result.stderr and "scaler_keygen" in result.stderr
    assert "--insecure" in result.stderr


def test_insecure_is_a_deliberate_choice(processes):
    port = free_address().rsplit(":", 1)[1]
    processes.start("scaler_scheduler", f"tcp://0.0.0.0:{port}", "--insecure")
    wait_until(lambda: hello_answered(f"tcp://127.0.0.1:{port}"), 30, "the scheduler started with --insecure")


def test_loopback_and_ipc_need_no_keys(processes, tmp_path):
    address = f"ipc://{tmp_path}/scheduler"
    processes.scheduler(address)
    processes.cluster(address, 1)
    with Client(address) as client:
        assert client.submit(inc, 1).result(timeout=60) == 2
