"""scaler.compat.ray: scripts shaped like Ray's getting-started pages, with only the import changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import scaler.compat.ray as ray
from scaler.compat.ray import exceptions


@ray.remote
def square(x):
    return x * x


@ray.remote
def my_function():
    return 1


@ray.remote
def function_with_an_argument(value):
    return value + 1


@ray.remote
def slow_function(seconds=0.5, value=1):
    time.sleep(seconds)
    return value


@ray.remote(num_returns=3)
def return_multiple():
    return 0, 1, 2


@ray.remote
def explode(text):
    raise ArithmeticError(text)


@ray.remote
def total_of(refs):
    return sum(ray.get(refs))  # refs inside a list arrive resolved: get works in the task


@ray.remote
def array_sum(array):
    return float(array.sum())


@ray.remote
def fibonacci(n):
    """Nested tasks: a task submits tasks and waits for them, through the same API."""
    if n < 2:
        return n
    return sum(ray.get([fibonacci.remote(n - 1), fibonacci.remote(n - 2)]))


@ray.remote
def chain_in_a_task():
    """Inside a task: a `.remote()` call whose ref argument still runs (sent once it ends), then wait and get."""
    first = function_with_an_argument.remote(1)
    second = function_with_an_argument.remote(first)
    ready, _ = ray.wait([second], timeout=60)
    return ray.get(ready, timeout=60) + [ray.get(first)]


def fail_until(path, failures):
    """Fails the first ``failures`` times it runs (counted in a file), then returns the attempt number."""
    with open(path, "a+") as file:
        file.write("x")
        file.seek(0)
        attempt = len(file.read())
    if attempt <= failures:
        raise ConnectionError(f"attempt {attempt} fails")
    return attempt


@pytest.fixture
def connected(cluster):
    ray.init(cluster.get_address())
    try:
        yield
    finally:
        ray.shutdown()


QUICKSTART = """
import scaler.compat.ray as ray   # was: import ray
ray.init(num_cpus=2)

@ray.remote
def f(x):
    return x * x

