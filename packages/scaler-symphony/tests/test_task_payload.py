"""The payloads of a task on Symphony: the input the worker builds, what the service does with it, and how the
worker reads the output (`task_payload`)."""

from __future__ import annotations

import pickle
import threading

import cloudpickle
import pytest

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import clients_made_in, new_client_id
from scaler.protocol.serializer import DefaultSerializer, serialize_payload
from scaler.symphony.task_payload import (
    EXCEPTION,
    RESULT,
    UNSERIALIZABLE_EXCEPTION,
    parent_task,
    run_task,
    task_input,
    task_origin,
    task_result,
)
from scaler.worker.task_runner import ReadyTask


def _ready(function, arguments, serializer=None) -> ReadyTask:
    task = m.Task(b"T" * 16, b"C|test|1|0", b"F" * 16, serializer_id=b"S" * 16 if serializer else b"")
    return ReadyTask(task, cloudpickle.dumps(function), serializer, arguments, 0)


def _as_the_earlier_service_runs_it(payload: bytes):
    function, *arguments = cloudpickle.loads(payload)
    return function(*arguments)


def _describe(*arguments, **named):
    return arguments, named


class _Reversing:
    """A client's own serializer: bytes reversed."""

    def serialize(self, value):
        return pickle.dumps(value)[::-1]

    def deserialize(self, payload):
        return pickle.loads(payload[::-1])


def test_the_input_is_the_function_and_its_arguments_as_the_earlier_service_reads_them():
    serializer = DefaultSerializer()
    large = bytes(range(256)) * 1024  # kept out of its pickle: a payload of several frames
    frames = serialize_payload(serializer, large)
    assert type(frames) is list and len(frames) == 2
    arguments = [
        ("", serialize_payload(serializer, 1), b""),
        ("", [frames[0], memoryview(frames[1])], b"O" * 16),  # an object argument, as storage's frames
        ("flag", serialize_payload(serializer, "yes"), b""),
    ]
    payload = task_input(_ready(_describe, arguments))
    assert _as_the_earlier_service_runs_it(payload) == ((1, large), {"flag": "yes"})


def test_the_input_of_a_client_with_its_own_serializer_is_loaded_with_that_serializer():
    serializer = _Reversing()
    arguments = [("", serializer.serialize([1, 2]), b""), ("", serializer.serialize("x"), b"")]
    payload = task_input(_ready(_describe, arguments, cloudpickle.dumps(serializer)))
    assert _as_the_earlier_service_runs_it(payload) == (([1, 2], "x"), {})


def test_the_worker_never_loads_the_arguments_only_the_service_does():
    payload = task_input(_ready(_describe, [("", b"not a pickle", b"")]))  # building it loads nothing
    with pytest.raises(pickle.UnpicklingError):
        _as_the_earlier_service_runs_it(payload)


def _fails():
    raise KeyError("missing")


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not today")


def _raises_unpicklable():
    raise _Unpicklable("odd")


def test_the_service_tags_a_result_an_exception_and_an_exception_that_does_not_pickle():
    kind, value = cloudpickle.loads(run_task(cloudpickle.dumps((pow, 2, 10))))
    assert (kind, value) == (RESULT, 1024)
    kind, error = cloudpickle.loads(run_task(cloudpickle.dumps((_fails,))))
    assert kind == EXCEPTION and isinstance(error, KeyError)
    assert "Traceback in the Symphony service" in error.__notes__[0] and "_fails" in error.__notes__[0]
    kind, text = cloudpickle.loads(run_task(cloudpickle.dumps((_raises_unpicklable,))))
    assert kind == UNSERIALIZABLE_EXCEPTION and "_Unpicklable: odd" in text


def test_a_result_that_does_not_pickle_fails_with_the_reason():
    kind, error = cloudpickle.loads(run_task(cloudpickle.dumps((threading.Lock,))))
    assert kind == EXCEPTION and "lock" in str(error)


def test_the_worker_reads_each_kind_of_output():
    serializer = DefaultSerializer()
    status, payload, text = task_result(cloudpickle.dumps((RESULT, [1, 2])), serializer)
    assert (status, cloudpickle.loads(payload), text) == (m.TaskStatus.SUCCESS, [1, 2], "")
    status, payload, text = task_result(cloudpickle.dumps((EXCEPTION, ValueError("bad"))), serializer)
    error, traceback_text = cloudpickle.loads(payload)
    assert status == m.TaskStatus.FAILED and isinstance(error, ValueError) and "bad" in traceback_text
    status, payload, text = task_result(cloudpickle.dumps((UNSERIALIZABLE_EXCEPTION, "Odd: x")), serializer)
    assert (status, payload, text) == (m.TaskStatus.FAILED, b"", "Odd: x")


def test_a_result_is_serialized_with_the_client_s_serializer():
    status, payload, _ = task_result(cloudpickle.dumps((RESULT, {"a": 1})), _Reversing())
    assert status == m.TaskStatus.SUCCESS and _Reversing().deserialize(payload) == {"a": 1}


@pytest.mark.parametrize(
    "output, problem",
    [
        (cloudpickle.dumps(42), "not a tagged (kind, value) pair"),  # a service of before the tags
        (cloudpickle.dumps(("answer", 42)), "not a tagged (kind, value) pair"),
        (cloudpickle.dumps((EXCEPTION, "not an exception")), "carries a str"),
        (b"garbage", "does not load"),
    ],
)
def test_an_output_the_worker_cannot_read_fails_the_task_saying_why(output, problem):
    status, payload, _ = task_result(output, DefaultSerializer())
    error, _ = cloudpickle.loads(payload)
    assert status == m.TaskStatus.FAILED and isinstance(error, ProtocolError)
    assert problem in str(error)


def test_a_client_made_while_the_service_runs_a_task_names_that_task():
    with clients_made_in(task_origin("7", "42")):
        inside = new_client_id()
    assert parent_task(inside) == ("7", "42")
    assert parent_task(new_client_id()) is None
    with clients_made_in("elsewhere:1"):
        assert parent_task(new_client_id()) is None
