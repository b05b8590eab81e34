"""Drive a real scheduler with raw pyzmq and the Cap'n Proto schema only (no Scaler codec or client).

This is what an implementer in another language does: load the schema, build
messages, frame them as docs/protocol.md says.
"""

from __future__ import annotations

import importlib.resources
import os

import capnp
import pytest
import zmq

capnp.remove_import_hook()
with importlib.resources.as_file(importlib.resources.files("scaler.protocol") / "schema" / "scaler.capnp") as path:
    schema = capnp.load(str(path))

TIMEOUT_MS = 10_000


def encode(**union) -> bytes:
    return schema.Message.new_message(**union).to_bytes()


def receive(socket) -> tuple:
    assert socket.poll(TIMEOUT_MS), "no answer from the scheduler"
    frames = socket.recv_multipart()
    with schema.Message.from_bytes(frames[0]) as message:
        which = str(message.which())
        return which, getattr(message, which).to_dict()


def peer(context, address: str, identity: bytes):
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IDENTITY, identity)
    socket.connect(address)
    return socket


def hello(role: str, major: int = 1) -> bytes:
    info = {"slots": 1, "queueCapacity": 10, "capabilities": []}
    return encode(hello={"version": {"major": major, "minor": 0}, "role": role, "pid": os.getpid(),
                         "hostname": "conformance", "workerInfo": info})  # fmt: skip


@pytest.fixture
def scheduler(processes, address):
    processes.scheduler(address)
    context = zmq.Context()
    yield context, address
    context.destroy(linger=0)


def test_hello_is_acknowledged_with_the_storage_address(scheduler):
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|a")
    client.send(hello("client"))
    which, body = receive(client)
    assert which == "helloAck"
    assert body["version"]["major"] == 1
    port = int(address.rsplit(":", 1)[1])
    assert body["objectStorageAddress"] == f"tcp://127.0.0.1:{port + 1}"
    assert body["role"] == "scheduler"  # protocol 1.3: who answered


def test_other_major_version_is_refused_naming_both_versions(scheduler):
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|b")
    client.send(hello("client", major=7))
    which, body = receive(client)
    assert which == "refusal"
    theirs = body["version"]  # the scheduler's own version, which the reason names too
    assert (
        theirs["major"] == 1
        and "7.0" in body["reason"]
        and f"{theirs['major']}.{theirs.get('minor', 0)}" in body["reason"]
    )


def test_garbage_is_dropped_and_the_scheduler_keeps_serving(scheduler):
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|c")
    for payload in (os.urandom(13), os.urandom(64), hello("client")[:-8], b"", os.urandom(4096)):
        client.send(payload)
    client.send(hello("client"))
    which, _ = receive(client)
    assert which == "helloAck"


def test_a_task_travels_from_client_to_worker_and_its_result_back(scheduler):
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|d")
    worker = peer(context, address, b"W|conformance|1|d")
    client.send(hello("client"))
    assert receive(client)[0] == "helloAck"
    worker.send(hello("worker"))
    assert receive(worker)[0] == "helloAck"

    task_id = os.urandom(16)
    task = {"taskId": task_id, "functionId": b"f" * 16, "arguments": [{"kind": "inline", "data": b"arg"}]}
    client.send(encode(taskBatch={"tasks": [task]}))
    which, body = receive(worker)
    assert which == "taskBatch"
    (assigned,) = body["tasks"]
    assert assigned["taskId"] == task_id and assigned["attempt"] == 1
    assert assigned["clientId"] == b"C|conformance|1|d"
    (argument,) = assigned["arguments"]
    assert (argument.get("name", ""), argument["kind"], argument["data"]) == ("", "inline", b"arg")

    result = {"taskId": task_id, "attempt": 1, "status": "success", "payloadKind": "inline", "payload": b"42"}
    worker.send(encode(taskResultBatch={"results": [result]}))
    which, body = receive(client)
    assert which == "taskResultBatch"
    assert body["results"][0]["taskId"] == task_id and body["results"][0]["payload"] == b"42"

    # a cancel of a finished task is still acknowledged
    client.send(encode(taskCancel={"taskIds": [task_id]}))
    which, body = receive(client)
    assert which == "taskCancelConfirm" and body["cancelled"] == [False]


