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
    assert "7.0" in body["reason"] and "1.3" in body["reason"]


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
