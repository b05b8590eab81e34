"""Cancelling tasks the scheduler holds: queued at the scheduler, queued at a busy worker, running, sent ahead
into the worker's processor behind a running task, started behind a quick task whose result the processor held.

Every task cancelled here is one the scheduler's monitor snapshot already shows, so the cancel must travel to
the scheduler (and on to the worker when the worker holds the task); each test then checks the scheduler's view
and that the worker is free again. One worker with room for two tasks makes the first three places certain:
the first task runs, the second waits in the worker's queue, the others wait at the scheduler (a fresh worker
sends nothing ahead: it has seen no quick task yet). A worker that has just run quick tasks sends the next ones
ahead into its processor's queue; with room for four, the three tasks behind a running one are all there.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Set

import pytest
from cluster_processes import next_snapshot, wait_until

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.addresses import default_monitor_address

QUEUE_SIZE = 2  # the worker's room: one task running, one waiting beside it
AHEAD_QUEUE_SIZE = 4  # room for a running task and three sent ahead (PROCESSOR_PIPELINE_DEPTH is 4)


def hold(directory: str, tag: str, release: str = "release") -> str:
    """Mark this task started, then wait for the file ``release`` of ``directory`` (10 minutes at most)."""
    import os
    import time

    open(os.path.join(directory, "started", tag), "w").close()
    deadline = time.monotonic() + 600
    while not os.path.exists(os.path.join(directory, release)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return tag


def mark(directory: str, tag: str) -> str:
    """Mark this task started, and return at once."""
    import os

    open(os.path.join(directory, "started", tag), "w").close()
    return tag


def square(value: int) -> int:
    return value * value


class View(NamedTuple):
    """What the scheduler's monitor snapshot says: task counts by state, and tasks assigned to its workers."""

    states: Dict[str, int]
    assigned: int
    workers: int

    @property
    def held(self) -> int:
        return self.states.get("queued", 0) + self.states.get("assigned", 0) + self.states.get("canceling", 0)


class Held:
    """Tasks that keep the worker busy until released, and the scheduler's view of them."""

    def __init__(self, client: Client, directory: Path) -> None:
        self.client = client
        self.directory = directory
        (directory / "started").mkdir()

    def submit(self, tag: str) -> concurrent.futures.Future:
        return self.client.submit(hold, str(self.directory), tag)

    def started(self) -> Set[str]:
        return {path.name for path in (self.directory / "started").iterdir()}

    def release(self) -> None:
        (self.directory / "release").touch()

    def view(self) -> View:
        snapshot = next_snapshot(default_monitor_address(self.client.address), timeout=10)
        assert snapshot is not None, "the scheduler published no monitor snapshot"
        states = {counter.name: counter.value for counter in snapshot.task_states}
        return View(states, sum(worker.assigned_tasks for worker in snapshot.workers), len(snapshot.workers))

    def wait_for(self, condition: Callable[[View], bool], what: str) -> View:
        views: List[View] = []

        def holds() -> bool:
            views.append(self.view())
            return condition(views[-1])

        try:
            wait_until(holds, 60, what)
        except TimeoutError as error:
            raise AssertionError(f"{error}; the scheduler's last view: {views[-1] if views else None}") from None
        return views[-1]

    def fill(self) -> Dict[str, concurrent.futures.Future]:
        """One task running, one queued at the worker, one queued at the scheduler, as the scheduler sees it."""
        running = self.submit("running")
        wait_until(lambda: self.started() == {"running"}, 60, "the first task to run")
        at_worker = self.submit("at-worker")
        self.wait_for(lambda view: view.assigned == 2, "the second task in the worker's queue")
        at_scheduler = self.submit("at-scheduler")
        self.wait_for(lambda view: view.states.get("queued") == 1, "the third task queued at the scheduler")
        return {"running": running, "at-worker": at_worker, "at-scheduler": at_scheduler}