# --- CurveZMQ (docs/protocol.md, section 1 "Security"): keys are ZeroMQ certificates, written here by hand --------


def write_certificate(path, public: bytes, secret: bytes = b"") -> None:
    lines = ["curve", f'    public-key = "{public.decode()}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600 if secret else 0o644)


@pytest.fixture
def secure_scheduler(processes, address, tmp_path):
    """A scheduler with a server key pair that authorizes one client key and one worker key."""
    from scaler.protocol.security import SecurityConfig  # the probe that waits for the scheduler only

    keys = {name: zmq.curve_keypair() for name in ("server", "client", "worker", "stranger")}
    write_certificate(tmp_path / "server.key_secret", *keys["server"])
    write_certificate(tmp_path / "server.key", keys["server"][0])
    write_certificate(tmp_path / "client.key_secret", *keys["client"])
    for role, name in (("clients", "client"), ("workers", "worker")):
        (tmp_path / "authorized" / role).mkdir(parents=True)
        write_certificate(tmp_path / "authorized" / role / f"{name}.key", keys[name][0])
    probe = SecurityConfig(key_file=str(tmp_path / "client.key_secret"), server_key_file=str(tmp_path / "server.key"))
    processes.scheduler(address, "--key-file", str(tmp_path / "server.key_secret"), "--authorized-keys",
                        str(tmp_path / "authorized"), probe=probe)  # fmt: skip
    context = zmq.Context()
    yield context, address, keys
    context.destroy(linger=0)


def curve_peer(context, address: str, identity: bytes, pair, server_public: bytes):
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.IDENTITY, identity)
    socket.curve_publickey, socket.curve_secretkey = pair
    socket.curve_serverkey = server_public
    return socket


def test_curve_peers_are_served_as_the_roles_of_their_keys(secure_scheduler):
    context, address, keys = secure_scheduler
    server = keys["server"][0]
    client = curve_peer(context, address, b"C|conformance|1|e", keys["client"], server)
    worker = curve_peer(context, address, b"W|conformance|1|e", keys["worker"], server)
    for socket in (client, worker):
        socket.connect(address)
    client.send(hello("client"))
    assert receive(client)[0] == "helloAck"
    worker.send(hello("worker"))
    assert receive(worker)[0] == "helloAck"
    task_id = os.urandom(16)
    client.send(encode(taskBatch={"tasks": [{"taskId": task_id, "functionId": b"f" * 16}]}))
    which, body = receive(worker)
    assert which == "taskBatch" and body["tasks"][0]["clientId"] == b"C|conformance|1|e"


def test_a_client_key_saying_hello_as_a_worker_is_refused(secure_scheduler):
    context, address, keys = secure_scheduler
    impostor = curve_peer(context, address, b"W|conformance|1|f", keys["client"], keys["server"][0])
    impostor.connect(address)
    impostor.send(hello("worker"))
    which, body = receive(impostor)
    assert which == "refusal" and "not as a worker" in body["reason"]


def test_an_unknown_key_fails_the_handshake_with_zap_status_400(secure_scheduler):
    from zmq.utils.monitor import recv_monitor_message

    context, address, keys = secure_scheduler
    stranger = curve_peer(context, address, b"C|conformance|1|g", keys["stranger"], keys["server"][0])
    monitor = stranger.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    stranger.connect(address)
    stranger.send(hello("client"))
    assert monitor.poll(TIMEOUT_MS), "no handshake failure reported"
    event = recv_monitor_message(monitor)
    assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH and event["value"] == 400
    stranger.disable_monitor()
    monitor.close(linger=0)
