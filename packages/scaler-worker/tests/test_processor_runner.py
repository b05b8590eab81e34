"""The local processor runner (`ProcessorRunner`) inside the worker core, driven through `handle` (see
`core_harness`): nested tasks waiting beside the running one, tasks sent ahead into the processor's FIFO, its
cache mirrors."""

from __future__ import annotations

from typing import Any, List

import pytest
from core_harness import Harness, load_failure, make_task, task_id

from scaler.protocol import messages as m
from scaler.protocol.errors import TaskTimeoutError
from scaler.protocol.serializer import DefaultSerializer, serialize_payload
from scaler.worker.lru_cache import SizedLRUCache
from scaler.worker.processor_lifecycle import SentState
from scaler.worker.processor_protocol import Drop, ProcessorResult
from scaler.worker.scheduler_answers import SchedulerAnswers
from scaler.worker.task_lifecycle import TaskEntry
from scaler.worker.worker_events import FromScheduler

# ----------------------------------------------------------------------------- nested tasks


def waits(h: Harness) -> List[Any]:
    """What the scheduler heard of waits: (task number, waiting) in order."""
    return [
        (int.from_bytes(t, "big"), w)
        for message in h.take(m.WaitingTasks)
        for t, w in zip(message.task_ids, message.waiting, strict=True)
    ]


def test_a_waiting_task_frees_the_slot_and_the_next_task_runs_beside_it():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    assert h.running_task() == task_id(1) and h.core.queued_count == 1
    h.wait()
    assert h.running_task() == task_id(2) and h.waiting_ids() == [task_id(1)]
    assert sorted(h.runner.started_tasks) == h.started_ids()
    assert h.top().function is None  # the same processor: it has the function already
    assert (h.runner.running, h.runner.suspended, h.core.queued_count) == (1, 1, 0)
    assert waits(h) == [(1, True)]  # the scheduler hears it at once: task 1 holds no room there
    h.finish()
    assert (h.runner.running, h.runner.suspended) == (0, 1)  # task 1 still waits
    h.resume()
    assert h.pipe == [] and h.running_task() == task_id(1) and waits(h) == [(1, False)]
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(1)]
    assert h.started == [0]  # never another processor


def test_a_wait_that_begins_and_ends_between_two_sends_is_no_news_to_the_scheduler():
    answers = SchedulerAnswers(0.005)
    entry = TaskEntry(make_task(1))
    answers.tell_waiting(entry, None)
    answers.tell_resumed(entry, None)
    assert not answers.pending
    answers.tell_waiting(entry, None)
    assert not answers.may_hold(0.0, True)  # a wait goes at once
    out: List[Any] = []
    answers.send(out)
    assert [effect.message for effect in out] == [m.WaitingTasks([task_id(1)], [True])]


def test_while_tasks_wait_the_newest_task_runs_first():
    h = Harness(prefetch_tasks=1)
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3, priority=1), make_task(4))  # 4 is the newest at priority 0
    h.wait()
    h.answer_gets()
    assert h.running_task() == task_id(3)  # priority first
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(4)  # then the newest: most likely what task 1 waits for
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(2)


def test_recursion_of_depth_50_runs_on_one_processor():
    """Each level submits its child and waits for it: each child runs while its parents wait."""
    h = Harness()
    depth = 50
    h.assign(make_task(0))
    h.answer_gets()
    for level in range(1, depth):
        h.assign(make_task(level))  # submitted by the running level - 1...
        h.wait()  # ...which now waits for it
        assert h.running_task() == task_id(level)
    assert h.runner.suspended == depth - 1 and len(h.waiting) == depth - 1
    for level in reversed(range(depth)):  # the deepest returns first, then each parent resumes and returns
        if level < depth - 1:
            h.resume(level)
        assert h.running_task() == task_id(level)
        h.finish(payload=bytes([level]))
    results = h.results()
    assert [r.task_id for r in results] == [task_id(n) for n in reversed(range(depth))]
    assert [r.payload for r in results] == [bytes([n]) for n in reversed(range(depth))]
    assert h.started == [0] and h.runner.started_tasks == []