@contextlib.contextmanager
def one_worker(queue_size: int, directory: Path) -> Iterator[Held]:
    """A cluster of one worker with room for ``queue_size`` tasks, idle, and a client's `Held` tasks on it."""
    combo = SchedulerClusterCombo(n_workers=1, per_worker_queue_size=queue_size, logging_level="WARNING")
    try:
        with Client(address=combo.get_address(), timeout_seconds=60) as client:
            held = Held(client, directory)
            held.wait_for(lambda view: view.workers == 1 and view.held == 0 and view.assigned == 0, "an idle cluster")
            try:
                yield held
            finally:
                held.release()
    finally:
        combo.shutdown()


@pytest.fixture
def held(tmp_path):
    with one_worker(QUEUE_SIZE, tmp_path) as held:
        yield held


@pytest.mark.parametrize("place", ["at-scheduler", "at-worker", "running"])
def test_cancel_of_a_task_the_scheduler_holds(held, place):
    futures = held.fill()
    before = held.view()
    assert futures[place].cancel(), "the scheduler did not confirm the cancel"
    assert futures[place].cancelled()
    if place == "running":  # its processor was stopped: the worker runs its next task, never released
        wait_until(lambda: "at-worker" in held.started(), 60, "the worker to run its next task")
    # the task that waited at the scheduler takes the room the cancelled one left (on the worker or running)
    held.wait_for(
        lambda view: (
            view.states["cancelled"] == before.states["cancelled"] + 1
            and view.states["queued"] == 0
            and view.assigned == 2
        ),
        "the scheduler to count the task cancelled and the worker to take the next one",
    )
    held.release()
    others = [tag for tag in futures if tag != place]
    assert [futures[tag].result(timeout=60) for tag in others] == others
    assert held.started() == {*others, "running"}  # the cancelled task never ran, unless it was running


def test_clear_cancels_every_task_the_scheduler_holds_and_frees_the_worker(held):
    futures = held.fill()
    before = held.view()
    held.client.clear()
    assert all(future.cancelled() for future in futures.values())
    held.wait_for(
        lambda view: view.states["cancelled"] == before.states["cancelled"] + 3 and view.held == 0,
        "the scheduler to cancel the three tasks",
    )
    assert held.client.submit(square, 3).result(timeout=60) == 9  # the running task was stopped: never released
    assert held.started() == {"running"}


def test_cancel_of_a_finished_task_is_refused_and_keeps_its_result(held):
    done = held.client.submit(square, 2)
    assert done.result(timeout=60) == 4
    assert not done.cancel()
    assert not done.cancelled() and done.result() == 4


