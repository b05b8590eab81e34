"""Property tests: the agent's model of its processor and the processor's own core, driven together.

Hypothesis drives a `processor_pair.Pair` (a `ProcessorRunner` and the `ProcessorCore` of each processor it
starts, joined by a Pipe played by hand) with random interleavings of tasks of several priorities (taken ahead
into the processor's FIFO during runs of quick tasks, and taken back when a better one comes), each end
reading when it will, tasks that return quickly or slowly, tasks that wait inside the client and waits that
end in any order or time out, results held for company, cancels and timeouts of tasks sent ahead or started,
tasks taken back for the scheduler's balancing (also from behind a task that runs long), processor deaths, and
the agent leaving. After every step: the runner reports each task it took at most once as finished, died or
cancelled, and only as returned before that; inside each processor every task read is held by its core or has
ended in exactly one terminal state (answered or dropped), never both; and when nothing is in flight between
them, the runner's model of the processor (its FIFO, its started tasks) is the processor's own (but for a task
sent as nothing ran that crossed a resume). At the end,
everything left is let finish: every task then ended exactly once.
"""

from __future__ import annotations

from typing import Optional

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from processor_pair import Pair

from scaler.worker.processor_core import ReadOne

_TERMINAL = {"finished", "died", "cancelled"}


def _live(machine: ProcessorPairMachine) -> bool:
    return not machine.left and machine.pair.current is not None and machine.pair.current.alive


class ProcessorPairMachine(RuleBasedStateMachine):
    @initialize(depth=st.sampled_from([0, 1, 4]), tiny_depth=st.sampled_from([0, 8]))
    def start(self, depth: int, tiny_depth: int) -> None:
        self.pair = Pair(depth, tiny_depth)  # (a task that took under RESULT_HOLD_TASK_SECONDS: deeper, if not 0)
        self.left = False

    # ------------------------------------------------------------------------- the worker core

    @precondition(lambda self: not self.left)
    @rule(priority=st.integers(0, 2), count=st.integers(1, 3))
    def assign(self, priority: int, count: int) -> None:
        for _ in range(count):
            self.pair.assign(priority)

    @precondition(lambda self: not self.left and self.pair.owner.taken)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        owner = self.pair.owner
        task_id = data.draw(st.sampled_from(sorted(set(owner.taken) - owner.cancelled) or sorted(owner.taken)))
        owner.cancelled.add(task_id)
        self.pair.act(self.pair.runner.cancel, owner, [task_id])

    @precondition(lambda self: not self.left and "started" in self.pair.owner.taken.values())
    @rule(data=st.data())
    def time_out(self, data) -> None:
        owner = self.pair.owner
        task_id = data.draw(st.sampled_from(sorted(t for t, how in owner.taken.items() if how == "started")))
        self.pair.act(self.pair.runner.abort, owner, task_id, "it ran past its timeout")

    @precondition(lambda self: not self.left)
    @rule(count=st.integers(1, 4))
    def take_back(self, count: int) -> None:
        """The scheduler balances: the worker's queue is short, it asks the runner for its unstarted tasks."""
        self.pair.act(self.pair.runner.take_back, self.pair.owner, count)

    @precondition(lambda self: not self.left)
    @rule(count=st.integers(1, 4))
    def agent_reads(self, count: int) -> None:
        self.pair.agent_reads(count)

    # ------------------------------------------------------------------------- the processor

    @precondition(_live)
    @rule()
    def processor_reads(self) -> None:
        self.pair.current.read_one()

    @precondition(lambda self: _live(self) and self.pair.current.running is not None)
    @rule(quick=st.booleans())
    def task_returns(self, quick: bool) -> None:
        self.pair.current.task_returns(quick)

    @precondition(lambda self: _live(self) and self.pair.current.running is not None)
    @rule(timeout=st.sampled_from([None, None, 0.5]))
    def task_waits(self, timeout: Optional[float]) -> None:
        self.pair.current.task_waits(timeout)

    @precondition(lambda self: _live(self) and self.pair.current.switched_out)
    @rule(data=st.data())
    def wait_ends(self, data) -> None:
        shell = self.pair.current
        shell.wait_ends(data.draw(st.sampled_from(sorted(shell.switched_out))))

    @rule(seconds=st.sampled_from([0.001, 0.006, 0.2, 1.0]))
    def time_passes(self, seconds: float) -> None:
        self.pair.now += seconds
        if _live(self):
            self.pair.current.time_passed()

    @precondition(_live)
    @rule()
    def processor_dies(self) -> None:
        self.pair.processor_dies()

    @precondition(lambda self: _live(self) and self.pair.settled() and type(self.pair.current.move) is not ReadOne)
    @rule()
    def agent_leaves(self) -> None:
        """The worker stops: the agent closes the Pipe of a processor that holds tasks; it ends at once."""
        if self.pair.current.running is None:
            self.pair.agent_leaves()
            self.left = True

    # ------------------------------------------------------------------------- checks

    @invariant()
    def each_task_ends_once_for_the_runner_and_once_inside_each_processor(self) -> None:
        for task_id, fates in self.pair.owner.ends.items():
            assert all(fate == "returned" for fate in fates[:-1]), (task_id.hex(), fates)
        for shell in self.pair.shells.values():
            ends = shell.ended()
            for task_id in set(shell.read):
                held = shell.core.state_of(task_id) is not None
                assert shell.read.count(task_id) == len(ends[task_id]) + held, (task_id.hex(), ends[task_id])
        assert self.pair.runner.running <= 2

    @invariant()
    def the_runner_knows_what_its_processor_holds(self) -> None:
        pair = self.pair
        if self.left or not pair.settled():
            return
        core, runner = pair.current.core, pair.runner
        assert set(runner.inbox) | set(runner.started_tasks) == set(core.fifo) | set(core.started_tasks)
        # a task the runner sent as nothing ran, while the processor resumed a waiting task: it starts when that
        # one ends or waits (the runner takes both for running meanwhile)
        crossed = set(runner.started_tasks) & set(core.fifo)
        assert not crossed or runner.running == 2
        assert runner.inbox == [task_id for task_id in core.fifo if task_id not in crossed]

    def teardown(self) -> None:
        pair = getattr(self, "pair", None)
        if pair is None or self.left:
            return
        for _ in range(500):
            pair.agent_reads(100)
            shell = pair.current
            if shell.running is not None:
                shell.task_returns(quick=False)
            elif shell.switched_out:
                for task_id in sorted(shell.switched_out):
                    shell.wait_ends(task_id)
            elif not shell.read_one():
                pair.now += 1.0
                shell.time_passed()
            if not pair.owner.queue and not pair.owner.taken and pair.settled():
                break
        owner = pair.owner
        assert not owner.queue and not owner.taken, (owner.queue, owner.taken)
        for number in owner.priorities:
            fates = owner.ends[number.to_bytes(16, "big")]
            assert fates and fates[-1] in _TERMINAL, (number, fates)
        shell = pair.current
        assert not shell.core.started_tasks and not shell.core.fifo
        ends = shell.ended()
        for task_id in set(shell.read):
            assert shell.read.count(task_id) == len(ends[task_id])


ProcessorPairMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_runner_and_processor_core_together = ProcessorPairMachine.TestCase
