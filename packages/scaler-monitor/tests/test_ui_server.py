"""scaler_ui as the installed program, fed by a real XPUB socket: its page, event stream, /metrics and token."""

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from scaler.protocol import codec
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.messages import (
    Counter,
    FunctionStats,
    StateSnapshot,
    TaskRuns,
    TaskStatus,
    WorkerHeartbeat,
    WorkerSnapshot,
)

SCALER_UI = str(Path(sys.executable).parent / "scaler_ui")


class Feed:
    """The XPUB socket a scheduler would publish on."""

    def __init__(self, address: str, socket) -> None:
        self.address = address
        self.socket = socket

    def wait_for_subscriber(self) -> None:
        assert self.socket.poll(20_000, zmq.POLLIN), "scaler_ui did not subscribe"
        assert self.socket.recv() == b"\x01"

    def publish(self, snapshot: StateSnapshot) -> None:
        self.socket.send_multipart(codec.encode(snapshot))


@pytest.fixture
def feed(publisher):
    return Feed(*publisher)


def _start_ui(feed: Feed, *options: str):
    port = free_tcp_port()
    process = subprocess.Popen([SCALER_UI, feed.address, "--port", str(port), *options], stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, process.stderr.read().decode()
        try:
            urllib.request.urlopen(base + "/favicon.svg", timeout=5)
            break
        except urllib.error.HTTPError:
            break  # it answers (maybe 401): it is up
        except OSError:
            assert time.monotonic() < deadline, "scaler_ui did not answer"
            time.sleep(0.1)
    return process, base


def _stop(process) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture
def ui(feed):
    process, base = _start_ui(feed)
    try:
        yield base
    finally:
        _stop(process)


def _get(url: str, headers=None, timeout: float = 10):
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout)


def _snapshot(success: int, workers) -> StateSnapshot:
    return StateSnapshot(
        scheduler_cpu=25.0,
        scheduler_rss_bytes=1 << 25,
        task_states=[Counter("queued", 4), Counter("assigned", 2), Counter("success", success), Counter("failed", 1)],
        messages_sent=[Counter("TaskBatch", 7)],
        messages_received=[Counter("TaskBatch", 9)],
        workers=workers,
        clients=1,
    )


def _worker(name: bytes, succeeded: int, seconds: float) -> WorkerSnapshot:
    beat = WorkerHeartbeat(processor_cpu=50.0, functions=[FunctionStats("mod.f", succeeded, 1, seconds)])
    return WorkerSnapshot(worker_id=name, heartbeat=beat, slots=1, assigned_tasks=3)


def _events(response):
    """(event name, data) pairs of a server-sent event stream, as they come."""
    name = None
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            yield name, json.loads(line[len("data: ") :])


def test_page_and_assets_come_from_the_package(ui):
    page = _get(ui + "/")
    assert page.headers["Content-Type"].startswith("text/html")
    html = page.read().decode()
    assert 'src="dashboard.js"' in html and "http" not in html.split("<footer")[0]  # nothing from elsewhere
    script = _get(ui + "/dashboard.js")
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert "EventSource" in script.read().decode()
    assert _get(ui + "/dashboard.css").read()
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(ui + "/nothing-here")
    assert missing.value.code == 404


def test_state_events_and_metrics_follow_the_feed(feed, ui):
    assert json.load(_get(ui + "/state.json"))["snapshot"] is None
    feed.wait_for_subscriber()
    feed.publish(_snapshot(10, [_worker(b"W|a|1|aa", 5, 1.0), _worker(b"W|b|2|bb", 3, 2.0)]))
    deadline = time.monotonic() + 20
    while json.load(_get(ui + "/state.json"))["snapshot"] is None:
        assert time.monotonic() < deadline, "the snapshot did not reach the page state"
        time.sleep(0.05)

    stream = _get(ui + "/events", timeout=30)
    assert stream.headers["Content-Type"] == "text/event-stream"
    events = _events(stream)
    name, history = next(events)
    assert name == "history" and len(history) == 1
    name, runs = next(events)
    assert name == "stream" and runs["task"] == []  # the task stream of the last minutes: none ran
    name, state = next(events)
    assert name == "state"
    snapshot = state["snapshot"]
    assert snapshot["tasks_received"] == 4 + 2 + 10 + 1
    assert sorted(worker["worker"] for worker in snapshot["workers"]) == ["W|a|1|aa", "W|b|2|bb"]

    # worker b left; its runs still count
    feed.publish(_snapshot(30, [_worker(b"W|a|1|aa", 7, 1.5)]))
    name, state = next(events)
    assert name == "state"
    snapshot = state["snapshot"]
    assert snapshot["task_states"]["success"] == 30
    assert snapshot["point"]["succeeded_per_second"] > 0
    assert [worker["worker"] for worker in snapshot["workers"]] == ["W|a|1|aa"]
    (function,) = snapshot["functions"]
    assert function == {"function": "mod.f", "succeeded": 10, "failed": 2, "mean_seconds": 3.5 / 12}
    stream.close()

    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(_get(ui + "/metrics").read().decode())
        for sample in family.samples
    }
    assert metrics[("scaler_tasks_finished_total", (("state", "success"),))] == 30
    assert metrics[("scaler_tasks", (("state", "queued"),))] == 4
    assert metrics[("scaler_tasks_received_total", ())] == 4 + 2 + 30 + 1
    assert metrics[("scaler_workers", ())] == 1
    assert metrics[("scaler_worker_processor_cpu_usage_ratio", (("worker", "W|a|1|aa"),))] == 0.5
    assert metrics[("scaler_function_runs_total", (("function", "mod.f"), ("outcome", "succeeded")))] == 10
    assert metrics[("scaler_messages_received_total", (("type", "TaskBatch"),))] == 9


