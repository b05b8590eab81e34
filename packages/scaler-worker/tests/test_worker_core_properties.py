"""Property tests: the worker core driven with random interleavings of everything that can happen to it.

Hypothesis drives a `core_harness.Harness` (the scheduler, the storage server and a model of the processor
around a real `WorkerCore` + `ProcessorRunner`) with task batches, repeated assignments, cancels, balance
requests, storage answers (found, missing, refused, never), results, tasks waiting in the client and their
waits ending in any order, races with the pipe, processor deaths, time passing (timeouts, results held for
company, storage silence), the scheduler going away and coming back (the worker holds its answers meanwhile,
and names what it holds in its Hello), and the scheduler or a stop signal ending the worker. After every step:
no task is answered twice (a result, a cancel confirm saying cancelled, a place in a balance response: one of
them, once), no result comes after a confirmed cancel, a result answers the task's latest attempt, the core's
books agree with themselves and with the runner's, a cancel of a task the runner has not started is confirmed
at once, the scheduler was told exactly which of its tasks wait (they hold no room there), and the runner's
view of the processor is the processor's own. At the end, everything left is let finish: every task assigned
has then been answered exactly once, unless the worker left (then it says nothing more, and the scheduler runs
its tasks elsewhere).
"""

from __future__ import annotations

from typing import Dict, Set

from core_harness import FUNCTION, Harness, make_task, task_id
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from scaler.protocol import messages as m
from scaler.protocol.connection_events import DOWN, UP
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_lifecycle import SentState
from scaler.worker.task_lifecycle import TaskState
from scaler.worker.worker_events import ConnectionChanged, FromScheduler, StopRequested

m_Hello = m.Hello
MISSING_FUNCTION = b"M" * 16
OBJECT = b"O" * 16
TIMEOUT_SECONDS = 5.0
STORAGE_TIMEOUT_SECONDS = 20.0
_HELD_BY_RUNNER = {TaskState.RUNNING, TaskState.CANCELLING, TaskState.TIMING_OUT}
_QUEUED = {TaskState.QUEUED, TaskState.STAGED}


