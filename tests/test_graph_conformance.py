"""A GraphTask conversation (docs/protocol.md section 5.5) with raw pyzmq and the schema only."""

from __future__ import annotations

import os

from test_protocol_conformance import encode, hello, peer, receive, scheduler  # noqa: F401  (scheduler: fixture)


def test_a_graph_runs_node_by_node_and_only_its_target_comes_back(scheduler):  # noqa: F811
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|g")
    worker = peer(context, address, b"W|conformance|1|g")
    client.send(hello("client"))
    assert receive(client)[0] == "helloAck"
    worker.send(hello("worker"))
    assert receive(worker)[0] == "helloAck"

    first, second, graph_id = os.urandom(16), os.urandom(16), os.urandom(16)
    tasks = [
        {"taskId": first, "functionId": b"f" * 16, "arguments": [{"kind": "inline", "data": b"x"}]},
        {"taskId": second, "functionId": b"f" * 16, "arguments": [{"kind": "task", "data": first}]},
    ]
    client.send(encode(graphTask={"graphId": graph_id, "tasks": tasks, "targets": [second]}))
    which, body = receive(worker)
    assert which == "taskBatch" and [t["taskId"] for t in body["tasks"]] == [first]

    worker.send(encode(taskResultBatch={"results": [
        {"taskId": first, "attempt": 1, "status": "success", "payloadKind": "inline", "payload": b"1"},
    ]}))  # fmt: skip
    which, body = receive(worker)  # the first result is not the client's: it becomes the second's argument
    assert which == "taskBatch"
    (assigned,) = body["tasks"]
    assert assigned["taskId"] == second
    assert [(a["kind"], a["data"]) for a in assigned["arguments"]] == [("inline", b"1")]
    assert not client.poll(200)

    worker.send(encode(taskResultBatch={"results": [
        {"taskId": second, "attempt": 1, "status": "success", "payloadKind": "inline", "payload": b"2"},
    ]}))  # fmt: skip
    which, body = receive(client)
    assert which == "taskResultBatch"
    assert [(r["taskId"], r["payload"]) for r in body["results"]] == [(second, b"2")]


def test_a_malformed_graph_is_rejected_for_each_target(scheduler):  # noqa: F811
    context, address = scheduler
    client = peer(context, address, b"C|conformance|1|h")
    client.send(hello("client"))
    assert receive(client)[0] == "helloAck"
    lonely, missing = os.urandom(16), os.urandom(16)
    task = {"taskId": lonely, "functionId": b"f" * 16, "arguments": [{"kind": "task", "data": missing}]}
    client.send(encode(graphTask={"graphId": os.urandom(16), "tasks": [task], "targets": [lonely]}))
    which, body = receive(client)
    assert which == "taskResultBatch"
    (result,) = body["results"]
    assert result["taskId"] == lonely and result["status"] == "rejected"
    assert "not in the graph" in result["errorText"]
