"""`ScalerFuture` without a cluster: a pending future is small (no lock, no Condition of its own), and it still
behaves as a `concurrent.futures.Future` when other threads resolve it while this one waits, installs waiters
(`concurrent.futures.wait`, `as_completed`), adds callbacks or cancels. Also `FutureBatch`, the one condition a
`map` waits on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import pickle
import random
import threading
import tracemalloc
from typing import Any, Callable, List

import pytest

from scaler.client import ScalerFuture
from scaler.client.future import FutureBatch
from scaler.protocol.messages import TaskResult, TaskStatus

DEADLINE = 30.0  # generous bound on every wait: a hang fails the test instead of blocking the suite


def pending(batch: Any = None, serializer: Any = None) -> ScalerFuture:
    return ScalerFuture(b"\x01" * 16, None, serializer, False, 1.0, batch)


def in_threads(count: int, target: Callable[[int], None]) -> List[threading.Thread]:
    threads = [threading.Thread(target=target, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    return threads


def join_all(threads: List[threading.Thread]) -> None:
    for thread in threads:
        thread.join(DEADLINE)
        assert not thread.is_alive(), "a thread is stuck"


# --- size and laziness ------------------------------------------------------------------------------------------


def test_a_pending_future_owns_no_condition_no_lock_and_no_lists():
    future = pending()
    assert future._own_condition is None and future._waiter_list is None and future._callback_list is None
    assert not future.done() and not future.running() and not future.cancelled()
    repr(future)
    assert future._own_condition is None  # reading its state does not create one either
    assert "pending" in repr(future)


def test_memory_per_pending_future_is_bounded():
    # A concurrent.futures.Future with its Condition weighs about 1.7 KB; the bound leaves room for
    # Python versions, not for a Condition, a lock or a list per future.
    task_ids = [bytes(16) + i.to_bytes(4, "big") for i in range(20_000)]
    futures: List[ScalerFuture] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        futures.extend(ScalerFuture(task_id, None, None, False, 1.0) for task_id in task_ids)
        per_future = (tracemalloc.get_traced_memory()[0] - before) / len(futures)
    finally:
        tracemalloc.stop()
    assert per_future <= 320, f"{per_future:.0f} bytes per pending future"


def test_waiting_creates_the_condition_of_that_future_only():
    waited, other = pending(), pending()
    threading.Timer(0.01, waited._set_value, (1,)).start()
    assert waited.result(timeout=DEADLINE) == 1
    assert waited._own_condition is not None and other._own_condition is None


# --- one future, other threads -----------------------------------------------------------------------------------


def test_result_set_from_another_thread_while_waiting():
    futures = [pending() for _ in range(200)]
    start = threading.Barrier(2)

    def resolve(_: int) -> None:
        start.wait(DEADLINE)
        for index, future in enumerate(futures):
            future._set_value(index)

    threads = in_threads(1, resolve)
    start.wait(DEADLINE)
    assert [future.result(timeout=DEADLINE) for future in futures] == list(range(200))
    join_all(threads)


def test_many_threads_wait_on_one_future_and_all_wake():
    future = pending()
    results: List[Any] = []
    waiting = threading.Barrier(9)

    def wait(_: int) -> None:
        waiting.wait(DEADLINE)
        results.append(future.result(timeout=DEADLINE))

    threads = in_threads(8, wait)
    waiting.wait(DEADLINE)
    future._set_value("v")
    join_all(threads)
    assert results == ["v"] * 8


def test_exception_and_timeout():
    failed = pending()
    failed._set_error(ValueError("bad"))
    assert isinstance(failed.exception(), ValueError)
    with pytest.raises(ValueError, match="bad"):
        failed.result()
    with pytest.raises(concurrent.futures.TimeoutError):
        pending().result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        pending().exception(timeout=0)


def test_set_twice_is_refused_like_any_future():
    future = pending()
    future.set_result(1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(2)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_exception(ValueError())
    future._set_error(ValueError())  # the agent's side ignores a second outcome
    assert future.result() == 1


def test_a_result_is_deserialized_once_and_the_same_object_is_returned_to_every_thread():
    calls = []

    class Counting:
        def deserialize(self, payload: bytes) -> Any:
            calls.append(payload)
            return pickle.loads(payload)

    futures = [pending(serializer=Counting()) for _ in range(50)]
    for future in futures:
        future._set_task_result(TaskResult(task_id=b"", status=TaskStatus.SUCCESS, payload=pickle.dumps([1, 2])))
    seen: List[List[Any]] = [[] for _ in futures]

    def read(_: int) -> None:
        for index, future in enumerate(futures):
            seen[index].append(future.result(timeout=DEADLINE))

    join_all(in_threads(4, read))
    for values in seen:
        assert values[0] == [1, 2] and all(value is values[0] for value in values)
    assert len(calls) >= 50  # two threads may both deserialize; the first to finish wins


def test_deserialization_does_not_hold_the_lock_other_futures_need():
    other = pending()

    class WaitsForAnotherFuture:
        def deserialize(self, payload: bytes) -> Any:
            # another thread must be able to resolve `other` meanwhile (it would deadlock under a held lock)
            resolver = threading.Thread(target=other._set_value, args=("other",))
            resolver.start()
            resolver.join(DEADLINE)
            return other.result(timeout=DEADLINE)

    future = pending(serializer=WaitsForAnotherFuture())
    future._set_task_result(TaskResult(task_id=b"", status=TaskStatus.SUCCESS, payload=b"x"))
    assert future.result(timeout=DEADLINE) == "other"


def test_a_failed_deserialization_is_the_exception_of_the_future():
    class Broken:
        def deserialize(self, payload: bytes) -> Any:
            raise EOFError("truncated")

    future = pending(serializer=Broken())
    future._set_task_result(TaskResult(task_id=b"", status=TaskStatus.SUCCESS, payload=b"x"))
    assert isinstance(future.exception(), EOFError)
    with pytest.raises(EOFError):
        future.result()


# --- callbacks ------------------------------------------------------------------------------------------------------


def test_callbacks_added_before_and_after_completion_run_once_each():
    future = pending()
    calls: List[Any] = []
    future.add_done_callback(lambda f: calls.append(("before", f)))
    future._set_value(3)
    future.add_done_callback(lambda f: calls.append(("after", f)))
    assert calls == [("before", future), ("after", future)]


def test_callbacks_racing_with_completion_run_exactly_once():
    for _ in range(50):
        future = pending()
        counts = [0] * 200
        start = threading.Barrier(2)

        def add(
            _: int, future: ScalerFuture = future, counts: List[int] = counts, start: threading.Barrier = start
        ) -> None:
            start.wait(DEADLINE)
            for index in range(len(counts)):
                future.add_done_callback(lambda f, index=index: counts.__setitem__(index, counts[index] + 1))

        threads = in_threads(1, add)
        start.wait(DEADLINE)
        future._set_value(None)
        join_all(threads)
        assert counts == [1] * 200


def test_a_failing_callback_is_logged_and_the_others_still_run(caplog):
    future = pending()
    calls: List[int] = []

    def broken(_: Any) -> None:
        raise RuntimeError("callback bug")

    future.add_done_callback(broken)
    future.add_done_callback(lambda f: calls.append(1))
    future._set_value(None)
    assert calls == [1]
    assert "exception calling callback" in caplog.text


# --- the concurrent.futures module functions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "return_when", [concurrent.futures.ALL_COMPLETED, concurrent.futures.FIRST_COMPLETED]
)  # fmt: skip
def test_wait_across_many_futures_resolved_by_another_thread(return_when):
    futures = [pending() for _ in range(500)]
    order = list(futures)
    random.shuffle(order)
    futures[0]._set_value("already")  # some are done before the wait, some during it

    def resolve(_: int) -> None:
        for index, future in enumerate(order):
            future._set_value(index)

    threads = in_threads(1, resolve)
    done, not_done = concurrent.futures.wait(futures, timeout=DEADLINE, return_when=return_when)
    join_all(threads)
    assert done and done.isdisjoint(not_done) and len(done) + len(not_done) == 500
    if return_when == concurrent.futures.ALL_COMPLETED:
        assert not not_done
    assert all(future._waiter_list == [] for future in futures if future._waiter_list is not None)
    assert all(future._own_condition is None for future in futures)  # wait() made no Condition per future


def test_wait_first_exception_wakes_on_a_failure_among_pending_futures():
    futures = [pending() for _ in range(100)]
    threading.Timer(0.01, futures[57]._set_error, (KeyError("k"),)).start()
    done, not_done = concurrent.futures.wait(
        futures, timeout=DEADLINE, return_when=concurrent.futures.FIRST_EXCEPTION
    )  # fmt: skip
    assert futures[57] in done and len(not_done) == 99


def test_wait_returns_a_future_cancelled_while_it_waits():
    # The agent is the executor: a confirmed cancel notifies the waiters (a plain Future.cancel() would not)
    futures = [pending() for _ in range(10)]
    threading.Timer(0.01, lambda: [future._set_cancelled() for future in futures]).start()
    done, not_done = concurrent.futures.wait(futures, timeout=DEADLINE)
    assert not not_done and all(future.cancelled() for future in done)


def test_as_completed_yields_each_future_once_in_completion_order():
    futures = [pending() for _ in range(300)]
    order = list(futures)
    random.shuffle(order)
    order[0]._set_value(0)

    def resolve(_: int) -> None:
        for index, future in enumerate(order[1:], 1):
            if index % 7 == 0:
                future._set_cancelled()
            elif index % 11 == 0:
                future._set_error(ValueError(index))
            else:
                future._set_value(index)

    threads = in_threads(1, resolve)
    yielded = list(concurrent.futures.as_completed(futures, timeout=DEADLINE))
    join_all(threads)
    assert len(yielded) == 300 and set(yielded) == set(futures)
    assert all(future._waiter_list == [] for future in futures if future._waiter_list is not None)


def test_as_completed_times_out_on_a_future_nobody_resolves():
    with pytest.raises(concurrent.futures.TimeoutError):
        list(concurrent.futures.as_completed([pending(), pending()], timeout=0.05))


def test_asyncio_awaits_a_future_resolved_by_another_thread():
    future = pending()

    async def main() -> Any:
        threading.Timer(0.01, future._set_value, ("async",)).start()
        return await asyncio.wait_for(future, DEADLINE)

    assert asyncio.run(main()) == "async"


# --- cancel ---------------------------------------------------------------------------------------------------------


def test_cancel_wakes_a_waiting_result_with_cancelled_error():
    future = pending()
    threading.Timer(0.01, future._set_cancelled).start()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=DEADLINE)
    with pytest.raises(concurrent.futures.CancelledError):
        future.exception()
    assert future.cancelled() and future.done()


def test_cancel_without_a_client_and_after_completion():
    future = pending()
    calls: List[Any] = []
    future.add_done_callback(calls.append)
    assert future.cancel() and future.cancel()  # cancelled stays cancelled
    assert calls == [future]
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(1)
    finished = pending()
    finished._set_value(1)
    assert not finished.cancel() and not finished.cancelled()


def test_cancel_racing_with_a_result_ends_the_future_once():
    for _ in range(200):
        future = pending()
        calls: List[Any] = []
        future.add_done_callback(calls.append)
        start = threading.Barrier(2)

        def finish(_: int, future: ScalerFuture = future, start: threading.Barrier = start) -> None:
            start.wait(DEADLINE)
            future._set_value("won")

        threads = in_threads(1, finish)
        start.wait(DEADLINE)
        cancelled = future._set_cancelled()
        join_all(threads)
        assert len(calls) == 1
        assert cancelled == future.cancelled()
        assert future.cancelled() or future.result() == "won"


def test_set_running_or_notify_cancel_follows_the_executor_protocol():
    future = pending()
    assert future.set_running_or_notify_cancel() and future.running() and not future.done()
    assert not future.cancel()
    future.set_result(1)
    with pytest.raises(RuntimeError):
        future.set_running_or_notify_cancel()


# --- FutureBatch: one condition for a whole map -----------------------------------------------------------------


def test_batch_wakes_once_every_future_ended():
    batch = FutureBatch()
    futures = [pending(batch) for _ in range(1000)]
    futures[0]._set_value(0)  # ends before the batch knows its size

    def resolve(_: int) -> None:
        for index, future in enumerate(futures[1:], 1):
            future._set_value(index)

    threads = in_threads(1, resolve)
    batch.close(len(futures))
    assert batch.wait(DEADLINE) and not batch.failed
    join_all(threads)
    assert [future.result() for future in futures] == list(range(1000))
    assert all(future._own_condition is None for future in futures)


def test_batch_wakes_on_the_first_failure_or_cancel():
    for end in (lambda f: f._set_error(ValueError()), lambda f: f._set_cancelled()):
        batch = FutureBatch()
        futures = [pending(batch) for _ in range(10)]
        batch.close(10)
        assert not batch.finished() and not batch.wait(0.01)
        threading.Timer(0.01, end, (futures[6],)).start()
        assert batch.wait(DEADLINE) and batch.failed


def test_batch_closed_after_all_ended_is_finished_at_once():
    batch = FutureBatch()
    futures = [pending(batch) for _ in range(3)]
    for future in futures:
        future._set_value(None)
    assert not batch.finished()  # its size is unknown until close()
    batch.close(3)
    assert batch.finished() and batch.wait(0)
    empty = FutureBatch()
    empty.close(0)
    assert empty.finished()