def test_a_cancel_storm_over_every_place_a_task_waits(held):
    tags = [str(index) for index in range(200)]
    futures = {tag: held.submit(tag) for tag in tags}
    held.wait_for(lambda view: view.held == len(tags), "the scheduler to hold every task")
    wait_until(lambda: len(held.started()) == 1, 60, "the first task to run")
    (running,) = held.started()
    rng = random.Random(1)
    # tasks queued at the worker and at the scheduler, in random order from four threads; then the running one
    # (last, so that the task the worker takes up next is one that stays)
    order = rng.sample(sorted(set(tags) - {running}), len(tags) // 2)
    chosen = {*order, running}
    before = held.view()

    def cancel_each(part: List[str]) -> List[str]:
        """Cancel in turn; stop at the first cancel the scheduler does not confirm, and name it."""
        for tag in part:
            if not futures[tag].cancel():
                return [tag]
        return []

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        refused = sum(pool.map(cancel_each, [order[start::4] for start in range(4)]), [])
    refused += cancel_each([running])
    assert refused == [], "the scheduler confirmed no cancel of these tasks"
    held.wait_for(
        lambda view: (
            view.states["cancelled"] == before.states["cancelled"] + len(chosen)
            and view.held == len(tags) - len(chosen)
        ),
        "the scheduler to count every cancel",
    )
    held.release()
    for tag, future in futures.items():
        if tag in chosen:
            assert future.cancelled(), tag
        else:
            assert future.result(timeout=120) == tag
    assert held.started() == (set(tags) - chosen) | {running}


@pytest.mark.parametrize("end", ["cancelled", "finished"])
def test_cancel_of_a_task_sent_ahead_behind_a_running_task_is_confirmed_while_it_runs(tmp_path, end):
    """The processor cannot read its Pipe while the long task runs, yet the worker confirms the cancel of a task
    behind it at once; the cancelled task never runs, and the others run once the long task is cancelled or
    finished."""
    with one_worker(AHEAD_QUEUE_SIZE, tmp_path) as held:
        client = held.client
        # quick tasks first: the worker then sends the next tasks ahead, and its processor holds `mark` already,
        # so the tasks behind the long one go to the processor as soon as the worker gets them, nothing to fetch
        warm = [f"warm-{n}" for n in range(3)]
        assert [client.submit(mark, str(held.directory), tag).result(timeout=60) for tag in warm] == warm
        long = held.submit("long")
        wait_until(lambda: "long" in held.started(), 60, "the long task to run")
        behind = {tag: client.submit(mark, str(held.directory), tag) for tag in ("a", "b", "c")}
        before = held.wait_for(lambda view: view.assigned == 4, "the worker to hold the three tasks behind")
        # the cancel reaches the worker after the tasks (one connection, in order): they are in the processor's queue
        assert behind["b"].cancel(), "the worker did not confirm the cancel while the long task ran"
        assert behind["b"].cancelled()
        held.wait_for(
            lambda view: view.states["cancelled"] == before.states["cancelled"] + 1 and view.assigned == 3,
            "the scheduler to count the task cancelled",
        )
        assert held.started() == {*warm, "long"}  # nothing behind the long task ran meanwhile
        if end == "cancelled":
            assert long.cancel(), "the scheduler did not confirm the cancel of the long task"
        else:
            held.release()
            assert long.result(timeout=60) == "long"
        assert [behind[tag].result(timeout=60) for tag in ("a", "c")] == ["a", "c"]
        assert client.submit(square, 3).result(timeout=60) == 9  # and the worker takes new work
        held.wait_for(lambda view: view.held == 0 and view.assigned == 0, "the scheduler to hold nothing more")
        assert held.started() == {*warm, "long", "a", "c"}  # the cancelled task never ran


def test_cancel_of_a_long_task_that_started_behind_a_quick_one_stops_it(tmp_path):
    """The processor holds a quick task's result for company as it starts the long task sent ahead behind it; it
    sends that result within RESULT_HOLD_LIMIT_SECONDS all the same, so the worker learns that the long task
    started, and a cancel of it stops its processor (the worker is free again, the long task never released)."""
    with one_worker(AHEAD_QUEUE_SIZE, tmp_path) as held:
        client, directory = held.client, str(held.directory)
        warm = [f"warm-{n}" for n in range(3)]  # quick tasks first: the worker then sends the next ones ahead
        assert [client.submit(mark, directory, tag).result(timeout=60) for tag in warm] == warm
        first = client.submit(hold, directory, "first", "go")
        wait_until(lambda: "first" in held.started(), 60, "the first task to run")
        quick = client.submit(mark, directory, "quick")
        long = client.submit(hold, directory, "long", "never")  # `hold` is on the processor already: nothing to fetch
        held.wait_for(lambda view: view.assigned == 3, "the worker to hold the two tasks behind the first")
        (held.directory / "go").touch()  # the quick task starts, then the long one at once, from the processor's queue
        assert first.result(timeout=60) == "first"
        assert quick.result(timeout=60) == "quick"  # not held until the long task ends: it never does
        wait_until(lambda: "long" in held.started(), 60, "the long task to run")
        assert long.cancel(), "the scheduler did not confirm the cancel of the long task"
        assert client.submit(square, 3).result(timeout=60) == 9  # its processor was stopped: the worker is free
        held.wait_for(lambda view: view.held == 0 and view.assigned == 0, "the scheduler to hold nothing more")
