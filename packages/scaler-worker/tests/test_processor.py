"""A real processor subprocess, driven through its Pipe by the test playing the agent: a task that waits
inside the Scaler client is switched out while other tasks run, and resumes once its wait is over (and, in
process, the hub's wake handshake with the client's agent thread)."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import select
import time
import tracemalloc
from typing import Any, Iterator, List

import cloudpickle
import pytest
import worker_tasks as tasks
from worker_harness import DEADLINE_SECONDS, wait_until

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, deserialize_payload
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.processor_protocol import (
    Drop,
    Dropped,
    FunctionLoaded,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
)


class Agent:
    """The agent's side of one processor's Pipe."""

    def __init__(self) -> None:
        self.link = ProcessorLink.start(0, "tcp://127.0.0.1:1", "W|test|0|000000000000")
        self._numbers = itertools.count(1)
        self._sent_functions: set = set()
        self._unanswered: set = set()
        self.loaded: set = set()

    def close(self) -> None:
        self.link.kill()
        self.link.reap(DEADLINE_SECONDS)

    def send(self, function: Any, *args: Any, profiling: bool = False) -> bytes:
        task_id = next(self._numbers).to_bytes(16, "big")
        function_id = function.__name__.encode().ljust(16, b"_")[:16]
        payload = None
        if function_id not in self._sent_functions:  # as the agent does: once per processor
            payload = cloudpickle.dumps(function)
            self._sent_functions.add(function_id)
        arguments = [("", cloudpickle.dumps(argument), b"") for argument in args]
        task = ProcessorTask(task_id, function_id, payload, b"", None, arguments, profiling)
        if not self.link.send([task]):
            _flushed(self)  # a large task: the processor reads it bit by bit
        self._unanswered.add(task_id)
        return task_id

    def receive(self, timeout: float = DEADLINE_SECONDS) -> Any:
        """The next message, but the names of the functions the processor loaded (kept in ``loaded``)."""
        while True:
            message = self.link.receive(timeout)
            parts = message if type(message) is list else [message]
            self.loaded.update(part for part in parts if isinstance(part, FunctionLoaded))
            parts = [part for part in parts if not isinstance(part, FunctionLoaded)]
            if parts:
                break
        message = parts if type(message) is list and len(parts) > 1 else parts[0]
        if isinstance(message, ProcessorResult):
            self._unanswered.discard(message.task_id)
        return message

    def expect_waiting(self, task_id: bytes, waiting: bool) -> None:
        assert self.receive() == TaskWaiting(task_id, waiting)

    def expect_result(self, task_id: bytes) -> Any:
        result = self.receive()
        assert isinstance(result, ProcessorResult) and result.task_id == task_id, result
        if result.status != m.TaskStatus.SUCCESS:
            error, text = cloudpickle.loads(result.payload)
            raise AssertionError(f"task failed: {error!r}\n{text}")
        return deserialize_payload(DefaultSerializer(), result.payload)  # a large one: frames


@pytest.fixture
def agent() -> Iterator[Agent]:
    processor = Agent()
    try:
        yield processor
    finally:
        processor.close()


def test_a_task_runs_and_answers(agent: Agent):
    task = agent.send(tasks.add, 40, 2)
    assert agent.expect_result(task) == 42
    assert agent.loaded == {FunctionLoaded(b"add".ljust(16, b"_"), "worker_tasks.add")}  # once, with its name
    assert agent.expect_result(agent.send(tasks.add, 1, 2)) == 3
    assert len(agent.loaded) == 1


def test_a_large_argument_and_a_large_result_cross_the_non_blocking_pipe(agent: Agent):
    big = b"x" * (8 << 20)  # far more than a Pipe holds: written and read in many pieces
    assert agent.expect_result(agent.send(tasks.add, big, b"y")) == big + b"y"


def test_a_large_result_exists_once_in_the_agent_as_it_is_read(agent: Agent):
    """Its out-of-band buffer is read straight into memory of its own, not first into the read buffer."""
    size = 32 << 20
    task = agent.send(tasks.add, b"x" * size, b"y")
    tracemalloc.start()
    try:
        result = agent.receive()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(result, ProcessorResult) and result.task_id == task
    assert deserialize_payload(DefaultSerializer(), result.payload) == b"x" * size + b"y"
    assert size < peak < 1.1 * size


def test_an_out_of_band_object_argument_arrives_whole_and_stays_cached(agent: Agent):
    # as the agent sends a large object argument: a PickleBuffer, written after the pickle, not inside it
    value = bytes(range(256)) * (4 << 12)  # 4 MiB
    function_id = tasks.add.__name__.encode().ljust(16, b"_")[:16]
    object_id = b"o" * 16
    first = ProcessorTask(
        b"1" * 16, function_id, cloudpickle.dumps(tasks.add), b"", None,
        [("", pickle.PickleBuffer(cloudpickle.dumps(value)), object_id), ("", cloudpickle.dumps(b"!"), b"")], False,
    )  # fmt: skip
    assert agent.link.send([first]) or _flushed(agent)
    agent._unanswered.add(first.task_id)
    assert agent.expect_result(first.task_id) == value + b"!"
    # the processor keeps it: the next task names the object alone
    second = ProcessorTask(
        b"2" * 16, function_id, None, b"", None, [("", None, object_id), ("", cloudpickle.dumps(b"?"), b"")], False
    )
    agent.link.send([second])
    agent._unanswered.add(second.task_id)
    assert agent.expect_result(second.task_id) == value + b"?"


def _flushed(agent: Agent) -> bool:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not agent.link.flush():
        assert time.monotonic() < deadline, "the processor does not read its pipe"
        select.select([], [agent.link.connection.fileno()], [], 0.1)
    return True


def test_tasks_sent_ahead_run_in_order_and_a_drop_takes_one_out(agent: Agent, tmp_path):
    release = tmp_path / "release"
    first = agent.send(tasks.block, str(tmp_path / "pid"), str(release))
    wait_until(lambda: (tmp_path / "pid").exists(), "the first task runs")  # what follows waits in the pipe
    ahead = [ProcessorTask(n.to_bytes(16, "big"), b"add".ljust(16, b"_"), cloudpickle.dumps(tasks.add), b"", None,
                           [("", cloudpickle.dumps(n), b"")], False) for n in (101, 102, 103)]  # fmt: skip
    agent.link.send(ahead)
    agent.link.send(Drop(ahead[1].task_id))
    release.touch()
    # the processor reads its pipe before it says the first task ended (or beside it, had it run long): the Dropped
    # comes first
    answers: List[Any] = []
    while len(answers) < 4:
        message = agent.receive()
        answers.extend(message if isinstance(message, list) else [message])
    assert [type(a).__name__ for a in answers] == ["Dropped", "ProcessorResult", "ProcessorResult", "ProcessorResult"]
    assert [a.task_id for a in answers] == [ahead[1].task_id, first, ahead[0].task_id, ahead[2].task_id]


def test_a_quick_tasks_result_held_for_company_is_sent_while_the_long_task_after_it_runs(agent: Agent, tmp_path):
    # both tasks in one message, as the agent sends a run of quick tasks ahead: once the quick one ends the processor
    # holds its result for company and starts the long one at once; the result must not wait for that one to end
    function_id = tasks.add.__name__.encode().ljust(16, b"_")[:16]
    quick = ProcessorTask(
        b"q" * 16, function_id, cloudpickle.dumps(tasks.add), b"", None, [("", cloudpickle.dumps(1), b"")], False
    )
    release, pid = tmp_path / "release", tmp_path / "pid"
    long = ProcessorTask(
        b"l" * 16, b"block".ljust(16, b"_"), cloudpickle.dumps(tasks.block), b"", None,
        [("", cloudpickle.dumps(str(pid)), b""), ("", cloudpickle.dumps(str(release)), b"")], False, sent_ahead=True,
    )  # fmt: skip
    agent.link.send([quick, long])
    agent._unanswered.update({quick.task_id, long.task_id})
    try:
        assert agent.expect_result(quick.task_id) == 1  # before the long task is released
        wait_until(pid.exists, "the long task runs")  # it had started (or was about to): its result is not here
    finally:
        release.touch()
    assert agent.expect_result(long.task_id) is None
    agent.link.close()  # the watcher thread it started does not keep it alive
    wait_until(lambda: agent.link.process.exitcode is not None, "the processor to exit")
    assert agent.link.process.exitcode == 0


def test_results_sent_by_the_hub_and_by_the_watcher_arrive_once_each_and_in_order(agent: Agent):
    # runs of quick tasks (their results held) each ended by a task longer than RESULT_HOLD_LIMIT_SECONDS (the
    # watcher thread sends what is held while it runs, as the hub holds and sends on either side of it)
    sent: List[bytes] = []
    loaded: set = set()
    for start in range(0, 600, 50):
        batch = []
        for n in range(start, start + 50):
            function = tasks.sleep if n % 50 == 49 else tasks.add
            function_id = function.__name__.encode().ljust(16, b"_")
            payload = None if function_id in loaded else cloudpickle.dumps(function)
            loaded.add(function_id)
            arguments = [("", cloudpickle.dumps(0.01 if function is tasks.sleep else n), b"")]
            task_id = n.to_bytes(16, "big")
            batch.append(ProcessorTask(task_id, function_id, payload, b"", None, arguments, False, sent_ahead=n > 0))
            sent.append(task_id)
        assert agent.link.send(batch) or _flushed(agent)
    received: List[bytes] = []
    while len(received) < len(sent):
        message = agent.receive()
        for result in message if isinstance(message, list) else [message]:
            assert isinstance(result, ProcessorResult) and result.status == m.TaskStatus.SUCCESS, result
            received.append(result.task_id)
    assert received == sent


def test_a_drop_of_a_task_sent_ahead_behind_a_long_task_is_answered_while_that_task_runs(agent: Agent, tmp_path):
    """The agent takes back what it sent ahead behind a task that may never end: the processor reads its pipe
    beside a task that has run READ_BESIDE_SECONDS, and the tasks it reads there start in their turn."""
    release, pid = tmp_path / "release", tmp_path / "pid"
    long = agent.send(tasks.block, str(pid), str(release), "long")
    wait_until(pid.exists, "the long task runs")
    ahead = [ProcessorTask(n.to_bytes(16, "big"), b"add".ljust(16, b"_"), cloudpickle.dumps(tasks.add), b"", None,
                           [("", cloudpickle.dumps(n), b"")], False, sent_ahead=True) for n in (101, 102)]  # fmt: skip
    agent.link.send(ahead)
    agent.link.send(Drop(ahead[0].task_id))
    try:
        assert agent.receive() == Dropped(ahead[0].task_id)  # the long task still runs: it waits for the release
    finally:
        release.touch()
    assert agent.expect_result(long) == "long"
    assert agent.expect_result(ahead[1].task_id) == 102  # read beside the long task: it runs next


def test_a_drop_that_comes_once_the_task_started_is_not_answered_and_its_result_comes(agent: Agent, tmp_path):
    first_release, second_release = tmp_path / "first", tmp_path / "second"
    first = agent.send(tasks.block, str(tmp_path / "first-pid"), str(first_release))
    second = agent.send(tasks.block, str(tmp_path / "second-pid"), str(second_release))
    wait_until(lambda: (tmp_path / "first-pid").exists(), "the first task runs")
    first_release.touch()
    assert agent.receive().task_id == first  # its result alone: the second task starts
    wait_until(lambda: (tmp_path / "second-pid").exists(), "the second task runs")
    agent.link.send(Drop(second))
    second_release.touch()
    assert agent.receive().task_id == second  # no Dropped: the agent took it for started, and it was


def test_a_drop_read_as_a_task_begins_to_wait_comes_before_it_says_so(agent: Agent, tmp_path):
    release, done = tmp_path / "release", tmp_path / "done"
    parent = agent.send(tasks.block_then_wait_in_client, str(tmp_path / "pid"), str(release), str(done))
    wait_until(lambda: (tmp_path / "pid").exists(), "the first task runs")
    ahead = agent.send(tasks.process_id)
    agent.link.send(Drop(ahead))
    release.touch()  # it waits now: the processor reads its pipe (or did beside it, had it run long), then says so
    answers = agent.receive()
    answers = answers if isinstance(answers, list) else [answers, agent.receive()]
    assert answers == [Dropped(ahead), TaskWaiting(parent, True)]
    done.touch()
    agent.expect_waiting(parent, False)
    assert agent.expect_result(parent) == "released"


def test_a_task_waiting_in_the_client_lets_other_tasks_run_then_resumes(agent: Agent, tmp_path):
    release = str(tmp_path / "release")
    parent = agent.send(tasks.wait_in_client, release)
    agent.expect_waiting(parent, True)
    pid = agent.expect_result(agent.send(tasks.process_id))  # runs while the parent waits
    child = agent.send(tasks.create_file, release)  # what the parent waits for
    assert agent.expect_result(child) == "created"
    agent.expect_waiting(parent, False)  # its wait is over: it runs again
    assert agent.expect_result(parent) == "released"
    assert agent.expect_result(agent.send(tasks.process_id)) == pid  # one process throughout


def test_waits_end_in_any_order_and_each_task_resumes_when_its_own_ends(agent: Agent, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    older = agent.send(tasks.wait_in_client, str(first))
    agent.expect_waiting(older, True)
    newer = agent.send(tasks.wait_in_client, str(second))
    agent.expect_waiting(newer, True)
    first.touch()  # the older wait ends first: no stack keeps it under the newer one
    agent.expect_waiting(older, False)
    assert agent.expect_result(older) == "released"
    second.touch()
    agent.expect_waiting(newer, False)
    assert agent.expect_result(newer) == "released"


def test_a_task_sent_ahead_starts_before_a_waiting_task_resumes(agent: Agent, tmp_path):
    release, unblock = tmp_path / "release", tmp_path / "unblock"
    parent = agent.send(tasks.wait_in_client, str(release))
    agent.expect_waiting(parent, True)
    blocker = agent.send(tasks.block, str(tmp_path / "pid"), str(unblock), "blocked")
    wait_until(lambda: (tmp_path / "pid").exists(), "the blocker runs")
    release.touch()  # the parent's wait ends while the blocker runs: it resumes once the blocker is done
    with pytest.raises(TimeoutError):
        agent.receive(0.3)
    unblock.touch()
    assert agent.expect_result(blocker) == "blocked"
    agent.expect_waiting(parent, False)
    assert agent.expect_result(parent) == "released"


def test_a_wait_with_a_timeout_returns_when_it_expires(agent: Agent, tmp_path):
    task = agent.send(tasks.wait_in_client, str(tmp_path / "never"), 0.2)
    agent.expect_waiting(task, True)
    agent.expect_waiting(task, False)
    result = agent.receive()
    assert result.status == m.TaskStatus.FAILED
    error, _ = cloudpickle.loads(result.payload)
    assert type(error).__name__ == "TimeoutError"


def test_a_wait_in_a_thread_of_the_task_is_a_plain_wait(agent: Agent, tmp_path):
    release = tmp_path / "release"
    task = agent.send(tasks.wait_in_client_from_a_thread, str(release))
    with pytest.raises(TimeoutError):
        agent.receive(0.5)  # no wait notice: the processor's main thread is not the one waiting
    release.touch()
    assert agent.expect_result(task) == "released"


def test_recursion_of_depth_300_on_one_processor(agent: Agent, tmp_path):
    depth = 300
    (tmp_path / f"done-{depth}").touch()
    levels: List[bytes] = [agent.send(tasks.nest, str(tmp_path), 1)]
    for level in range(2, depth + 1):
        agent.expect_waiting(levels[-1], True)
        levels.append(agent.send(tasks.nest, str(tmp_path), level))
    pids = {agent.expect_result(levels[-1])}
    for task in reversed(levels[:-1]):
        agent.expect_waiting(task, False)
        pids.add(agent.expect_result(task))
    assert pids == {agent.link.pid}


def test_profiling_of_a_waiting_task_leaves_out_the_tasks_run_while_it_waits(agent: Agent, tmp_path):
    release = str(tmp_path / "release")
    parent = agent.send(tasks.burn_then_wait_in_client, 0.05, release, profiling=True)
    agent.expect_waiting(parent, True)
    child = agent.send(tasks.burn, 0.5, profiling=True)
    child_result = agent.receive()
    agent.expect_result(agent.send(tasks.create_file, release))
    agent.expect_waiting(parent, False)
    parent_result = agent.receive()
    assert child_result.task_id == child and parent_result.task_id == parent
    _, child_cpu, _ = child_result.profiling
    parent_seconds, parent_cpu, _ = parent_result.profiling
    assert child_cpu >= 0.5  # the child burned 0.5 s of CPU time (time.process_time) by itself
    assert parent_cpu < child_cpu  # the parent burned 0.05 s: the child's CPU time is the child's alone
    assert parent_seconds >= child_result.profiling[0]  # its duration is from its start to its end


def test_the_processor_exits_when_the_agent_goes_away_during_a_wait(agent: Agent, tmp_path):
    task = agent.send(tasks.wait_in_client, str(tmp_path / "never"))
    agent.expect_waiting(task, True)
    agent.link.close()
    deadline = time.monotonic() + DEADLINE_SECONDS
    while agent.link.process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert agent.link.process.exitcode == 1


def test_a_wake_that_comes_while_the_hub_reads_the_wake_pipe_is_not_lost(monkeypatch):
    """In the processor itself (no subprocess): the agent thread's wake lands just as the hub reads the wake pipe;
    the next wake must still reach the hub (its pipe readable), or that task would wait forever."""
    from scaler.worker import processor as module

    ours, theirs = multiprocessing.Pipe()
    hub = module._Processor(ours, 4, 4, 1 << 20)
    first, second, third = (module._Started(bytes([n]) * 16, b"C|h|1|a", False) for n in (1, 2, 3))
    for started in (first, second, third):
        started.waiting, started.done = True, lambda: True
    hub._wake(first)
    real_read = os.read

    def read_as_a_wake_comes(descriptor: int, size: int) -> bytes:
        hub._wake(second)  # from the agent thread, just before the hub's read
        return real_read(descriptor, size)

    monkeypatch.setattr(module.os, "read", read_as_a_wake_comes)
    over = hub._collect_wakes()
    monkeypatch.setattr(module.os, "read", real_read)
    assert over == [first.task_id, second.task_id]
    hub._wake(third)
    assert select.select([hub._wake_read], [], [], 0)[0] == [hub._wake_read]  # the hub's idle wait wakes
    assert hub._collect_wakes(read=True) == [third.task_id]
    theirs.close()
    ours.close()
