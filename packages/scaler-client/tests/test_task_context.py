"""`scaler.protocol.task_context`: what the client's blocking waits hand to the wait hook of the installed context (a
Scaler worker runs other tasks there while a task waits on the tasks it submitted), and how it is woken."""

from __future__ import annotations

import concurrent.futures
import math
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

import cloudpickle
import pytest
from client_fakes import FakeScheduler, wait_until

from scaler import Client
from scaler.client import ScalerFuture
from scaler.client.future import FutureBatch
from scaler.protocol.messages import PayloadKind, TaskBatch, TaskResult, TaskResultBatch, TaskStatus
from scaler.protocol.task_context import TaskContext, set_task_context, task_context, wait_with_hook


class RecordingHook:
    """Records each call; resolves the waited-for futures itself, as the tasks a worker runs meanwhile would."""

    def __init__(self, resolve: Callable[[], None] = lambda: None) -> None:
        self.calls: List[Tuple[bool, Optional[float]]] = []
        self._resolve = resolve

    def __call__(self, done: Callable[[], bool], timeout: Optional[float], notify: Callable[[Any], None]) -> None:
        self.calls.append((done(), timeout))
        woken: List[bool] = []
        notify(lambda: woken.append(True))
        self._resolve()
        assert done() and woken == [True]  # the waited-on object woke the hook once it was done


@pytest.fixture
def hooked() -> Iterator[Callable[[Any], None]]:
    def install(hook: Any) -> None:
        set_task_context(TaskContext("tcp://127.0.0.1:1", hook))

    try:
        yield install
    finally:
        set_task_context(None)


def future() -> ScalerFuture:
    return ScalerFuture(b"\x01" * 16, None, None, False)


def test_no_context_by_default_and_set_returns_the_previous_one():
    assert task_context() is None
    context = TaskContext("tcp://127.0.0.1:1", RecordingHook())
    assert set_task_context(context) is None
    assert task_context() is context
    assert set_task_context(None) is context


def test_a_waiter_registered_on_a_done_future_or_batch_is_woken_at_once():
    woken: List[str] = []
    done = future()
    done._set_value(1)
    done.notify(lambda: woken.append("future"))
    batch = FutureBatch()
    batch.close(0)
    batch.notify(lambda: woken.append("batch"))
    assert woken == ["future", "batch"]


def test_every_waiter_of_a_batch_is_woken_once_when_it_finishes():
    woken: List[str] = []
    batch = FutureBatch()
    members = [ScalerFuture(bytes([n]) * 16, None, None, False, batch=batch) for n in range(2)]
    batch.close(2)
    batch.notify(lambda: woken.append("a"))
    batch.notify(lambda: woken.append("b"))
    members[0]._set_value(0)
    assert woken == []
    members[1]._set_value(1)
    assert woken == ["a", "b"]
    members[1]._set_value(2)  # a second outcome is ignored: nobody is woken again
    assert woken == ["a", "b"]


def test_result_lets_the_hook_wait_then_returns(hooked):
    waited = future()
    hook = RecordingHook(lambda: waited._set_value(42))
    hooked(hook)
    assert waited.result() == 42
    assert hook.calls == [(False, None)]
    assert waited.result() == 42 and len(hook.calls) == 1  # done already: the hook is not called


def test_exception_and_a_timeout_go_through_the_hook(hooked):
    waited = future()
    hook = RecordingHook(lambda: waited._set_error(ValueError("bad")))
    hooked(hook)
    assert isinstance(waited.exception(timeout=30), ValueError)
    [(was_done, timeout)] = hook.calls
    assert not was_done and timeout == 30


def test_what_the_hook_leaves_of_the_timeout_is_waited_plainly(hooked):
    hooked(lambda done, timeout, notify: None)  # a hook that declines (e.g. not the task's own thread)
    waited = future()
    threading.Timer(0.05, waited._set_value, ("late",)).start()
    assert waited.result(timeout=30) == "late"
    with pytest.raises(concurrent.futures.TimeoutError):
        future().result(timeout=0.01)


def test_wait_with_hook_returns_the_rest_of_the_timeout(hooked):
    hooked(lambda done, timeout, notify: None)
    left = wait_with_hook(lambda: False, 30, lambda wake: None)
    assert left is not None and 0 < left <= 30
    assert wait_with_hook(lambda: False, None, lambda wake: None) is None


def test_map_waits_through_the_hook(hooked, scheduler: FakeScheduler, client: Client):
    """The hook runs while the map's tasks are pending (here it answers them, as nested tasks would run)."""
    calls: List[Optional[float]] = []

    def hook(done: Callable[[], bool], timeout: Optional[float], notify: Callable[[Any], None]) -> None:
        calls.append(timeout)
        tasks = wait_until(lambda: [t for b in scheduler.messages(TaskBatch) for t in b.tasks] or None, what="tasks")
        results = [
            TaskResult(t.task_id, 1, TaskStatus.SUCCESS, PayloadKind.INLINE, cloudpickle.dumps(n * 10))
            for n, t in enumerate(tasks)
        ]
        scheduler.send(client.client_id, TaskResultBatch(results))
        wait_until(done, what="the map's futures")

    hooked(hook)
    assert client.map(math.sqrt, [(4,), (9,)]) == [0, 10]
    assert calls == [None]


@pytest.fixture
def client(scheduler: FakeScheduler) -> Iterator[Client]:
    with Client(scheduler.address, timeout_seconds=10, heartbeat_interval_seconds=0.5) as connected:
        yield connected


def test_a_waiter_that_waits_again_after_a_timeout_is_registered_once():
    woken: List[str] = []
    waited = future()

    def wake() -> None:
        woken.append("once")

    for _ in range(3):
        waited.notify(wake)
    waited._set_value(1)
    assert woken == ["once"]
