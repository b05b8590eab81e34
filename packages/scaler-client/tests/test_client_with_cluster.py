"""The client against the real scheduler, object storage server and workers.

Skipped where only the client is installed (its own tox environment); runs
wherever `scaler.cluster.combo` and the components it starts are importable.
One local cluster serves the whole module, so the suite stays quick.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from typing import Any, Iterator

import cloudpickle
import pytest

from scaler import Client, Serializer
from scaler.protocol.addresses import free_tcp_port

combo = pytest.importorskip("scaler.cluster.combo", reason="needs scaler-scheduler, scaler-storage, scaler-worker")


def keywords(a, b=2, *, c=3):
    return (a, b, c)


def big_result(size):
    return b"r" * size


def raise_value_error(message):
    raise ValueError(message)


def parent(client, x):
    return client.submit(keywords, x, c=0).result() + (1,)


class Tagging(Serializer):
    """Wraps every value in a tag so the test can tell that the workers used it."""

    def serialize(self, obj: Any) -> bytes:
        return cloudpickle.dumps(("tagged", obj))

    def deserialize(self, payload: bytes) -> Any:
        tag, value = cloudpickle.loads(payload)
        assert tag == "tagged"
        return value


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    cluster = combo.SchedulerClusterCombo(address=address, n_workers=2, logging_level="WARNING")
    try:
        yield address
    finally:
        cluster.shutdown()


@pytest.fixture
def client(address: str) -> Iterator[Client]:
    with Client(address=address, timeout_seconds=30) as connected:
        yield connected


def test_submit_and_map(client):
    assert client.submit(math.sqrt, 16).result(timeout=60) == 4.0
    assert sum(client.map(math.sqrt, [(i,) for i in range(100)])) == pytest.approx(661.4629471031477)
    assert client.submit(keywords, 1, c=5).result(timeout=60) == (1, 2, 5)


def test_large_arguments_and_results_through_object_storage(client):
    assert client.submit(len, b"x" * 500_000).result(timeout=60) == 500_000
    assert client.submit(big_result, 300_000).result(timeout=60) == b"r" * 300_000
    reference = client.send_object(list(range(1000)))
    assert client.submit(sum, reference).result(timeout=60) == sum(range(1000))


def test_task_exception_arrives_as_itself_with_the_remote_traceback(client):
    with pytest.raises(ValueError, match="from the worker") as raised:
        client.submit(raise_value_error, "from the worker").result(timeout=60)
    assert "raise_value_error" in str(raised.value.__cause__)
    with pytest.raises(ValueError):
        client.map(raise_value_error, [("a",), ("b",)])
    assert client.submit(math.sqrt, 4).result(timeout=60) == 2.0


def test_cancel_a_running_task(client):
    future = client.submit(time.sleep, 30)
    deadline = time.monotonic() + 30
    while not future.cancel():  # the task may not be queued yet; it can never finish in time
        assert time.monotonic() < deadline and not future.done()
    assert future.cancelled()


def test_clear_then_submit_again(client):
    futures = [client.submit(time.sleep, 30) for _ in range(3)]
    client.clear()
    assert all(future.cancelled() for future in futures)
    assert client.submit(math.sqrt, 9).result(timeout=60) == 3.0


def test_custom_serializer(address):
    with Client(address=address, serializer=Tagging()) as tagged:
        assert tagged.submit(keywords, 1, b=[2], c={"x": 3}).result(timeout=60) == (1, [2], {"x": 3})


def test_nested_task(client):
    assert client.submit(parent, client, 7).result(timeout=60) == (7, 2, 0, 1)


def test_profiling(address):
    with Client(address=address, profiling=True) as profiling:
        future = profiling.submit(sum, range(100_000))
        assert future.result(timeout=60) == sum(range(100_000))
        info = future.profiling_info()
        assert info.duration_seconds >= 0 and info.cpu_seconds >= 0


def test_futures_wait(client):
    futures = [client.submit(math.sqrt, i) for i in range(20)]
    done, not_done = concurrent.futures.wait(futures, timeout=60)
    assert not not_done
