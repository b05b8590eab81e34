"""`client.executor()` against the standard library: the same code, the same inputs, run on a
`ProcessPoolExecutor` and on a Scaler cluster, must see the same results, order, exceptions, timeouts
and shutdown behaviour. Where Scaler's executor deliberately differs, the test says how."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import time

import pytest

from scaler import ScalerExecutor


def fail_on(value, bad):
    if value == bad:
        raise ValueError(f"bad value {value}")
    return value * 10


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def add(a, b, *, scale=1):
    return (a + b) * scale


def word_lengths(executor: concurrent.futures.Executor, words):
    """Code written against the Executor interface only."""
    return list(executor.map(len, words, chunksize=2))


def _process_pool() -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))


@pytest.fixture(scope="module")
def process_pool():
    pool = _process_pool()
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(params=["processpool", "scaler"])
def executor(request, client, process_pool):
    """The same test body runs on both executors."""
    if request.param == "processpool":
        yield process_pool
    else:
        with client.executor() as executor:
            yield executor


def _outcomes(iterator):
    """What a consumer sees: the values, then the exception (type and message) that stopped it, if any."""
    seen = []
    try:
        for value in iterator:
            seen.append(value)
    except Exception as error:
        seen.append((type(error).__name__, str(error)))
    return seen


def test_it_is_an_executor_and_submit_returns_futures(executor):
    assert isinstance(executor, concurrent.futures.Executor)
    future = executor.submit(add, 2, 3, scale=10)
    assert isinstance(future, concurrent.futures.Future)
    assert future.result(timeout=60) == 50
    done, _ = concurrent.futures.wait([executor.submit(abs, -i) for i in range(20)], timeout=60)
    assert sorted(f.result() for f in done) == list(range(20))


@pytest.mark.parametrize("chunksize", [1, 2, 7, 1000])
def test_map_returns_results_in_input_order_for_every_chunksize(executor, chunksize):
    values = list(range(-50, 50))
    assert list(executor.map(abs, values, chunksize=chunksize)) == [abs(v) for v in values]
    # several iterables are zipped, stopping at the shortest, as the built-in map does
    assert list(executor.map(pow, [2, 3, 4], [5, 2], chunksize=chunksize)) == [32, 9]
    assert list(executor.map(abs, [], chunksize=chunksize)) == []


def test_map_keeps_input_order_when_later_calls_finish_first(executor):
    delays = [0.6, 0.0, 0.3, 0.0]
    results = executor.map(sleep_then, delays, ["a", "b", "c", "d"], timeout=60)
    assert iter(results) is results  # an iterator, consumed lazily
    assert list(results) == ["a", "b", "c", "d"]


def test_map_raises_a_calls_exception_when_its_result_is_reached(executor):
    seen = _outcomes(executor.map(fail_on, range(10), [7] * 10))
    assert seen == [0, 10, 20, 30, 40, 50, 60, ("ValueError", "bad value 7")]


def test_the_exception_carries_the_remote_traceback(executor):
    with pytest.raises(ValueError) as raised:
        list(executor.map(fail_on, [1, 2], [2, 2], chunksize=2))
    assert "fail_on" in str(raised.value.__cause__)  # the worker's traceback, as its cause


def test_chunksize_never_hides_results_before_the_failing_call(client, process_pool):
    """The standard contract: a call's exception is raised when its value is reached. ProcessPoolExecutor
    with chunksize > 1 raises at the first item of the failing chunk instead; Scaler's executor keeps the
    contract for every chunksize."""
    expected = _outcomes(process_pool.map(fail_on, range(10), [7] * 10, chunksize=1))
    with client.executor() as executor:
        for chunksize in (1, 3, 4, 100):
            assert _outcomes(executor.map(fail_on, range(10), [7] * 10, chunksize=chunksize)) == expected
    chunked = _outcomes(process_pool.map(fail_on, range(10), [7] * 10, chunksize=3))
    assert chunked == [0, 10, 20, 30, 40, 50, ("ValueError", "bad value 7")]  # 60 is lost with its chunk


def test_map_timeout_raises_timeout_error_and_ends_the_iterator(executor):
    results = executor.map(sleep_then, [5.0, 0.0], ["slow", "fast"], timeout=0.5)
    with pytest.raises(concurrent.futures.TimeoutError):
        next(results)
    with pytest.raises(StopIteration):  # the iterator is finished, as a generator that raised
        next(results)


def test_leaving_the_iterator_early_cancels_the_calls_not_consumed(client):
    with client.executor() as executor:
        results = executor.map(sleep_then, [0.0, 60.0, 60.0, 60.0], range(4))
        assert next(results) == 0
        results.close()
        # both workers would be busy for a minute had the long calls not been cancelled
        assert executor.submit(abs, -1).result(timeout=20) == 1


def test_bad_map_arguments_are_refused_like_the_standard_library(executor):
    with pytest.raises(ValueError, match="chunksize"):
        executor.map(abs, [1], chunksize=0)


def test_shutdown_waits_and_refuses_new_work(client, process_pool):
    for executor in (_process_pool(), client.executor()):
        with executor:
            futures = [executor.submit(sleep_then, 0.2, i) for i in range(4)]
        assert all(future.done() for future in futures)  # __exit__ is shutdown(wait=True)
        assert [future.result() for future in futures] == [0, 1, 2, 3]
        with pytest.raises(RuntimeError, match="after shutdown"):
            executor.submit(abs, 1)
        with pytest.raises(RuntimeError, match="after shutdown"):
            executor.map(abs, [1])
    assert client.submit(abs, -5).result(timeout=60) == 5  # the executor's shutdown left the client connected


def test_shutdown_with_cancel_futures_cancels_the_queued_calls(client):
    """Both executors: two long calls occupy both workers, twenty calls of a second wait; shutdown(cancel_futures=
    True) ends every future, the waiting ones cancelled. (ProcessPoolExecutor lets the calls it already handed
    to its processes finish; Scaler stops even the running ones, so its long calls may be cancelled too. The
    waiting calls take a second each, so that however slowly the cancel travels, few of them can be done.)"""
    for executor in (_process_pool(), client.executor()):
        long_calls = [executor.submit(sleep_then, 3.0, "long") for _ in range(2)]
        queued = [executor.submit(sleep_then, 1.0, i) for i in range(20)]
        executor.shutdown(wait=True, cancel_futures=True)
        for future in long_calls + queued:
            assert future.done()
            if not future.cancelled():
                assert future.result() in ("long", *range(20))
        assert sum(future.cancelled() for future in queued) >= 15, executor


def test_an_executor_made_from_an_address_owns_its_client(cluster):
    executor = ScalerExecutor(cluster.get_address())
    assert executor.client.connected
    assert list(executor.map(abs, [-1, -2, -3])) == [1, 2, 3]
    executor.shutdown()
    assert not executor.client.connected


def test_buffersize_reads_the_inputs_lazily(client):
    """Python 3.14's ``buffersize``: only that many tasks are submitted ahead of the consumer."""
    consumed = []

    def inputs():
        for i in range(100):
            consumed.append(i)
            yield i

    with client.executor() as executor:
        results = executor.map(abs, inputs(), buffersize=3)
        assert len(consumed) == 3
        assert next(results) == 0
        assert len(consumed) == 4
        assert list(results) == list(range(1, 100))
        chunked = executor.map(abs, inputs(), chunksize=10, buffersize=2)
        assert len(consumed) == 100 + 20
        assert list(chunked) == list(range(100))
        with pytest.raises(ValueError, match="buffersize"):
            executor.map(abs, [1], buffersize=0)
        with pytest.raises(TypeError, match="buffersize"):
            executor.map(abs, [1], buffersize=1.5)


def test_code_written_for_the_executor_interface_runs_on_both(client, process_pool):
    words = ["a", "bb", "ccc", "dddd", "eeeee"]
    with client.executor() as executor:
        assert word_lengths(executor, words) == word_lengths(process_pool, words) == [1, 2, 3, 4, 5]


def test_task_options_apply_to_every_task(client):
    with client.executor(timeout_seconds=0.5) as executor:
        with pytest.raises(Exception) as raised:
            executor.submit(sleep_then, 5.0, "late").result(timeout=60)
        assert type(raised.value).__name__ == "TaskTimeoutError"
        assert executor.submit(abs, -1).result(timeout=60) == 1
    with pytest.raises(ValueError, match="negative"):
        client.executor(retries=-1)
    with pytest.raises(TypeError, match="Client or a scheduler address"):
        ScalerExecutor(42)  # type: ignore[arg-type]


def test_client_map_of_single_values_names_the_executor(client):
    with pytest.raises(TypeError, match=r"client\.executor\(\)\.map"):
        client.map(abs, [-1, -2])
    assert client.map(abs, [(-1,), (-2,)]) == [1, 2]  # the tuple form stays
    assert list(client.executor().map(abs, [-1, -2])) == [1, 2]