def test_waiting_tasks_resume_in_the_order_their_waits_end():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.wait()
    h.wait()  # tasks 1 then 3 (the newest first while a task waits) wait; task 2 runs
    assert h.running_task() == task_id(2) and h.waiting_ids() == [task_id(1), task_id(3)]
    h.resume(1)  # task 1's wait ends first, though it began first: it resumes once task 2 is done
    assert h.running_task() == task_id(2)
    h.finish()
    assert h.running_task() == task_id(1) and h.waiting_ids() == [task_id(3)]
    h.finish()
    h.resume(3)
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(n) for n in (2, 1, 3)]
    assert waits(h) == [(1, True), (3, True), (1, False), (3, False)]


def test_a_task_sent_as_the_processor_resumes_a_waiting_one_runs_after_it():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.wait()
    h.hold = True  # the processor has not read its pipe yet...
    h.assign(make_task(2))  # ...when the agent sends it a task (no task runs: it is taken for started)
    h.resume()  # and the processor resumes task 1 first (its notice crosses task 2)
    h.hold = False
    assert h.runner.running == 2 and h.running_task() == task_id(1)
    sent = len(h.messages) + len(h.pipe)
    h.assign(make_task(3))
    assert len(h.messages) + len(h.pipe) == sent  # nothing more is sent while tasks run
    h.finish()  # task 1 ends; the processor reads its pipe and starts task 2
    assert h.running_task() == task_id(2) and h.runner.running == 1
    h.finish()
    h.answer_gets()
    assert h.running_task() == task_id(3)
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(n) for n in (1, 2, 3)]


def test_results_of_nested_tasks_answer_their_own_attempts():
    h = Harness()
    h.assign(make_task(1, attempt=3))
    h.answer_gets()
    h.assign(make_task(2, attempt=5))
    h.wait()
    h.finish(payload=b"child")
    h.resume()
    h.finish(payload=b"parent")
    assert [(r.task_id, r.attempt, r.payload) for r in h.results()] == [
        (task_id(2), 5, b"child"),
        (task_id(1), 3, b"parent"),
    ]


def test_a_result_of_a_task_that_does_not_run_is_dropped():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.wait()
    h.tell(ProcessorResult(task_id(1), m.TaskStatus.SUCCESS, b"early", "", None))
    assert h.results() == [] and sorted(h.runner.started_tasks) == [task_id(1), task_id(2)]


def test_messages_of_a_replaced_processor_are_dropped():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    old = h.processor
    h.cancel(1)
    h.answer_gets()
    h.tell(ProcessorResult(task_id(2), m.TaskStatus.SUCCESS, b"", "", None), processor=old)
    h.die("processor was killed by signal SIGKILL", processor=old)
    assert h.results() == [] and h.running_task() == task_id(2) and h.started == [0, 1]


def test_processor_death_ends_every_started_task_with_worker_died():
    h = Harness()
    h.assign(make_task(1, attempt=2))
    h.answer_gets()
    h.assign(make_task(3), make_task(2, attempt=4))
    h.wait()
    h.die("processor was killed by signal SIGSEGV")
    results = {r.task_id: r for r in h.results()}
    assert set(results) == {task_id(1), task_id(2)}
    assert (results[task_id(2)].status, results[task_id(2)].attempt) == (m.TaskStatus.WORKER_DIED, 4)
    assert results[task_id(2)].error_text == "processor was killed by signal SIGSEGV"
    assert (results[task_id(1)].status, results[task_id(1)].attempt) == (m.TaskStatus.WORKER_DIED, 2)
    assert results[task_id(1)].error_text == (
        f"processor was killed by signal SIGSEGV, while task {task_id(2).hex()} ran beside this one"
    )
    assert h.started == [0, 1] and h.running_task() == task_id(3)  # the queued task runs on the new one


def test_cancel_of_a_waiting_task_stops_the_processor_and_the_running_task_dies():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3))
    h.wait()
    assert sorted(h.runner.started_tasks) == [task_id(1), task_id(3)]
    confirm = h.cancel(1)
    assert confirm.cancelled == [True]
    [died] = h.results()
    assert (died.task_id, died.status) == (task_id(3), m.TaskStatus.WORKER_DIED)
    assert died.error_text == f"its processor was stopped to cancel task {task_id(1).hex()}"
    assert h.started == [0, 1] and h.running_task() == task_id(2)


