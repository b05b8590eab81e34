"""Futures as task arguments, as Dask and Ray chain tasks: the task receives the future's value, the scheduler holds
it until its inputs end, failures and cancels pass down (docs/interfaces.md, "Coming from Dask")."""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from scaler import Client, SchedulerClusterCombo

WAIT = 60  # seconds: every wait for a result is bounded


def inc(x):
    return x + 1


def add(a, b=0):
    return a + b


def total(values):
    return sum(values)


def describe(value):
    return repr(value)


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def fail_after(seconds, message):
    time.sleep(seconds)
    raise KeyError(message)


def megabytes(n):
    return b"x" * (n << 20)


def test_a_future_is_its_value_as_an_argument_of_submit_and_submit_verbose(client):
    first = client.submit(inc, 1)
    assert client.submit(inc, first).result(timeout=WAIT) == 3
    assert client.submit_verbose(add, (first,), {"b": client.submit(inc, first)}).result(timeout=WAIT) == 5
    assert client.submit(add, client.submit(sleep_then, 0.5, 10), b=first).result(timeout=WAIT) == 12


def test_futures_inside_lists_tuples_and_dicts_are_their_values(client):
    futures = [client.submit(inc, i) for i in range(5)]
    assert client.submit(total, futures).result(timeout=WAIT) == 15
    nested = {"a": futures[0], "b": (futures[1], [futures[2], {"c": futures[3]}]), "plain": [1, "x"]}
    assert client.submit(describe, nested).result(timeout=WAIT) == repr(
        {"a": 1, "b": (2, [3, {"c": 4}]), "plain": [1, "x"]}
    )


def test_map_starmap_and_the_executor_take_futures(client):
    futures = [client.submit(inc, i) for i in range(4)]
    assert client.map(add, [(future, 10) for future in futures]) == [11, 12, 13, 14]
    assert client.starmap(add, [(futures[0], futures[1])]) == [3]
    assert client.map(add, futures, [100] * 4) == [101, 102, 103, 104]
    with client.executor() as executor:
        assert executor.submit(inc, executor.submit(inc, 1)).result(timeout=WAIT) == 3
        assert list(executor.map(inc, futures, timeout=WAIT)) == [2, 3, 4, 5]
        assert list(executor.map(inc, futures, timeout=WAIT, chunksize=3)) == [2, 3, 4, 5]


def test_a_chain_of_200_dependent_tasks_ends_on_one_worker():
    combo = SchedulerClusterCombo(n_workers=1, logging_level="WARNING")
    try:
        with Client(combo.get_address(), timeout_seconds=60) as client:
            future = client.submit(inc, 0)
            for _ in range(199):
                future = client.submit(inc, future)
            assert future.result(timeout=WAIT) == 200
            # a task waits for its inputs at the scheduler, not on the worker: a wide fan-in ends too
            inputs = [client.submit(sleep_then, 0.01, i) for i in range(50)]
            assert client.submit(total, inputs).result(timeout=WAIT) == sum(range(50))
    finally:
        combo.shutdown()


def test_a_failed_input_fails_its_dependents_with_its_own_exception(client):
    failing = client.submit(fail_after, 0.5, "lost key")
    dependent = client.submit(inc, failing)
    second = client.submit(total, [client.submit(inc, 1), dependent])
    for future in (dependent, second):
        with pytest.raises(KeyError, match="lost key"):
            future.result(timeout=WAIT)
    # an input that had failed already
    with pytest.raises(KeyError, match="lost key"):
        client.submit(inc, failing).result(timeout=WAIT)


def test_a_cancelled_input_cancels_its_dependents_and_a_waiting_dependent_cancels_at_once(client):
    slow = client.submit(sleep_then, 30, 1)
    dependent = client.submit(inc, slow)
    below = client.submit(inc, dependent)
    waiting = client.submit(inc, slow)
    assert waiting.cancel(timeout=10)  # held at the scheduler: confirmed at once, its input runs on
    assert not slow.done()
    assert slow.cancel(timeout=10)
    for future in (dependent, below):
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=WAIT)
    with pytest.raises(concurrent.futures.CancelledError):
        client.submit(inc, slow).result(timeout=WAIT)  # an input cancelled already


def test_done_futures_are_arguments_also_after_their_value_was_fetched(client):
    small, large = client.submit(inc, 41), client.submit(megabytes, 1)
    assert small.result(timeout=WAIT) == 42 and len(large.result(timeout=WAIT)) == 1 << 20
    assert client.submit(inc, small).result(timeout=WAIT) == 43
    assert client.submit(len, large).result(timeout=WAIT) == 1 << 20
    unread = client.submit(megabytes, 2)
    concurrent.futures.wait([unread], timeout=WAIT)  # done, its value not decoded
    assert client.submit(len, unread).result(timeout=WAIT) == 2 << 20


def test_many_dependents_share_one_large_input(client):
    large = client.submit(sleep_then, 0.5, b"y" * (3 << 20))  # stored: its dependents read it by its object ID
    lengths = [client.submit(len, large) for _ in range(20)]
    assert [future.result(timeout=WAIT) for future in lengths] == [3 << 20] * 20
    assert len(large.result(timeout=WAIT)) == 3 << 20  # its client read it too


def test_a_future_of_another_client_fails_at_submit_naming_the_problem(client, cluster):
    with Client(cluster.get_address(), timeout_seconds=60) as other:
        foreign = other.submit(inc, 1)
        with pytest.raises(TypeError, match="future of another client"):
            client.submit(inc, foreign)
        with pytest.raises(TypeError, match="future of another client"):
            client.submit(total, [foreign])
        assert foreign.result(timeout=WAIT) == 2


def test_a_future_that_would_be_pickled_fails_at_submit_naming_the_problem(client):
    future = client.submit(inc, 1)
    with pytest.raises(TypeError, match="cannot be pickled"):
        client.submit(len, {future})  # a set: not a container whose futures are resolved
    with pytest.raises(TypeError, match="cannot be pickled"):
        client.submit(lambda: future.result())  # noqa: PLW0108 - a closure over a future
    assert future.result(timeout=WAIT) == 2


def chain_inside(depth):
    """A task that chains futures of its own Client (nested tasks)."""
    with Client() as inner:
        future = inner.submit(inc, 0)
        for _ in range(depth - 1):
            future = inner.submit(inc, future)
        return inner.submit(total, [future, inner.submit(inc, future)]).result()


def test_a_task_chains_the_futures_of_its_own_client(client):
    assert client.submit(chain_inside, 5).result(timeout=WAIT) == 11
