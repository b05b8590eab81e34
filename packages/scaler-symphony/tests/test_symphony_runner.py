"""The Symphony runner inside the worker core, driven through `handle` (see `runner_harness`): the base
concurrency, nested tasks past it, cancels and timeouts that abort in Symphony, a session that dies."""

from __future__ import annotations

import cloudpickle
from runner_harness import SESSION, Harness, client_in, make_task, task_id

from scaler.protocol import messages as m
from scaler.protocol.errors import TaskTimeoutError
from scaler.symphony.symphony_runner import SessionLost, SessionOpened, Submitted, TaskFailed


def test_at_most_base_concurrency_tasks_are_in_symphony_and_the_next_goes_when_one_ends():
    h = Harness(base_concurrency=2)
    h.assign(*(make_task(n) for n in range(1, 6)))
    assert h.in_symphony() == [1, 2]
    assert (h.runner.running, h.core.queued_count) == (2, 3)
    h.accept(1, "1")
    h.finish(1, "one")
    assert h.in_symphony() == [2, 3]
    assert cloudpickle.loads(h.results()[task_id(1)].payload) == "one"
    for number in (2, 3, 4, 5):
        h.finish(number)
    assert h.in_symphony() == [] and h.runner.counted == 0
    assert sorted(h.results()) == [task_id(n) for n in (2, 3, 4, 5)]


def test_nothing_goes_before_the_session_is_open():
    h = Harness(open_session=False)
    assert h.opens == 1
    h.assign(make_task(1))
    assert h.in_symphony() == []
    h.tell(SessionOpened(SESSION))
    assert h.in_symphony() == [1]
    assert h.submissions[h.serial_of(1)].session_id == SESSION


def test_nested_tasks_pass_the_limit_at_any_depth_and_take_no_place_under_it():
    h = Harness(base_concurrency=1)
    h.assign(make_task(1))
    h.accept(1, "11")
    h.assign(make_task(2), make_task(3, client=client_in("11")), make_task(4, client=client_in("11")))
    assert h.in_symphony() == [1, 3, 4]  # 2 waits: the one place is taken; 3 and 4 are task 1's children
    h.accept(3, "12")
    h.assign(make_task(5, client=client_in("12")))  # a grandchild
    assert h.in_symphony() == [1, 3, 4, 5]
    assert h.runner.counted == 1
    for number in (5, 3, 4):
        h.finish(number)
    assert h.in_symphony() == [1]  # the children never held the place
    h.finish(1)
    assert h.in_symphony() == [2]


def test_a_task_is_nested_only_in_a_task_of_this_session_that_is_in_symphony_now():
    h = Harness(base_concurrency=1)
    h.assign(make_task(1))
    h.assign(make_task(2, client=client_in("11", session_id="6")))  # made in a task of another session
    h.assign(make_task(3, client=client_in("11")))  # its parent is not in Symphony (yet)
    assert h.in_symphony() == [1]
    h.accept(1, "11")  # now it is: its child goes with the next event
    assert h.in_symphony() == [1, 3]
    h.finish(1)
    assert h.in_symphony() == [3, 2]  # 2 takes the place task 1 left; 3 never held one
    assert h.runner.counted == 1


def test_a_cancelled_task_is_aborted_in_symphony_and_keeps_its_place_until_symphony_confirms():
    h = Harness(base_concurrency=1)
    h.assign(make_task(1), make_task(2))
    h.accept(1, "1")
    confirm = h.cancel(1)
    assert confirm.cancelled == [True]
    assert h.aborts == [h.serial_of(1)]
    assert h.in_symphony() == [1]  # Symphony may still run it: task 2 waits
    h.aborted(1)
    assert h.in_symphony() == [2]
    assert h.results() == {}  # a cancelled task has no result


def test_the_late_output_of_an_aborted_task_is_dropped_and_frees_its_place():
    h = Harness(base_concurrency=1)
    h.assign(make_task(1), make_task(2))
    h.cancel(1)  # before Symphony even took it
    h.accept(1, "1")
    h.finish(1)
    assert h.in_symphony() == [2]
    assert h.results() == {}


def test_a_task_that_outlives_its_timeout_is_aborted_in_symphony():
    h = Harness(base_concurrency=1)
    h.assign(make_task(1, timeout_seconds=5.0))
    h.accept(1, "1")
    h.tick(6.0)
    assert h.aborts == [h.serial_of(1)]
    result = h.results()[task_id(1)]
    assert result.status == m.TaskStatus.FAILED
    error, _ = cloudpickle.loads(result.payload)
    assert isinstance(error, TaskTimeoutError)


def test_a_task_symphony_fails_is_reported_died_with_symphony_s_reason():
    h = Harness()
    h.assign(make_task(1))
    h.accept(1, "1")
    h.tell(TaskFailed(h.serial_of(1), "SoamException: task 1 failed: the service instance ended"))
    result = h.results()[task_id(1)]
    assert result.status == m.TaskStatus.WORKER_DIED
    assert "the service instance ended" in result.error_text


def test_a_lost_session_fails_the_tasks_in_symphony_returns_the_others_and_opens_a_new_one():
    h = Harness(base_concurrency=3)
    h.assign(make_task(1), make_task(2), make_task(3))
    h.accept(1, "1")
    h.accept(2, "2")  # task 3 is still on its way to Symphony
    stale = h.serial_of(3)
    h.submissions.clear()
    h.tell(SessionLost(SESSION, "connection lost"))
    results = h.results()
    assert sorted(results) == [task_id(1), task_id(2)]
    for result in results.values():
        assert result.status == m.TaskStatus.WORKER_DIED
        assert f"Symphony session {SESSION} ended: connection lost" in result.error_text
    assert h.opens == 2 and h.runner.session_id is None
    assert h.in_symphony() == [] and h.core.queued_count == 1  # task 3 is back in the queue
    h.tell(Submitted(stale, "3"))  # what the old session said late is dropped
    h.tell(SessionOpened("8"))
    assert h.in_symphony() == [3]
    assert h.submissions[h.serial_of(3)].session_id == "8"
    h.tell(SessionLost(SESSION, "again"))  # the old session's last word changes nothing
    assert h.in_symphony() == [3] and h.opens == 2
    h.finish(3)
    assert h.results()[task_id(3)].status == m.TaskStatus.SUCCESS


def test_a_heartbeat_counts_the_tasks_in_symphony_as_running():
    h = Harness(base_concurrency=2)
    h.assign(*(make_task(n) for n in range(1, 5)))
    h.tick(2.5)  # the heartbeat is due
    [heartbeat] = h.take(m.WorkerHeartbeat)[-1:]
    assert (heartbeat.queued_tasks, heartbeat.running_tasks) == (2, 2)