def test_cancel_of_several_started_tasks_cancels_them_all_at_once():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2))
    h.wait()
    h.assign(make_task(3))
    h.wait()
    confirm = h.cancel(3, 1)
    assert confirm.cancelled == [True, True]
    [died] = h.results()
    assert died.task_id == task_id(2) and died.status == m.TaskStatus.WORKER_DIED
    assert task_id(1).hex() in died.error_text and task_id(3).hex() in died.error_text
    assert h.started == [0, 1]


def test_timeout_of_a_waiting_task_fails_it_and_the_other_started_tasks_die():
    h = Harness()
    h.assign(make_task(1, timeout_seconds=2))
    h.answer_gets()
    h.assign(make_task(2))
    h.wait()
    h.tick(2.0)  # task 1 started at 0
    results = {r.task_id: r for r in h.results()}
    error, _ = load_failure(results[task_id(1)])
    assert isinstance(error, TaskTimeoutError) and "timeout of 2 seconds" in str(error)
    assert results[task_id(2)].status == m.TaskStatus.WORKER_DIED
    assert results[task_id(2)].error_text == f"its processor was stopped: {error}"
    assert h.started == [0, 1]


def test_timer_of_a_task_run_while_another_waits_then_finished_does_nothing():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2, timeout_seconds=1))
    h.wait()  # task 2 starts at 0, while task 1 waits
    h.finish()
    h.tick(1.0)
    assert h.started == [0] and [r.task_id for r in h.results()] == [task_id(2)]


def test_balance_gives_back_queued_tasks_never_a_started_one():
    h = Harness()
    h.assign(make_task(1))
    h.answer_gets()
    h.assign(make_task(2), make_task(3), make_task(4), make_task(5))
    h.wait()  # task 5, the newest, now runs while task 1 waits
    assert sorted(h.runner.started_tasks) == [task_id(1), task_id(5)]
    # while a task waits the newest run first, so the oldest would run last: they go back
    assert h.balance(10) == [task_id(2), task_id(3), task_id(4)]
    assert h.core.queued_count == 0
    h.finish()
    h.resume()
    h.finish()
    assert sorted(r.task_id for r in h.results()) == [task_id(1), task_id(5)]


def test_a_balance_racing_with_a_result_a_cancel_and_a_death_strands_nothing():
    h = Harness(prefetch_tasks=2)
    h.assign(make_task(1), make_task(2), make_task(3), make_task(4), make_task(5))
    h.answer_gets()
    result = h.processor_finishes()  # task 1 is done; its result is still in the pipe
    assert h.balance(2) == [task_id(5), task_id(4)]  # never task 1, which the agent still sees running
    h.tell(result)
    h.answer_gets()
    assert h.cancel(5, 2) == m.TaskCancelConfirm([task_id(5), task_id(2)], [False, True])  # 5 went back
    assert h.running_task() == task_id(3)  # on the processor that replaced the one task 2 ran on
    h.die("processor was killed by signal SIGKILL")
    assert h.balance(5) == []
    statuses = {r.task_id: r.status for r in h.results()}
    assert statuses == {task_id(1): m.TaskStatus.SUCCESS, task_id(3): m.TaskStatus.WORKER_DIED}
    assert h.core.queued_count == 0 and h.runner.started_tasks == []


def test_counts_for_heartbeats_with_waiting_tasks():
    h = Harness()
    h.assign(make_task(1), make_task(2), make_task(3))
    h.answer_gets()
    h.wait()
    assert (h.runner.running, h.runner.suspended, h.core.queued_count) == (1, 1, 1)
    h.wait()
    assert (h.runner.running, h.runner.suspended, h.core.queued_count) == (1, 2, 0)
    h.wait()
    assert (h.runner.running, h.runner.suspended, h.core.queued_count) == (0, 3, 0)


# ----------------------------------------------------------------------------- pipeline to the processor


def pipelined(count: int, depth: int = 2, **options: Any) -> Harness:
    """A worker with ``count`` tasks (numbered from 1) whose first task finished quickly: task 2 runs and
    the next ``depth`` ones are sent ahead."""
    h = Harness(pipeline_depth=depth, **options)
    h.assign(*[make_task(n, timeout_seconds=options.pop("timeout", 0)) for n in range(1, count + 1)])
    h.answer_gets()
    h.finish()
    h.results()
    return h