class WorkerCoreMachine(RuleBasedStateMachine):
    @initialize(
        inline=st.sampled_from([0, 4, 1 << 20]),
        prefetch=st.integers(1, 4),
        depth=st.sampled_from([0, 1, 2, 4]),
        tiny_depth=st.sampled_from([0, 8]),  # the tasks here take no time: deeper while it is not 0
        batch_seconds=st.sampled_from([0.0, 0.005]),
    )
    def start(self, inline: int, prefetch: int, depth: int, tiny_depth: int, batch_seconds: float) -> None:
        self.h = Harness(
            inline_threshold_bytes=inline,
            prefetch_tasks=prefetch,
            pipeline_depth=depth,
            tiny_tasks_depth=tiny_depth,
            storage_timeout_seconds=STORAGE_TIMEOUT_SECONDS,
            result_batch_seconds=batch_seconds,
        )
        self.h.storage[OBJECT] = b"object payload"
        self.batch_seconds = batch_seconds
        self.next_number = 1
        self.attempts: Dict[bytes, int] = {}  # task -> its latest attempt, while not answered
        self.answered: Dict[bytes, int] = {}
        self.assigned: Set[bytes] = set()
        self.cancels_asked: Set[bytes] = set()
        self.cancelled: Set[bytes] = set()  # the tasks a confirm said cancelled
        self.waiting_heard: Set[bytes] = set()  # the tasks the scheduler was told wait (WaitingTasks)
        self.away = False  # the connection to the scheduler is lost: it sends nothing, and hears nothing

    def connected(self) -> bool:
        return not self.away

    # ------------------------------------------------------------------------- the scheduler

    @rule(
        specs=st.lists(
            st.tuples(
                st.integers(0, 2),  # priority
                st.sampled_from([FUNCTION, FUNCTION, FUNCTION, MISSING_FUNCTION]),
                st.sampled_from([0.0, 0.0, TIMEOUT_SECONDS]),
                st.booleans(),  # an object-storage argument
                st.booleans(),  # store the result
            ),
            min_size=1,
            max_size=4,
        )
    )
    @precondition(connected)
    def assign(self, specs) -> None:
        self._assign(specs)

    @precondition(connected)
    @rule(count=st.integers(2, 6))
    def a_run_of_quick_tasks(self, count: int) -> None:
        """Tasks whose data is at hand behind a running task that ends quickly: the worker sends them ahead."""
        self._assign([(0, FUNCTION, 0.0, False, False)] * count)
        self.h.answer_gets()
        if self.h.current is not None:
            self.h.tell(self.h.processor_finishes()._replace(seconds=0.001))

    def _assign(self, specs) -> None:
        tasks = []
        for priority, function_id, timeout, with_object, store_result in specs:
            arguments = [m.Argument("", m.ArgumentKind.OBJECT, OBJECT)] if with_object else []
            task = make_task(self.next_number, priority, function_id=function_id, timeout_seconds=timeout)
            if arguments:
                task.arguments = arguments
            task.store_result = store_result
            tasks.append(task)
            self.attempts[task.task_id] = task.attempt
            self.assigned.add(task.task_id)
            self.next_number += 1
        self.h.assign(*tasks)

    @precondition(lambda self: self.h.core.task_states() and not self.away)
    @rule(data=st.data())
    def assign_again(self, data) -> None:
        """The scheduler assigns a task this worker holds again, with a new attempt."""
        held = data.draw(st.sampled_from(sorted(self.h.core.task_states())))
        self.attempts[held] += 1
        task = make_task(int.from_bytes(held, "big"), attempt=self.attempts[held])
        self.h.assign(task)

    @precondition(connected)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        known = sorted(self.assigned) + [task_id(10_000)]
        self._cancel(data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=3)))

    @precondition(lambda self: set(self.h.runner.inbox) - set(self.h.runner.cancelled_tasks) and not self.away)
    @rule(data=st.data(), with_another=st.booleans())
    def cancel_sent_ahead(self, data, with_another: bool) -> None:
        """A cancel of a task sent ahead into the processor's FIFO (and maybe of another the worker holds)."""
        h = self.h
        ahead = sorted(set(h.runner.inbox) - set(h.runner.cancelled_tasks))
        ids = [data.draw(st.sampled_from(ahead))]
        if with_another and h.core.task_states():
            ids.append(data.draw(st.sampled_from(sorted(h.core.task_states()))))
        self._cancel(ids)

    def _cancel(self, ids) -> None:
        self.cancels_asked.update(ids)
        h = self.h
        h.handle(FromScheduler(m.TaskCancel(ids)))
        if h.exit_code is None:
            # whatever the processor does: a task queued or sent ahead is cancelled at once, a started one by
            # stopping the processor, a finished one is not cancelled
            confirms = [c for c in h.to_scheduler if isinstance(c, m.TaskCancelConfirm) and c.task_ids == ids]
            assert confirms, "the cancel waited for the processor"

    @precondition(connected)
    @rule(count=st.integers(0, 3))
    def balance(self, count: int) -> None:
        self.h.handle(FromScheduler(m.BalanceRequest(count)))

    @precondition(connected)
    @rule(how=st.sampled_from(["disconnect", "refusal", "stop", "silence"]))
    def worker_ends(self, how: str) -> None:
        h = self.h
        if how == "disconnect":
            h.handle(FromScheduler(m.DisconnectRequest("scheduler shutting down")))
        elif how == "refusal":
            h.handle(FromScheduler(m.Refusal(PROTOCOL_VERSION, "who are you?")))
        elif how == "stop":
            h.handle(StopRequested("received SIGTERM"))
        else:  # the scheduler goes away: nothing heard from it for longer than the worker timeout
            last = h.now
            while h.exit_code is None:
                h.tick(max(h.wake, h.now + 0.001))
                assert h.now - last < 3 * STORAGE_TIMEOUT_SECONDS
        assert h.exit_code is not None

    @precondition(lambda self: not self.away and self.h.exit_code is None)
    @rule()
    def scheduler_lost(self) -> None:
        """The connection closes (the scheduler died, or the network failed): the worker runs on, answering
        nothing until the scheduler is back."""
        self._collect()
        self.h.take(m.WorkerHeartbeat)  # what went before
        self.h.handle(ConnectionChanged(False, DOWN))
        self.away = True

    @precondition(lambda self: self.away)
    @rule()
    def scheduler_back(self) -> None:
        """It is back (restarted: it knows what the worker holds from its Hello, whose waiting tasks it counts so)."""
        h = self.h
        h.handle(ConnectionChanged(False, UP))
        self.away = False
        if h.exit_code is not None:
            return
        (hello,) = h.take(m.Hello)
        held = {each.task_id for each in hello.worker_info.held_tasks}
        assert set(h.core.task_states()) <= held <= set(self.attempts), "a Hello names what the worker holds"
        self.waiting_heard = {each.task_id for each in hello.worker_info.held_tasks if each.waiting}
        h.handle(FromScheduler(m.HelloAck(PROTOCOL_VERSION, "tcp://127.0.0.1:2346", 0.0, 0.0)))

    # ------------------------------------------------------------------------- the storage server

    @rule()
    def answer_gets(self) -> None:
        self.h.answer_gets()

    @rule(status=st.sampled_from([m.ObjectStatus.OK, m.ObjectStatus.OK, m.ObjectStatus.STORAGE_FULL]))
    def answer_puts(self, status: m.ObjectStatus) -> None:
        self.h.answer_puts(status)

    # ------------------------------------------------------------------------- the processor

    @precondition(lambda self: self.h.current is not None)
    @rule(status=st.sampled_from([m.TaskStatus.SUCCESS, m.TaskStatus.FAILED]), quick=st.booleans())
    def finish(self, status: m.TaskStatus, quick: bool) -> None:
        result = self.h.processor_finishes(status, payload=b"abcdef")
        self.h.tell(result._replace(seconds=0.001 if quick else 1.0))

    @precondition(lambda self: self.h.current is not None)
    @rule()
    def wait(self) -> None:
        self.h.wait()

    @precondition(lambda self: self.h.waiting)
    @rule(data=st.data())
    def wait_ends(self, data) -> None:
        """The wait of any waiting task ends (waits end in any order); it resumes once no task runs."""
        waiting = data.draw(st.sampled_from(self.h.waiting_ids()))
        self.h.resume(int.from_bytes(waiting, "big"))

    @rule()
    def toggle_hold(self) -> None:
        self.h.hold = not self.h.hold
        self.h.pump()

    @rule()
    def processor_dies(self) -> None:
        self.h.die("processor was killed by signal SIGKILL")

    # ------------------------------------------------------------------------- time

    @rule(seconds=st.sampled_from([0.001, 0.005, 1.0, TIMEOUT_SECONDS, STORAGE_TIMEOUT_SECONDS]))
    def time_passes(self, seconds: float) -> None:
        """Time passes; the scheduler is alive (its heartbeat echo arrives)."""
        h = self.h
        h.tick(h.now + seconds)
        if not self.away:
            h.handle(FromScheduler(m.WorkerHeartbeatEcho()))

    # ------------------------------------------------------------------------- checks

    def _collect(self) -> None:
        h = self.h
        if self.away:
            assert not [m for m in h.to_scheduler if not isinstance(m, m_Hello)], "sent while the scheduler is away"
            return
        answered = self.answered
        for result in h.results():
            assert result.task_id not in self.cancelled, "a result after a confirmed cancel"
            assert result.task_id in self.attempts, "answered twice, or never assigned"
            assert result.attempt == self.attempts.pop(result.task_id), "a result answers the latest attempt"
            answered[result.task_id] = answered.get(result.task_id, 0) + 1
        for confirm in h.take(m.TaskCancelConfirm):
            for cancelled_id, cancelled in zip(confirm.task_ids, confirm.cancelled, strict=True):
                if cancelled:
                    assert self.attempts.pop(cancelled_id, None) is not None, "cancelled twice, or answered"
                    self.cancelled.add(cancelled_id)
                    answered[cancelled_id] = answered.get(cancelled_id, 0) + 1
        for response in h.take(m.BalanceResponse):
            for given in response.task_ids:
                assert self.attempts.pop(given, None) is not None, "given back twice, or answered"
                answered[given] = answered.get(given, 0) + 1
        for notice in h.take(m.WaitingTasks):
            for waiting_id, waiting in zip(notice.task_ids, notice.waiting, strict=True):
                if waiting:
                    assert waiting_id not in self.waiting_heard, "told twice that it waits"
                    self.waiting_heard.add(waiting_id)
                else:
                    assert waiting_id in self.waiting_heard, "told it runs again, never that it waited"
                    self.waiting_heard.discard(waiting_id)
        self.waiting_heard -= set(answered)  # an answered task holds nothing at the scheduler

    @invariant()
    def every_task_is_answered_at_most_once(self) -> None:
        self._collect()
        assert all(count == 1 for count in self.answered.values()), self.answered

    @invariant()
    def the_books_agree(self) -> None:
        h = self.h
        if h.exit_code is not None:
            return
        states = h.core.task_states()
        # the core holds the tasks not answered yet, but those whose result waits for company and those
        # cancelled whose confirm waits for the other tasks of their cancel
        assert set(states) <= set(self.attempts)
        if self.batch_seconds == 0 and not self.away:  # (while the scheduler is away, every answer waits)
            assert set(self.attempts) - set(states) <= self.cancels_asked
        held = {tid for tid, state in states.items() if state in _HELD_BY_RUNNER}
        cancelled = set(h.runner.cancelled_tasks)  # still on the processor, their cancel confirmed
        assert cancelled <= self.cancelled and not cancelled & held
        assert held == (set(h.runner.started_tasks) | set(h.runner.inbox)) - cancelled
        queued = sum(1 for state in states.values() if state in _QUEUED)
        assert h.core.queued_count == queued + len(set(h.runner.inbox) - cancelled)
        # the scheduler knows which of the tasks it holds wait: those take no room there (once it hears again)
        waiting = {tid for tid in held if h.runner.state_of(tid) is SentState.WAITING}
        assert self.away or self.waiting_heard & set(states) == waiting
        assert h.runner.suspended == len(waiting) and h.runner.running <= 2
        if not h.hold and not h.pipe and not h.notices:
            assert sorted(h.runner.started_tasks) == h.started_ids()
            assert h.runner.inbox == h.fifo_ids()
            assert h.runner.running == (h.current is not None)

    @invariant()
    def a_worker_that_left_says_nothing_more(self) -> None:
        h = self.h
        if h.exit_code is None:
            return
        before = (len(h.to_scheduler), len(h.gets), len(h.puts), len(h.pipe))
        h.handle(FromScheduler(m.TaskBatch([make_task(99_999)])))
        h.tick(h.now + 100)
        assert (len(h.to_scheduler), len(h.gets), len(h.puts), len(h.pipe)) == before

    def teardown(self) -> None:
        """Let everything still here finish: then every task assigned has its one answer."""
        h = getattr(self, "h", None)
        if h is not None and self.away and h.exit_code is None:
            self.scheduler_back()
        if h is None or h.exit_code is not None:
            return
        h.hold = False
        h.pump()
        for _ in range(2000):
            h.answer_gets()
            h.answer_puts()
            if h.current is not None:
                h.finish()
            elif h.waiting:
                h.resume()
            h.tick(h.now + 0.01)
            h.handle(FromScheduler(m.WorkerHeartbeatEcho()))
            self._collect()
            if not self.attempts:
                break
        assert not self.attempts, f"never answered: {sorted(t.hex() for t in self.attempts)}"
        assert all(count == 1 for count in self.answered.values())
        assert set(self.answered) == self.assigned
        assert h.runner.started_tasks == [] and h.pipe == []


WorkerCoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_worker_core_state_machine = WorkerCoreMachine.TestCase
