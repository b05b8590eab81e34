"""The user-facing behaviour, against real processes started by SchedulerClusterCombo."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib.util
import math
import os
import pickle
import signal
import threading

import cloudpickle
import pytest

from scaler import Client, SchedulerClusterCombo, Serializer
from scaler.protocol.errors import RemoteTaskError, WorkerDiedError


@pytest.fixture(scope="module")
def cluster():
    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture
def client(cluster):
    with Client(address=cluster.get_address(), timeout_seconds=30) as client:
        yield client


def square(value: int) -> int:
    return value * value


def add(a, b, *, scale=1, offset=0):
    return (a + b) * scale + offset


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception refuses to be pickled")


def raise_value_error(text):
    raise ValueError(text)


def fail_on(value, bad):
    if value == bad:
        raise ValueError(f"bad item {value}")
    return value


def raise_unpicklable():
    raise Unpicklable("cannot travel")


def return_unpicklable():
    return lambda_holder()


class lambda_holder:
    def __reduce__(self):
        raise TypeError("this result refuses to be pickled")


def die(how: str):
    if how == "exit":
        os._exit(3)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    import ctypes

    ctypes.string_at(0)  # segmentation fault


def test_reference_readme_examples(client):
    assert client.submit(math.sqrt, 16).result() == 4.0
    assert round(sum(client.map(math.sqrt, [(i,) for i in range(100)])), 2) == 661.46
    assert client.submit(square, 4).result() == 16


def test_ten_thousand_tasks_through_map_and_through_submit(client):
    assert client.map(square, [(i,) for i in range(10_000)]) == [i * i for i in range(10_000)]
    futures = [client.submit(square, i) for i in range(10_000)]
    assert [f.result(timeout=120) for f in futures] == [i * i for i in range(10_000)]


def test_keyword_arguments_are_honoured_like_a_local_call(client):
    assert client.submit(add, 1, 2, scale=10, offset=5).result() == add(1, 2, scale=10, offset=5)
    assert client.submit(add, b=3, a=4).result() == 7
    assert client.submit_verbose(add, (1,), {"b": 2, "offset": 1}).result() == 4


def test_a_task_exception_returns_as_itself_with_the_remote_traceback(client):
    future = client.submit(raise_value_error, "boom")
    with pytest.raises(ValueError, match="boom") as info:
        future.result()
    assert "raise_value_error" in str(info.value.__cause__)


def test_an_unpicklable_exception_still_reaches_the_caller_clearly(client):
    with pytest.raises(RemoteTaskError, match="Unpicklable.*cannot travel"):
        client.submit(raise_unpicklable).result()


def test_an_unpicklable_result_is_a_clear_error(client):
    with pytest.raises(Exception, match="refuses to be pickled"):
        client.submit(return_unpicklable).result()


@pytest.mark.parametrize("how, expected", [("exit", "code 3"), ("sigkill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_a_dying_processor_is_reported_and_the_worker_goes_on(client, how, expected):
    with pytest.raises(WorkerDiedError, match=expected):
        client.submit(die, how).result(timeout=60)
    assert client.map(square, [(i,) for i in range(20)]) == [i * i for i in range(20)]


def test_a_failing_task_in_map_raises_and_leaves_the_client_usable(client):
    with pytest.raises(ValueError, match="bad item 3"):
        client.map(fail_on, [(i, 3) for i in range(10)])
    assert client.map(square, [(3,)]) == [9]


def test_futures_work_with_concurrent_futures_and_asyncio(client):
    futures = [client.submit(square, i) for i in range(20)]
    done, not_done = concurrent.futures.wait(futures, timeout=60)
    assert not not_done
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=60)) == [
        i * i for i in range(20)
    ]
    seen = []
    called = threading.Event()
    future = client.submit(square, 5)
    future.add_done_callback(lambda f: (seen.append(f.result()), called.set()))
    assert called.wait(60)
    assert seen == [25]

    async def gather():
        return await asyncio.gather(*(client.submit(square, i) for i in range(5)))

    assert asyncio.run(gather()) == [0, 1, 4, 9, 16]
    assert future.task_id


def test_objects_large_arguments_and_large_results_travel_through_storage(client):
    blob = os.urandom(1_000_000)
    reference = client.send_object(blob, name="blob")
    assert client.submit(len, reference).result() == len(blob)
    assert client.submit(bytes, bytearray(blob)).result() == blob  # large argument and large result


def describe_buffer(value):
    """What a task sees of a large argument: its type, its contents, and whether it may write to it."""
    if type(value).__name__ == "ndarray":
        value[0] = value[0]  # raises if the array arrived read-only
        return "ndarray", value.dtype.str, value.shape, int(value.sum())
    return type(value).__name__, len(value), hashlib.sha256(value).hexdigest()


def tuple_of_bytes(size, count):
    return tuple(bytes([index]) * size for index in range(count))


def test_large_buffers_keep_their_type_and_contents_in_both_directions(client):
    # they travel as frames of their own beside a small pickle (pickle protocol 5, out of band)
    blob = os.urandom(3_000_000)
    digest = hashlib.sha256(blob).hexdigest()
    assert client.submit(describe_buffer, blob).result() == ("bytes", len(blob), digest)
    assert client.submit(describe_buffer, bytearray(blob)).result() == ("bytearray", len(blob), digest)
    reference = client.send_object(blob)
    assert client.map(describe_buffer, [(reference,)] * 3) == [("bytes", len(blob), digest)] * 3
    assert client.submit(tuple_of_bytes, 200_000, 3).result() == tuple_of_bytes(200_000, 3)  # a large result
    assert client.submit(bytearray, blob).result() == bytearray(blob)
    if importlib.util.find_spec("numpy") is None:
        return
    import numpy

    array = numpy.arange(1_000_000, dtype=numpy.int64).reshape(1000, 1000)
    expected = ("ndarray", array.dtype.str, (1000, 1000), int(array.sum()))
    assert client.submit(describe_buffer, array).result() == expected  # arrives writable
    assert numpy.array_equal(client.submit(numpy.negative, array).result(), -array)


def test_a_client_is_picklable_and_reconnects_to_the_same_address(client):
    copy = pickle.loads(pickle.dumps(client))
    try:
        assert copy.submit(square, 6).result() == 36
    finally:
        copy.disconnect()


def burn_then_allocate(cpu_seconds: float, size: int) -> int:
    import time

    started = time.process_time()
    while time.process_time() - started < cpu_seconds:
        pass
    return len(bytearray(size))


def test_profiling_info_is_measured_on_the_worker(cluster):
    with Client(address=cluster.get_address(), profiling=True) as client:
        future = client.submit(burn_then_allocate, 0.2, 50_000_000)
        assert future.result(timeout=60) == 50_000_000
        info = future.profiling_info()
        assert info.cpu_seconds >= 0.2  # the task burned that much CPU time by itself
        assert info.peak_memory_bytes >= 50_000_000  # and held that many bytes at once
    with Client(address=cluster.get_address()) as client:
        future = client.submit(square, 3)
        assert future.result(timeout=60) == 9
        with pytest.raises(ValueError, match="profiling=True"):
            future.profiling_info()


class Tagging(Serializer):
    """Wraps every value in a tag, and refuses any payload without it: proof that both ends used it."""

    def serialize(self, obj):
        return cloudpickle.dumps(("tagged", obj))

    def deserialize(self, payload):
        tag, value = cloudpickle.loads(payload)
        if tag != "tagged":
            raise ValueError(f"not a Tagging payload: {tag!r}")
        return value


def identity(value):
    return value


def test_a_custom_serializer_carries_arguments_and_results(cluster):
    with Client(address=cluster.get_address(), serializer=Tagging()) as client:
        assert client.submit(add, [1], [2], scale=1, offset=[3]).result(timeout=60) == [1, 2, 3]
        reference = client.send_object({"x": 3})
        assert client.submit(identity, reference).result(timeout=60) == {"x": 3}


@pytest.mark.parametrize("event_loop", ["builtin", "auto"])
def test_every_event_loop_choice_runs_a_cluster(tmp_path, event_loop):
    log = tmp_path / "cluster.log"
    options = dict(event_loop=event_loop, logging_level="INFO", logging_paths=(str(log),))
    with SchedulerClusterCombo(n_workers=1, **options) as combo:
        with Client(address=combo.get_address(), timeout_seconds=30) as client:
            assert client.map(square, [(i,) for i in range(100)]) == [i * i for i in range(100)]
            # larger than a pipe's buffer: the agent writes it to its processor in more than one go
            assert client.submit(len, b"x" * 1_000_000).result(timeout=60) == 1_000_000
    expected = "builtin" if event_loop == "builtin" or importlib.util.find_spec("uvloop") is None else "uvloop"
    chosen = {line.rsplit(": ", 1)[1] for line in log.read_text().splitlines() if "use event loop:" in line}
    assert chosen == {expected}