def test_nothing_is_sent_ahead_before_a_task_was_seen_to_be_quick():
    h = Harness(pipeline_depth=2)
    h.assign(*[make_task(n) for n in range(1, 5)])
    h.answer_gets()
    assert h.running_task() == task_id(1) and h.runner.inbox == [] and h.fifo == []


def test_while_a_task_runs_the_next_ones_are_sent_ahead_in_one_message():
    h = pipelined(6, depth=3)
    assert h.running_task() == task_id(2)
    assert h.runner.inbox == h.fifo_ids() == [task_id(3), task_id(4), task_id(5)]
    assert h.messages[-1] == [h.current, *h.fifo]  # task 2 and the three ahead: one Pipe message
    assert h.core.queued_count == 4 and h.runner.state_of(task_id(3)) is SentState.SENT
    assert h.run_all() == [task_id(n) for n in range(2, 7)]
    assert [r.task_id for r in h.results()] == [task_id(n) for n in range(2, 7)]


def test_with_depth_zero_one_task_at_a_time():
    h = pipelined(4, depth=0)
    assert h.running_task() == task_id(2) and h.runner.inbox == [] and h.fifo == []
    assert h.messages[-1] == [h.current]


def test_a_slow_task_stops_the_sending_ahead():
    h = pipelined(8, depth=2)
    h.tell(h.processor_finishes()._replace(seconds=5.0))  # task 2 took long: task 3 starts, nothing more
    assert sorted(h.runner.started_tasks) == [task_id(3)] and h.runner.inbox == [task_id(4)]
    h.tell(h.processor_finishes())  # task 3 was quick again
    assert sorted(h.runner.started_tasks) == [task_id(4)] and h.runner.inbox == [task_id(5), task_id(6)]


def test_tiny_tasks_are_sent_further_ahead_than_quick_ones():
    h = pipelined(20, depth=2, tiny_tasks_depth=6)  # task 1 took no time: tiny
    assert h.running_task() == task_id(2) and h.runner.inbox == [task_id(n) for n in range(3, 9)]
    assert h.messages[-1] == [h.current, *h.fifo]  # task 2 and the six ahead: one Pipe message
    h.tell(h.processor_finishes()._replace(seconds=0.01))  # task 2 was quick, not tiny: task 3 starts
    assert h.runner.inbox == [task_id(n) for n in range(4, 9)]  # more than two ahead already: none sent
    h.tell(h.processor_finishes())  # task 3 was tiny again
    assert h.runner.inbox == [task_id(n) for n in range(5, 11)]


def test_results_in_one_message_are_read_one_by_one():
    h = pipelined(6, depth=3)
    first = h.processor_finishes()
    h.pump()  # the processor starts task 3 from its FIFO without the agent
    second = h.processor_finishes()
    h.tell([first, second])
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(3)]
    assert sorted(h.runner.started_tasks) == h.started_ids() == [task_id(4)]
    assert h.runner.inbox == [task_id(5), task_id(6)]
    assert h.fifo_ids() == [task_id(5)] and [t.task_id for [t] in h.pipe] == [task_id(6)]  # read as task 4 ends


def test_the_timeout_of_a_task_sent_ahead_counts_from_its_start():
    h = Harness(pipeline_depth=2)
    h.assign(*[make_task(n, timeout_seconds=1.0) for n in range(1, 5)])
    h.answer_gets()  # task 1 starts at 0
    h.now = 0.2
    h.finish()  # task 2 starts at 0.2; tasks 3 and 4 are sent ahead, not started
    assert h.runner.inbox == [task_id(3), task_id(4)]
    h.now = 0.4
    h.finish()  # task 3 starts at 0.4
    h.results()
    h.tick(1.3)
    assert h.results() == [] and h.started == [0]  # sent at 0.2, task 3 has not run for 1 second yet
    h.tick(1.4)
    [result] = h.results()
    assert result.task_id == task_id(3) and isinstance(load_failure(result)[0], TaskTimeoutError)
    assert h.started == [0, 1]  # task 4 had not started: it runs on the new processor
    assert h.run_all() == [task_id(4)]


