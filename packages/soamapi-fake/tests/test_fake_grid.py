"""The fake Symphony behaves as a real grid where code that uses soamapi can get it wrong (see its README)."""

from __future__ import annotations

import array
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

import pytest
import soamapi
import soamapi_fake
from echo_service import Payload


class Collector(soamapi.SessionCallback):
    """Keeps every output and exception, and the thread each came on."""

    def __init__(self) -> None:  # no super().__init__(), as some clients do
        self.outputs: Dict[str, Any] = {}
        self.exceptions: List[soamapi.SoamException] = []
        self.threads: List[str] = []
        self.changed = threading.Condition()

    def on_response(self, task_output_handle):
        with self.changed:
            self.threads.append(threading.current_thread().name)
            if task_output_handle.is_successful():
                message = Payload()
                task_output_handle.populate_task_output(message)
                self.outputs[task_output_handle.get_id()] = message.payload
            else:
                self.outputs[task_output_handle.get_id()] = task_output_handle.get_exception()
            self.changed.notify_all()

    def on_exception(self, exception):
        with self.changed:
            self.exceptions.append(exception)
            self.changed.notify_all()

    def wait(self, condition, what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(condition, 30), f"timed out waiting for {what}"


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _session(callback=None, session_type="RecoverableAllHistoricalData", flags=None):
    connection = soamapi.connect("Echo", soamapi.DefaultSecurityCallback("Guest", "Guest"))
    attributes = soamapi.SessionCreationAttributes()
    attributes.set_session_type(session_type)
    attributes.set_session_name("test")
    attributes.set_session_flags(soamapi.SessionFlags.PARTIAL_ASYNC if flags is None else flags)
    if callback is not None:
        attributes.set_session_callback(callback)
    return connection, connection.create_session(attributes)


def _send(session, payload: bytes) -> str:
    attributes = soamapi.TaskSubmissionAttributes()
    attributes.set_task_input(Payload(payload))
    return session.send_task_input(attributes).get_id()


def test_outputs_reach_the_callback_on_the_session_s_own_thread(grid):
    callback = Collector()
    connection, session = _session(callback)
    ids = [_send(session, word) for word in (b"one", b"two", b"three")]
    callback.wait(lambda: len(callback.outputs) == 3, "three outputs")
    assert [callback.outputs[task_id] for task_id in ids] == [b"ONE", b"TWO", b"THREE"]
    assert set(callback.threads) == {f"soam-callback-{session.get_id()}"}
    session.close()
    connection.close()
    soamapi.uninitialize()
    assert grid.leaks == [] and grid.callback_errors == [] and grid.invocations == 3


class _Mismatched(soamapi.Message):
    def on_serialize(self, stream):
        stream.write_string("text")

    def on_deserialize(self, stream):
        stream.read_byte_array("b")


def test_messages_go_through_their_hooks_and_a_mismatched_read_raises():
    stream = soamapi_fake.streams.OutputStream()
    with pytest.raises(soamapi.SoamException, match="takes an array.array, not bytes"):
        stream.write_byte_array(b"raw", 0, 3)
    stream.write_byte_array(array.array("i", [1, 2, 3]), 1, 2)
    reader = soamapi_fake.streams.InputStream(stream.records)
    with pytest.raises(soamapi.SoamException, match="items of 1 bytes, but 4-byte items were written"):
        reader.read_byte_array("b")
    assert list(soamapi_fake.streams.InputStream(stream.records).read_byte_array("i")) == [2, 3]
    records = soamapi_fake.streams.serialize(_Mismatched())
    with pytest.raises(soamapi.SoamException, match="record 0 of the message was written as string"):
        soamapi_fake.streams.deserialize(_Mismatched(), records)
    with pytest.raises(soamapi.SoamException, match="no more records"):
        soamapi_fake.streams.InputStream([]).read_string()


@pytest.mark.parametrize("mode", ["thread"])
def test_the_library_refuses_what_a_real_one_refuses(grid):
    with pytest.raises(soamapi.SoamException, match="no application 'Nope'"):
        soamapi.connect("Nope", soamapi.DefaultSecurityCallback("Guest", "Guest"))
    with pytest.raises(soamapi.SoamException, match="must be a SecurityCallback"):
        soamapi.connect("Echo", "Guest")
    with pytest.raises(soamapi.SoamException, match="'Interactive' is not defined in the profile"):
        _session(Collector(), session_type="Interactive")
    with pytest.raises(soamapi.SoamException, match="needs a session callback"):
        _session(None)
    with pytest.raises(soamapi.SoamException, match="exactly one of RECEIVE_SYNC and RECEIVE_ASYNC"):
        _session(Collector(), flags=soamapi.SessionFlags.SEND_SYNC)
    soamapi.uninitialize()
    with pytest.raises(soamapi.SoamException, match="not initialized"):
        soamapi.connect("Echo", soamapi.DefaultSecurityCallback("Guest", "Guest"))
    with pytest.raises(soamapi.SoamException, match="not started by Symphony"):
        soamapi.ServiceContainer().run()


def test_a_service_that_raises_is_run_again_then_fails_with_an_api_exception_embedded(grid):
    callback = Collector()
    _, session = _session(callback)
    raised, fatal = _send(session, b"raise"), _send(session, b"fatal")
    callback.wait(lambda: len(callback.outputs) == 2, "two outputs")
    failure = callback.outputs[raised]
    assert "ValueError: asked to raise" in str(failure)
    embedded = failure.get_embedded_exception()
    assert isinstance(embedded, soamapi_fake.errors.EmbeddedServiceException)  # not the ValueError itself
    assert embedded.type_name == "ValueError"
    assert "FatalException: asked to fail for good" in str(callback.outputs[fatal])
    assert grid.invocations == 3  # the failure ran twice (task_retry_limit 1), the fatal one once


@pytest.mark.parametrize("mode", ["process"])  # a service on a thread of this process cannot die alone
def test_a_service_instance_that_dies_is_replaced_and_its_task_runs_again(grid, tmp_path):
    callback = Collector()
    _, session = _session(callback)
    marker = tmp_path / "died once"
    dies_once, dies_always = _send(session, f"die-once:{marker}".encode()), _send(session, b"die")
    callback.wait(lambda: len(callback.outputs) == 2, "both outputs")
    assert callback.outputs[dies_once] == f"DIE-ONCE:{marker}".upper().encode()
    failure = callback.outputs[dies_always]
    assert "exited with code 3" in str(failure) and failure.get_embedded_exception() is None
    assert grid.invocations == 4  # each ran twice (task_retry_limit 1)


def test_an_aborted_session_tells_its_callback_and_takes_no_more_tasks(grid):
    callback = Collector()
    _, session = _session(callback)
    grid.abort_sessions("lost the master host")
    callback.wait(lambda: callback.exceptions, "on_exception")
    assert "lost the master host" in str(callback.exceptions[0])
    with pytest.raises(soamapi.SoamException, match="is aborted"):
        _send(session, b"late")


def test_closing_a_session_from_its_callback_raises_instead_of_deadlocking(grid):
    errors: List[BaseException] = []

    class Closing(Collector):
        def on_response(self, task_output_handle):
            try:
                session.close()
            except soamapi.SoamException as error:
                errors.append(error)
            super().on_response(task_output_handle)

    callback = Closing()
    _, session = _session(callback)
    _send(session, b"x")
    callback.wait(lambda: callback.outputs, "the output")
    assert "would deadlock" in str(errors[0])


def test_a_callback_that_raises_is_recorded_and_the_next_output_still_comes(grid):
    class Raising(Collector):
        def on_response(self, task_output_handle):
            super().on_response(task_output_handle)
            raise KeyError(task_output_handle.get_id())

    callback = Raising()
    _, session = _session(callback)
    _send(session, b"a")
    _send(session, b"b")
    callback.wait(lambda: len(callback.outputs) == 2, "two outputs")
    _until(lambda: len(grid.callback_errors) == 2, "two recorded errors")
    assert "KeyError" in grid.callback_errors[0]


def test_aborted_tasks_report_nothing_whether_they_were_waiting_or_running(grid, tmp_path):
    grid.applications["Echo"].slots = 1  # one service instance: a second task waits for it
    callback = Collector()
    _, session = _session(callback)
    gate = tmp_path / "gate"
    running = _send(session, f"wait:{gate}".encode())
    _until(lambda: grid.running_now == 1, "the task to run")
    grid.pause_callbacks()
    waiting, other = _send(session, b"waiting"), _send(session, b"other")
    session.abort_tasks([running, waiting])
    grid.resume_callbacks()
    gate.touch()  # a task on a thread runs to its end; a process is killed
    callback.wait(lambda: other in callback.outputs, "the task not aborted")
    _until(lambda: grid.running_now == 0, "the aborted task to end")
    assert sorted(callback.outputs) == [other]
    events = [json.loads(line) for line in (tmp_path / "grid.jsonl").read_text().splitlines()]
    assert sorted(e["task"] for e in events if e["event"] == "abort") == sorted([running, waiting])


@pytest.mark.parametrize("mode", ["thread"])
def test_a_session_that_receives_synchronously_fetches_its_outputs(grid):
    _, session = _session(None, flags=soamapi.SessionFlags.SYNC)
    assert list(session.fetch_task_output(1, 0)) == []  # nothing yet: a poll returns at once
    task_id = _send(session, b"sync")
    [handle] = session.fetch_task_output(1, 30)
    message = Payload()
    handle.populate_task_output(message)
    assert (handle.get_id(), message.payload) == (task_id, b"SYNC")


@pytest.mark.parametrize("mode", ["thread"])
def test_uninitialize_with_a_connection_open_is_a_leak(grid):
    _session(Collector())
    soamapi.uninitialize()
    assert grid.leaks == ["uninitialize with 1 connection(s) open"]


def test_a_grid_is_configured_from_the_environment(tmp_path):
    config = {"applications": [{"name": "App", "service": "m:C", "slots": 3}], "refuse_connect": "maintenance"}
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(config))
    code = (
        "import json, soamapi_fake; g = soamapi_fake.grid(); "
        "print(json.dumps([g.applications['App'].slots, g.refuse_connect]))"
    )
    for value in (json.dumps(config), str(path)):
        environment = {**os.environ, soamapi_fake.CONFIG_VARIABLE: value}
        output = subprocess.run(
            [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60
        )
        assert json.loads(output.stdout) == [3, "maintenance"], output.stderr


@pytest.mark.parametrize("mode", ["thread"])
def test_a_slow_grid_starts_each_run_late_and_a_task_aborted_meanwhile_never_runs(grid):
    application = grid.applications["Echo"]
    application.slots, application.task_delay_seconds = 1, 600  # one instance, which waits before each run
    callback = Collector()
    _, session = _session(callback)
    late = _send(session, b"late")
    session.abort_tasks([late])  # the instance stops waiting at once
    application.task_delay_seconds = 0
    prompt = _send(session, b"prompt")
    callback.wait(lambda: prompt in callback.outputs, "the next task, on the same instance")
    assert sorted(callback.outputs) == [prompt] and grid.invocations == 1
