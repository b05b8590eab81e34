"""`wait_in_task` with a task context whose wait hook sleeps on an event that the wake sets (standing for a
processor's hub): it returns once enough futures ended, or at the timeout, and does nothing outside a task."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Iterator, List

import pytest

from scaler.client.task_waits import wait_in_task
from scaler.protocol.task_context import TaskContext, set_task_context

BOUND_SECONDS = 30.0


class Hub:
    """A wait hook: sleeps until woken and ``done()``, or the timeout; counts the waits it was handed."""

    def __init__(self) -> None:
        self.waits = 0
        self.over = False  # the last wait ended because done() (not at its timeout)
        self.meanwhile: List[concurrent.futures.Future] = []  # ended by another thread once the wait began

    def wait(self, done, timeout, notify) -> None:
        self.waits += 1
        ending = threading.Thread(target=lambda: [future.set_result(None) for future in self.meanwhile])
        ending.start()
        woken = threading.Event()
        notify(woken.set)
        while not done():
            if not woken.wait(BOUND_SECONDS if timeout is None else timeout):
                self.over = False
                return
            woken.clear()
            notify(woken.set)
        ending.join(BOUND_SECONDS)
        self.over = True


@pytest.fixture
def hub() -> Iterator[Hub]:
    hub = Hub()
    previous = set_task_context(TaskContext("tcp://127.0.0.1:1", hub.wait))
    try:
        yield hub
    finally:
        set_task_context(previous)


def test_it_returns_once_count_of_the_futures_ended(hub: Hub):
    futures = [concurrent.futures.Future() for _ in range(4)]
    futures[0].set_result(None)  # ended before the wait: counts
    hub.meanwhile = futures[2:]
    assert wait_in_task(futures, 3, None) is None
    assert hub.waits == 1 and hub.over and not futures[1].done()


def test_it_returns_what_is_left_of_the_timeout_when_too_few_ended(hub: Hub):
    futures = [concurrent.futures.Future() for _ in range(2)]
    futures[0].set_result(None)
    assert wait_in_task(futures, 2, 0.05) == 0.0
    assert hub.waits == 1 and not hub.over


def test_nothing_is_waited_for_when_enough_ended_or_outside_a_task(hub: Hub):
    ended: concurrent.futures.Future = concurrent.futures.Future()
    ended.set_result(None)
    assert wait_in_task([ended, concurrent.futures.Future()], 1, 5.0) == 5.0
    assert hub.waits == 0
    set_task_context(None)
    assert wait_in_task([concurrent.futures.Future()], 1, 5.0) == 5.0