def test_cancel_of_a_task_sent_ahead_is_confirmed_at_once_while_the_task_before_it_runs():
    h = pipelined(5, depth=2)  # task 2 runs (the processor reads its pipe only once it ends); 3 and 4 are ahead
    assert h.cancel(3) == m.TaskCancelConfirm([task_id(3)], [True])
    assert h.pipe == [[Drop(task_id(3))]]
    assert task_id(3) not in h.core.task_states() and h.runner.cancelled_tasks == [task_id(3)]
    assert h.runner.inbox == [task_id(3), task_id(4)] and h.core.queued_count == 2  # tasks 4 and 5
    h.finish()  # task 2 ends: the processor reads the Drop, then says so: [Dropped(3), result of task 2]
    assert h.started == [0]  # no processor was stopped
    assert h.running_task() == task_id(4) and h.runner.cancelled_tasks == []
    assert h.run_all() == [task_id(4), task_id(5)]
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(4), task_id(5)]
    assert h.take(m.TaskCancelConfirm) == []  # one confirm, the first


def test_a_cancelled_task_sent_ahead_that_started_before_the_drop_was_read_is_stopped_without_a_word():
    h = pipelined(5, depth=2)
    finished = h.processor_finishes()  # task 2 ends; the processor finds nothing in its pipe and starts task 3
    h.pump()
    assert h.running_task() == task_id(3)
    # the agent still sees task 3 in the FIFO: confirmed at once (task 5: queued)
    assert h.cancel(3, 5) == m.TaskCancelConfirm([task_id(3), task_id(5)], [True, True])
    h.tell(finished)  # no Dropped before task 2's result: task 3 started, the Drop came too late
    assert h.started == [0, 1]  # its processor was stopped
    assert [r.task_id for r in h.results()] == [task_id(2)]  # no result of task 3, no death either
    assert h.run_all() == [task_id(4)]  # task 4 had not started: it runs on the new processor
    assert [r.task_id for r in h.results()] == [task_id(4)]
    assert h.core.task_states() == {} and h.runner.cancelled_tasks == []


def test_a_cancelled_task_that_started_and_ended_in_the_same_message_delivers_no_result():
    h = pipelined(5, depth=2)
    first = h.processor_finishes()  # task 2 ends quickly: its result waits for company
    h.pump()  # the processor starts task 3
    assert h.cancel(3) == m.TaskCancelConfirm([task_id(3)], [True])
    second = h.processor_finishes(payload=b"three")  # task 3 ends too; the Drop comes too late: no answer
    h.tell([first, second])
    assert [r.task_id for r in h.results()] == [task_id(2)]  # task 3's result is dropped
    assert h.started == [0]  # it had ended: nothing to stop
    assert h.run_all() == [task_id(4), task_id(5)]


def test_a_cancelled_task_that_started_as_the_running_task_began_to_wait_is_stopped():
    h = pipelined(5, depth=2)
    waits = h.processor_waits()  # task 2 waits; the processor finds nothing in its pipe and starts task 3
    h.pump()
    assert h.cancel(3) == m.TaskCancelConfirm([task_id(3)], [True])
    h.tell(waits)  # task 3 started: the processor is stopped, and task 2 dies with it
    [died] = h.results()
    assert (died.task_id, died.status) == (task_id(2), m.TaskStatus.WORKER_DIED)
    assert died.error_text == f"its processor was stopped to cancel task {task_id(3).hex()}"
    assert h.started == [0, 1] and h.runner.cancelled_tasks == []
    assert h.run_all() == [task_id(4), task_id(5)]


def test_a_task_sent_ahead_and_cancelled_as_the_result_before_it_crossed_them_is_cancelled_all_the_same():
    h = pipelined(5, depth=1)  # task 2 runs, task 3 is ahead
    h.finish()  # task 3 starts; task 4 is sent ahead
    h.hold = True  # it reaches the processor only after the processor read its pipe as task 3 ended
    finished = h.processor_finishes()
    assert h.cancel(4) == m.TaskCancelConfirm([task_id(4)], [True])
    h.tell(finished)  # no Dropped before it: task 4 is taken for started, and the processor stopped
    assert h.started == [0, 1] and h.runner.cancelled_tasks == []  # (for nothing: it would have dropped it)
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(3)]  # nothing of task 4
    h.hold = False
    h.pump()
    assert h.run_all() == [task_id(5)]


