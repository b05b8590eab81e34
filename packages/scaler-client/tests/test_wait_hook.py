"""`scaler.protocol.wait_hook.set_wait_hook`: what the client's blocking waits hand to the hook (a Scaler worker runs
other tasks there while a task waits on the tasks it submitted)."""

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
from scaler.client.future import wait_with_hook
from scaler.protocol.messages import PayloadKind, TaskBatch, TaskResult, TaskResultBatch, TaskStatus
from scaler.protocol.wait_hook import set_wait_hook


class RecordingHook:
    """Records each call; resolves the waited-for futures itself, as the tasks a worker runs meanwhile would."""

    def __init__(self, resolve: Callable[[], None] = lambda: None) -> None:
        self.calls: List[Tuple[bool, Optional[float]]] = []
        self._resolve = resolve

    def __call__(self, done: Callable[[], bool], timeout: Optional[float]) -> None:
        self.calls.append((done(), timeout))
        self._resolve()
        assert done()


@pytest.fixture
def hooked() -> Iterator[Callable[[Any], None]]:
    def install(hook: Any) -> None:
        set_wait_hook(hook)

    try:
        yield install
    finally:
        set_wait_hook(None)


def future() -> ScalerFuture:
    return ScalerFuture(b"\x01" * 16, None, None, False)


def test_no_hook_by_default_and_set_returns_the_previous_one():
    assert set_wait_hook(None) is None
    hook = RecordingHook()
    assert set_wait_hook(hook) is None
    assert set_wait_hook(None) is hook


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
    hooked(lambda done, timeout: None)  # a hook that declines (e.g. not the task's own thread)
    waited = future()
    threading.Timer(0.05, waited._set_value, ("late",)).start()
    assert waited.result(timeout=30) == "late"
    with pytest.raises(concurrent.futures.TimeoutError):
        future().result(timeout=0.01)


def test_wait_with_hook_returns_the_rest_of_the_timeout(hooked):
    hooked(lambda done, timeout: None)
    left = wait_with_hook(lambda: False, 30)
    assert left is not None and 0 < left <= 30
    assert wait_with_hook(lambda: False, None) is None


def test_map_waits_through_the_hook(hooked, scheduler: FakeScheduler, client: Client):
    """The hook runs while the map's tasks are pending (here it answers them, as nested tasks would run)."""
    calls: List[Optional[float]] = []

    def hook(done: Callable[[], bool], timeout: Optional[float]) -> None:
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
