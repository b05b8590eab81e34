"""Nested tasks (tasks that submit tasks and wait for them) never deadlock, at any size (issue 11).

The sizes are examples of the rule, so each runs also at the next size up and at the smallest settings: one
worker, a worker queue of 1 or 2. Each of these hung on the version before the rule (a waiting task held a
slot of its worker): the `result` timeouts turn a hang into a failure. The rule itself is tested on the
cores in `test_nested_cores.py`; how it works is in docs/scheduling.md.
"""

from __future__ import annotations

import os
from typing import Iterator, Tuple

import pytest

from scaler import Client, SchedulerClusterCombo, progress

RESULT_SECONDS = 240  # fib(21) takes about 15 s on one worker of a busy 2-core machine


def fibonacci(client: Client, n: int) -> int:
    if n < 2:
        return n
    a = client.submit(fibonacci, client, n - 1)
    b = client.submit(fibonacci, client, n - 2)
    return a.result() + b.result()


def nested_map(client: Client, n: int) -> int:
    return sum(client.map(inner_map, [(client, i) for i in range(n)]))


def inner_map(client: Client, i: int) -> int:
    return sum(client.map(square, [(j,) for j in range(i)]))


def square(value: int) -> int:
    return value * value


def chain(depth: int) -> Tuple[int, int]:
    """A recursion: each level makes a Client inside the task (it finds the scheduler that runs it), submits
    the next level and waits for it. The deepest level reports the OS threads of its processor."""
    if depth == 0:
        return 0, len(os.listdir("/proc/self/task"))
    with Client() as client:
        level, threads = client.submit(chain, depth - 1).result()
    return level + 1, threads


def waits_on_groups(depth: int) -> int:
    """Each level waits on its children as a group: through an executor's shutdown, and through
    `scaler.progress`. Returns the leaves: 4 ** depth."""
    if depth == 0:
        return 1
    with Client() as client:
        with client.executor() as executor:
            by_executor = [executor.submit(waits_on_groups, depth - 1) for _ in range(2)]
        assert all(future.done() for future in by_executor)  # the executor's shutdown waited for them
        by_progress = progress([client.submit(waits_on_groups, depth - 1) for _ in range(2)], style="text")
        return sum(future.result() for future in by_executor + by_progress)


def fibonacci_expected(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def run(address: str, function, *args):
    with Client(address=address, timeout_seconds=RESULT_SECONDS) as client:
        if function is fibonacci or function is nested_map:
            args = (client, *args)
        return client.submit(function, *args).result(timeout=RESULT_SECONDS)


@pytest.fixture(scope="module")
def one_worker() -> Iterator[str]:
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING") as combo:
        yield combo.get_address()


@pytest.mark.parametrize("n", [20, 21])
def test_fibonacci_on_one_worker(one_worker, n):
    assert run(one_worker, fibonacci, n) == fibonacci_expected(n)


def test_a_recursion_of_depth_1000_on_one_worker_keeps_a_fixed_number_of_threads(one_worker):
    """Every Client made inside the processor shares one connection: as many threads 1,000 levels deep as 1."""
    level, threads = run(one_worker, chain, 1)
    assert level == 1
    assert run(one_worker, chain, 1000) == (1000, threads)


def test_a_nested_map_of_maps_on_one_worker(one_worker):
    assert run(one_worker, nested_map, 8) == sum(sum(j * j for j in range(i)) for i in range(8))


@pytest.mark.parametrize("queue_size, n", [(1, 18), (2, 20)])
def test_fibonacci_on_one_worker_with_a_queue_of_one_or_two(queue_size, n):
    with SchedulerClusterCombo(n_workers=1, per_worker_queue_size=queue_size, logging_level="WARNING") as combo:
        assert run(combo.get_address(), fibonacci, n) == fibonacci_expected(n)
        assert run(combo.get_address(), nested_map, 6) == sum(sum(j * j for j in range(i)) for i in range(6))


def test_waits_on_groups_of_futures_inside_tasks_on_one_worker_with_a_queue_of_one():
    """`Executor.shutdown` and `scaler.progress` inside a task hold no room while they wait, as `result` does."""
    with SchedulerClusterCombo(n_workers=1, per_worker_queue_size=1, logging_level="WARNING") as combo:
        assert run(combo.get_address(), waits_on_groups, 3) == 4**3
        assert run(combo.get_address(), waits_on_groups, 4) == 4**4


def test_fibonacci_on_two_workers_and_a_nested_map_of_maps():
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as combo:
        assert run(combo.get_address(), fibonacci, 18) == fibonacci_expected(18)
        assert run(combo.get_address(), nested_map, 8) == sum(sum(j * j for j in range(i)) for i in range(8))