def test_a_task_taken_back_that_started_before_the_drop_was_read_runs_and_delivers():
    h = pipelined(5, depth=2)
    finished = h.processor_finishes()  # task 2 ends; the processor starts task 3
    h.pump()
    h.assign(make_task(9, priority=5))  # the agent takes back tasks 3 and 4
    assert h.pipe[-1] == [Drop(task_id(3)), Drop(task_id(4))]
    h.tell(finished)  # task 3 had started: it runs; task 4 comes back once the processor reads the Drops
    assert h.runner.state_of(task_id(3)) is SentState.STARTED_DROPPING
    assert h.run_all() == [task_id(3), task_id(9), task_id(4), task_id(5)]
    assert [r.task_id for r in h.results()] == [task_id(n) for n in (2, 3, 9, 4, 5)]


def test_cancel_of_the_running_task_puts_the_tasks_sent_ahead_back_without_a_death():
    h = pipelined(5, depth=2)
    assert h.cancel(2, 4) == m.TaskCancelConfirm([task_id(2), task_id(4)], [True, True])
    assert h.started == [0, 1]
    assert h.results() == []  # no WORKER_DIED for the tasks that had not started
    assert task_id(4) not in h.core.task_states()
    h.answer_gets()
    assert h.running_task() == task_id(3)  # first in line again, on the new processor
    assert h.top().function == b"function bytes"  # whose cache is empty
    assert h.run_all() == [task_id(3), task_id(5)]


def test_processor_death_kills_the_running_task_and_puts_the_tasks_sent_ahead_back():
    h = pipelined(5, depth=2)
    done = h.processor_finishes()  # task 2's result is in the pipe when the processor dies running task 3
    h.die("processor was killed by signal SIGKILL", [[done]])
    statuses = [(r.task_id, r.status) for r in h.results()]
    assert statuses == [(task_id(2), m.TaskStatus.SUCCESS), (task_id(3), m.TaskStatus.WORKER_DIED)]
    assert h.started == [0, 1]
    h.answer_gets()
    assert h.run_all() == [task_id(4), task_id(5)]


def test_what_a_dying_processor_wrote_counts_in_order_also_past_a_wait():
    h = pipelined(3, depth=1)  # task 2 runs, task 3 is sent ahead
    waiting = h.processor_waits()  # task 2 waits: the processor starts task 3, which ends
    h.pump()
    result = h.processor_finishes()
    h.die("processor was killed by signal SIGKILL", last=[waiting, result])  # before the agent read either
    statuses = {r.task_id: r.status for r in h.results()}
    assert statuses == {task_id(3): m.TaskStatus.SUCCESS, task_id(2): m.TaskStatus.WORKER_DIED}  # 3 ran once


def test_when_the_running_task_waits_the_tasks_sent_ahead_start_and_nothing_more_is_sent_ahead():
    h = pipelined(6, depth=2)
    assert h.runner.inbox == h.fifo_ids() == [task_id(3), task_id(4)]
    h.wait()  # task 2 waits: the head of the FIFO starts at once
    assert h.running_task() == task_id(3) and h.runner.inbox == h.fifo_ids() == [task_id(4)]
    assert sorted(h.runner.started_tasks) == h.started_ids() == [task_id(2), task_id(3)]
    h.finish()
    h.finish()  # tasks 3 and 4 end: while task 2 waits, one task at a time, the newest first
    h.answer_gets()
    assert h.running_task() == task_id(6) and h.runner.inbox == [] and h.fifo == []
    h.finish()
    h.answer_gets()
    h.resume()  # task 2's wait is over, but task 5 was sent as task 6 ended: task 5 first
    assert h.run_all() == [task_id(5), task_id(2)]
    assert sorted(r.task_id for r in h.results()) == [task_id(n) for n in range(2, 7)]


def test_a_higher_priority_task_takes_back_the_lower_ones_sent_ahead():
    h = pipelined(5, depth=2)
    h.assign(make_task(9, priority=5))
    assert h.pipe == [[Drop(task_id(3)), Drop(task_id(4))]]  # read by the processor between two tasks
    assert h.run_all() == [task_id(2), task_id(9), task_id(3), task_id(4), task_id(5)]