futures = [f.remote(i) for i in range(4)]
print(ray.get(futures))  # [0, 1, 4, 9]
ray.shutdown()
"""


def test_the_quickstart_script_runs_with_only_the_import_changed(tmp_path):
    """ray.init() with no address starts a local cluster, as Ray does; shutdown stops it."""
    script = tmp_path / "quickstart.py"
    script.write_text(textwrap.dedent(QUICKSTART))
    environment = {key: value for key, value in os.environ.items() if key != "SCALER_SCHEDULER_ADDRESS"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=environment, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[0, 1, 4, 9]"


def test_tasks_refs_as_arguments_and_put(connected):
    assert ray.is_initialized()
    assert ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
    obj_ref = my_function.remote()
    assert ray.get(obj_ref) == 1
    assert ray.get(function_with_an_argument.remote(obj_ref)) == 2
    array = np.arange(1_000_000, dtype=np.float64)  # 8 MB: stored once, read by each task from storage
    array_ref = ray.put(array)
    assert ray.get([array_sum.remote(array_ref) for _ in range(3)]) == [float(array.sum())] * 3
    assert ray.get(array_ref) is array
    assert ray.get(total_of.remote([square.remote(2), square.remote(3), ray.put(10)])) == 23


def test_a_ref_to_a_running_task_is_a_dependency_not_a_wait(connected):
    upstream = slow_function.remote(1.0, 41)
    downstream = function_with_an_argument.remote(upstream)  # returns at once: sent when upstream ends
    ready, not_ready = ray.wait([downstream], timeout=0)
    assert (ready, not_ready) == ([], [downstream])
    assert ray.get(downstream, timeout=60) == 42
    failed = function_with_an_argument.remote(explode.remote("upstream failed"))
    with pytest.raises(ArithmeticError, match="upstream failed"):
        ray.get(failed, timeout=60)


def test_wait_keeps_the_given_order(connected):
    object_refs = [slow_function.remote(0.8, "slow"), slow_function.remote(0.0, "fast")]
    ready_refs, remaining_refs = ray.wait(object_refs, num_returns=1, timeout=None)
    assert ready_refs == [object_refs[1]] and remaining_refs == [object_refs[0]]
    ready_refs, remaining_refs = ray.wait(object_refs, num_returns=2, timeout=60)
    assert ready_refs == object_refs and remaining_refs == []
    with pytest.raises(ValueError, match="num_returns"):
        ray.wait(object_refs, num_returns=3)
    with pytest.raises(ValueError, match="unique"):
        ray.wait([object_refs[0], object_refs[0]])


def test_num_returns(connected):
    a, b, c = return_multiple.remote()
    assert ray.get([a, b, c]) == [0, 1, 2]
    assert ray.get(b) == 1
    first, second = square.options(num_returns=2).remote(3)
    with pytest.raises(ValueError, match="returned a int, but num_returns=2"):
        ray.get(first)


def test_exceptions_timeouts_and_cancel(connected):
    with pytest.raises(ArithmeticError, match="boom") as raised:
        ray.get(explode.remote("boom"))
    assert "explode" in str(raised.value.__cause__)  # the worker's traceback
    slow = slow_function.remote(30.0)
    with pytest.raises(exceptions.GetTimeoutError):
        ray.get(slow, timeout=0.3)
    assert issubclass(exceptions.GetTimeoutError, TimeoutError)
    ray.cancel(slow)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(slow, timeout=60)


def test_max_retries_with_retry_exceptions(connected, tmp_path):
    retried = ray.remote(max_retries=2, retry_exceptions=True)(fail_until)
    assert ray.get(retried.remote(str(tmp_path / "a"), 2), timeout=60) == 3
    not_retried = ray.remote(max_retries=2)(fail_until)  # Ray's default: exceptions are not retried
    with pytest.raises(ConnectionError, match="attempt 1 fails"):
        ray.get(not_retried.remote(str(tmp_path / "b"), 2), timeout=60)
    with pytest.raises(ConnectionError, match="attempt 2 fails"):  # one retry is not enough for two failures
        ray.get(retried.options(max_retries=1).remote(str(tmp_path / "c"), 2), timeout=60)


def test_nested_tasks(connected):
    assert ray.get(fibonacci.remote(6), timeout=120) == 8


@pytest.mark.parametrize("queue_size", [1, 2])
def test_get_and_wait_inside_tasks_hold_no_room_on_one_worker(queue_size):
    """A task that waits in `get` or `wait` lets its worker run the tasks it waits for, as the client's own waits
    do: on one worker, with room for one or two tasks, nested work ends."""
    from scaler import SchedulerClusterCombo

    with SchedulerClusterCombo(n_workers=1, per_worker_queue_size=queue_size, logging_level="WARNING") as combo:
        ray.init(combo.get_address())
        try:
            assert ray.get(chain_in_a_task.remote(), timeout=120) == [3, 2]
            assert ray.get(fibonacci.remote(8), timeout=120) == 21
        finally:
            ray.shutdown()


def test_what_is_refused_is_refused_clearly(cluster):
    with pytest.raises(TypeError, match="not actors"):

        @ray.remote
        class Counter:
            def __init__(self):
                self.n = 0

    with pytest.raises(TypeError, match=r"call square\.remote\(\)"):
        square(2)
    with pytest.raises(TypeError, match="resources"):
        ray.remote(resources={"gpu": 1})(fail_until)
    with pytest.raises(TypeError, match="retry_exceptions"):
        ray.remote(max_retries=1, retry_exceptions=[ValueError])(fail_until)
    with pytest.raises(ValueError, match="Ray address"):
        ray.init("ray://127.0.0.1:10001")
    with pytest.raises(TypeError, match="runtime_env"):
        ray.init(cluster.get_address(), runtime_env={"pip": ["x"]})
    ray.init(cluster.get_address(), include_dashboard=False)
    try:
        with pytest.raises(RuntimeError, match="already"):
            ray.init(cluster.get_address())
        ray.init(cluster.get_address(), ignore_reinit_error=True)
        with pytest.raises(ValueError, match="ObjectRefs"):
            ray.get([1, 2])
    finally:
        ray.shutdown()
    assert not ray.is_initialized()