def test_a_token_guards_the_page_the_events_and_the_metrics(feed):
    process, base = _start_ui(feed, "--token", "s3cret")
    try:
        for path in ("/", "/events", "/metrics", "/state.json", "/tasks.json", "/dashboard.js", "/task_chart.js"):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic !!!"}):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    _get(base + path, headers)
                assert refused.value.code == 401
                assert refused.value.headers["WWW-Authenticate"].startswith("Basic")
        assert _get(base + "/metrics", {"Authorization": "Bearer s3cret"}).status == 200
        basic = base64.b64encode(b"anyone:s3cret").decode()
        assert _get(base + "/", {"Authorization": f"Basic {basic}"}).status == 200
    finally:
        _stop(process)


def _runs(*failed_numbers: int, count: int = 5) -> TaskRuns:
    """What a worker's heartbeat says of ``count`` ended runs of mod.f (those numbered ``failed_numbers`` failed)."""
    return TaskRuns(
        function_names=["mod.f"],
        client_ids=[b"C|h|1|cc"],
        task_ids=[bytes([n]) * 16 for n in range(count)],
        functions=[0] * count,
        clients=[0] * count,
        queued_seconds=[0.5] * count,
        run_seconds=[0.25] * count,
        ended_seconds_ago=[0.125] * count,
        failed_runs=list(failed_numbers),
        failed_statuses=[TaskStatus.FAILED] * len(failed_numbers),
        error_texts=[f"ValueError: number {n}" for n in failed_numbers],
    )


def test_the_task_runs_are_searched_as_json(feed, ui):
    feed.wait_for_subscriber()
    worker = _worker(b"W|a|1|aa", 5, 1.0)
    worker.heartbeat.ended_runs = _runs(1, 3)
    feed.publish(_snapshot(5, [worker]))
    deadline = time.monotonic() + 20
    while json.load(_get(ui + "/tasks.json"))["matched"] < 5:
        assert time.monotonic() < deadline, "the runs did not reach the task log"
        time.sleep(0.05)
    found = json.load(_get(ui + "/tasks.json?function=MOD.&state=failed"))
    assert found["matched"] == 2
    assert [run["task_id"] for run in found["tasks"]] == [(bytes([n]) * 16).hex() for n in (3, 1)]  # newest first
    run = found["tasks"][0]
    assert run["error"] == "ValueError: number 3" and run["worker"] == "W|a|1|aa" and run["client"] == "C|h|1|cc"
    assert run["ended"] - run["started"] == pytest.approx(0.25) and run["started"] - run["queued"] == pytest.approx(0.5)
    assert json.load(_get(ui + "/tasks.json?task=0202&limit=1"))["matched"] == 1
    assert json.load(_get(ui + "/tasks.json?limit=2"))["tasks"][0]["task_id"] == (b"\x04" * 16).hex()
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(ui + "/tasks.json?limit=many")
    assert refused.value.code == 400


def test_a_search_that_cannot_match_is_refused_naming_what_is_wrong(ui):
    """A typo in a search is told, not answered as "nothing matched"."""
    for query, named in (
        ("fn=square", "unknown parameter(s) fn: /tasks.json takes function, state, task, limit"),
        ("state=failure", "state 'failure' is none of success, failed, cancelled, worker died, rejected, running"),
        ("task=0x02", "task '0x02' is not the start of a task ID (hexadecimal digits)"),
        ("limit=-1", "limit '-1' is not a number"),
        ("limit=%C2%B2", "limit '\u00b2' is not a number"),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            _get(ui + "/tasks.json?" + query)
        assert refused.value.code == 400 and refused.value.read().decode().strip() == named
    assert json.load(_get(ui + "/tasks.json?state=worker+died&task=+0A+"))["matched"] == 0  # spaces around are cut