def test_a_balance_the_queue_cannot_answer_takes_back_what_was_sent_ahead_for_the_next_one():
    h = pipelined(5, depth=2)  # task 2 runs; 3 and 4 are sent ahead; 5 is queued
    assert h.balance(2) == [task_id(5)]  # the queue had one; of those sent ahead, the one that would run last is asked
    assert h.pipe[-1] == [Drop(task_id(4))]
    h.assign(make_task(6))
    assert h.runner.inbox == [task_id(3), task_id(4)]  # nothing more is sent ahead behind task 2: it may never end
    h.tell(h.processor_finishes()._replace(seconds=5.0))  # it ends at last (the processor read the Drop first)
    assert h.balance(2) == [task_id(6), task_id(4)]  # task 4 came back to the queue: it moves now
    assert h.run_all() == [task_id(3)]


# ----------------------------------------------------------------------------- object cache of the processor


def test_an_object_is_sent_to_the_processor_once_then_by_its_id():
    object_id = b"O" * 16
    h = Harness(pipeline_depth=0)
    h.storage[object_id] = b"shared"
    argument = m.Argument("", m.ArgumentKind.OBJECT, object_id)
    h.assign(make_task(1, arguments=[argument]), make_task(2, arguments=[argument]), make_task(3))
    h.answer_gets()
    assert h.top().arguments == [("", b"shared", object_id)]
    h.finish()
    assert h.top().arguments == [("", None, object_id)]  # the processor holds it
    assert h.gets == []  # and it was fetched once
    h.die("processor was killed by signal SIGKILL")  # task 2 dies; a new processor has an empty cache
    h.assign(make_task(4, arguments=[argument]))
    h.answer_gets()
    h.finish()
    assert h.top().arguments == [("", b"shared", object_id)]


@pytest.mark.parametrize("value", [b"b" * 100_000, bytearray(100_000), "not a pickle"])
def test_an_object_of_several_frames_crosses_to_the_processor_out_of_band_read_only_where_it_is_read(value):
    object_id = b"O" * 16
    if value == "not a pickle":  # a client's bug, or worse: the processor's deserialization will say so
        frames: List[Any] = [b"\x80\x05garbage", bytearray(100_000)]
    else:
        frames = serialize_payload(DefaultSerializer(), value)
    h = Harness(pipeline_depth=0)
    h.storage[object_id] = frames
    h.assign(make_task(1, arguments=[m.Argument("", m.ArgumentKind.OBJECT, object_id)]))
    h.answer_gets()
    [(_, sent, _)] = h.top().arguments
    assert len(sent) == 2 and sent[0] == frames[0]
    buffer = sent[1].raw()  # what the Pipe writes out of band
    assert bytes(buffer) == bytes(memoryview(frames[1]))
    assert buffer.readonly == isinstance(value, bytes)  # a bytes value is read into bytes, the rest writable


def test_the_object_cache_mirror_is_bounded_by_bytes():
    first, second = b"A" * 16, b"B" * 16
    h = Harness(pipeline_depth=0, object_cache_bytes=10)
    h.storage.update({first: b"123456", second: b"7890ab"})
    tasks = [(1, first), (2, second), (3, first)]
    h.assign(*[make_task(n, arguments=[m.Argument("", m.ArgumentKind.OBJECT, o)]) for n, o in tasks])
    sent = []
    for _ in tasks:
        h.answer_gets()
        sent.append(h.top().arguments[0][1])
        h.finish()
    assert sent == [b"123456", b"7890ab", b"123456"]  # the second evicted the first (6 + 6 > 10 bytes)


def test_sized_lru_cache_evicts_least_recently_used_by_size():
    cache: SizedLRUCache[str, int] = SizedLRUCache(10)
    cache.put("a", 1, 4)
    cache.put("b", 2, 4)
    assert cache.get("a") == 1  # now the most recently used
    cache.put("c", 3, 4)
    assert "b" not in cache and cache.get("a") == 1 and cache.size == 8
    cache.put("big", 4, 11)  # larger than the whole cache: not kept


def test_a_scheduler_older_than_1_3_is_not_told_of_waits():
    h = Harness(connect=False)
    h.handle(FromScheduler(m.HelloAck(m.Version(1, 2), "tcp://127.0.0.1:2346", 2.0, 60.0)))
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.wait()
    assert h.running_task() == task_id(2)  # the worker still runs other tasks while one waits
    h.finish()
    h.resume()
    h.finish()
    assert [r.task_id for r in h.results()] == [task_id(2), task_id(1)] and h.take(m.WaitingTasks) == []
