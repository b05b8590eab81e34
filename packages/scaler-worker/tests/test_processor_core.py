"""The processor's core (`ProcessorCore`) driven through `handle`: no Pipe, no greenlets, no clock. Each test
plays the hub: it hands the core what was read and what the task it ran did, and checks what the core says to
the agent and what the hub does next."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import pytest
from core_harness import make_task, task_id
from processor_pair import FakeLoaded

from scaler.protocol.lifecycle import TransitionError
from scaler.protocol.messages import TaskStatus
from scaler.worker.processor_caches import ProcessorCaches
from scaler.worker.processor_core import (
    AgentGone,
    Die,
    FromAgent,
    HeldDue,
    Idle,
    Leave,
    ProcessorCore,
    ReadAll,
    ReadOne,
    ResumeTask,
    SendToAgent,
    StartTask,
    TaskEnded,
    TaskWaits,
)
from scaler.worker.processor_protocol import (
    RESULT_HOLD_LIMIT_SECONDS,
    RESULT_HOLD_SECONDS,
    Drop,
    Dropped,
    FunctionLoaded,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
)
from scaler.worker.processor_task_lifecycle import HubEvent, HubState
from scaler.worker.task_runner import ReadyTask

FUNCTION = b"F" * 16
QUICK = 0.00001  # seconds: a task quick enough for its result to be held
SLOW = 1.0


def task(number: int, sent_ahead: bool = False, function: Optional[bytes] = None, objects=()) -> ProcessorTask:
    arguments: List[Tuple[str, Any, bytes]] = [("", b"argument", b"")] + [("", data, oid) for oid, data in objects]
    return ProcessorTask(task_id(number), FUNCTION, function, b"", None, arguments, False, sent_ahead=sent_ahead)


def result(number: int, seconds: float = SLOW) -> ProcessorResult:
    return ProcessorResult(task_id(number), TaskStatus.SUCCESS, b"ok", "", None, seconds)


class Hub:
    """The core, and what it said: to the agent, and the hub's next move."""

    def __init__(self) -> None:
        self.core = ProcessorCore(FakeLoaded)
        self.now = 0.0
        self.sent: List[Any] = []
        self.move: Any = None
        self.handle(FromAgent(()))
        assert self.move == ReadOne()

    def handle(self, event: Any) -> List[Any]:
        effects = self.core.handle(event, self.now)
        if type(event) is not HeldDue:
            self.move = effects.pop()
        assert all(type(effect) is SendToAgent for effect in effects)
        messages = [effect.message for effect in effects]
        self.sent.extend(messages)
        return messages

    def started(self) -> bytes:
        assert type(self.move) is StartTask, self.move
        return self.move.task.task.task_id


def test_a_task_sent_as_nothing_ran_starts_without_reading_again_and_its_result_goes_at_once():
    hub = Hub()
    hub.handle(FromAgent([[task(1, function=b"add")]]))
    assert hub.started() == task_id(1)
    assert hub.move.task.function.name == "add"
    assert hub.handle(TaskEnded(result(1, QUICK))) == [[FunctionLoaded(FUNCTION, "add"), result(1, QUICK)]]
    assert hub.move == ReadOne()  # the FIFO is empty: sent at once, however quick


def test_a_task_sent_ahead_starts_only_once_the_pipe_was_read():
    hub = Hub()
    hub.handle(FromAgent([[task(1, sent_ahead=True)]]))
    assert hub.move == ReadAll()  # a Drop of it may follow
    hub.handle(FromAgent([Drop(task_id(1))]))
    assert hub.sent == [Dropped(task_id(1))] and hub.move == ReadOne()
    assert hub.core.state_of(task_id(1)) is None


def test_quick_results_are_held_while_the_fifo_has_tasks_and_go_with_the_next_message():
    hub = Hub()
    hub.handle(FromAgent([[task(1), task(2, sent_ahead=True), task(3, sent_ahead=True)]]))
    assert hub.started() == task_id(1)
    assert hub.handle(TaskEnded(result(1, QUICK))) == []  # held: task 2 starts at once, without reading
    assert hub.started() == task_id(2)
    hub.now += RESULT_HOLD_SECONDS / 10
    assert hub.handle(TaskEnded(result(2, QUICK))) == []
    assert hub.started() == task_id(3)
    assert hub.handle(TaskEnded(result(3, QUICK))) == [[result(1, QUICK), result(2, QUICK), result(3, QUICK)]]


def test_a_slow_result_and_an_old_hold_go_at_once():
    hub = Hub()
    hub.handle(FromAgent([[task(1), task(2, sent_ahead=True), task(3, sent_ahead=True), task(4, True)]]))
    assert hub.handle(TaskEnded(result(1, SLOW))) == [result(1, SLOW)]
    assert hub.handle(TaskEnded(result(2, QUICK))) == []
    hub.now += RESULT_HOLD_SECONDS
    assert hub.handle(TaskEnded(result(3, QUICK))) == [[result(2, QUICK), result(3, QUICK)]]


def test_what_is_held_goes_when_the_watcher_finds_it_due_while_the_next_task_runs():
    hub = Hub()
    hub.handle(FromAgent([[task(1), task(2, sent_ahead=True)]]))
    hub.handle(TaskEnded(result(1, QUICK)))
    assert hub.started() == task_id(2) and hub.core.send_held_by == RESULT_HOLD_LIMIT_SECONDS
    hub.now = RESULT_HOLD_LIMIT_SECONDS / 2
    assert hub.handle(HeldDue()) == []
    hub.now = RESULT_HOLD_LIMIT_SECONDS
    assert hub.handle(HeldDue()) == [result(1, QUICK)]
    assert hub.core.send_held_by == float("inf") and hub.started() == task_id(2)  # (the hub's move is its own)
    assert hub.handle(TaskEnded(result(2, QUICK))) == [result(2, QUICK)]


def test_a_drop_read_as_a_task_ends_is_answered_before_its_result_and_a_late_one_not_at_all():
    hub = Hub()
    hub.handle(FromAgent([[task(1), task(2, sent_ahead=True), task(3, sent_ahead=True)]]))
    assert hub.handle(TaskEnded(result(1, SLOW), [Drop(task_id(2))])) == [[Dropped(task_id(2)), result(1, SLOW)]]
    assert hub.started() == task_id(3)
    assert hub.handle(TaskEnded(result(3, SLOW), [Drop(task_id(3))])) == [result(3, SLOW)]  # it had started
    assert hub.move == ReadOne()


def test_a_waiting_task_lets_the_fifo_run_and_resumes_once_it_is_empty_in_the_order_waits_ended():
    hub = Hub()
    hub.handle(FromAgent([[task(1)]]))
    assert hub.handle(TaskWaits(task_id(1), None)) == [TaskWaiting(task_id(1), True)]
    assert hub.move == Idle(None)
    hub.handle(FromAgent([[task(2)]]))
    assert hub.started() == task_id(2)
    assert hub.handle(TaskWaits(task_id(2), None)) == [TaskWaiting(task_id(2), True)]
    hub.handle(FromAgent([[task(3)]], woken=[task_id(2)]))  # task 2's wait ends first, while task 3 starts
    assert hub.started() == task_id(3)
    hub.handle(TaskEnded(result(3, QUICK), woken=[task_id(1)]))  # (the Pipe was read as it ended)
    assert hub.sent[-2:] == [result(3, QUICK), TaskWaiting(task_id(2), False)]  # nothing in the FIFO: not held
    assert hub.move == ResumeTask(task_id(2))
    hub.handle(TaskEnded(result(2)))
    assert hub.sent[-2:] == [result(2), TaskWaiting(task_id(1), False)] and hub.move == ResumeTask(task_id(1))
    hub.handle(TaskEnded(result(1)))
    assert hub.move == ReadOne() and hub.core.waiting == 0


def test_a_wait_with_a_timeout_is_over_when_it_passes_and_a_stale_timeout_is_not():
    hub = Hub()
    hub.handle(FromAgent([[task(1)]]))
    hub.handle(TaskWaits(task_id(1), 2.0))
    assert hub.move == Idle(2.0)
    hub.now = 1.0
    hub.handle(FromAgent([], woken=[task_id(1)]))  # its wait ended before the timeout
    hub.handle(FromAgent([]))
    assert hub.move == ResumeTask(task_id(1))
    hub.handle(TaskWaits(task_id(1), 5.0))  # a second wait: the first one's timeout is not its own
    hub.now = 2.5
    hub.handle(FromAgent([]))
    assert hub.move == Idle(6.0) and hub.core.state_of(task_id(1)) is HubState.WAITING
    hub.now = 6.0
    hub.handle(FromAgent([]))
    assert hub.move == ReadAll()
    hub.handle(FromAgent([]))
    assert hub.move == ResumeTask(task_id(1))


def test_the_agent_closing_the_pipe_ends_the_processor_gracefully_only_when_nothing_is_here():
    hub = Hub()
    hub.handle(AgentGone())
    assert hub.move == Leave()
    hub = Hub()
    hub.handle(FromAgent([[task(1)]]))
    hub.handle(TaskWaits(task_id(1), None))
    hub.handle(AgentGone())
    assert hub.move == Die() and hub.core.state_of(task_id(1)) is None
    hub = Hub()
    hub.handle(FromAgent([[task(1), task(2, sent_ahead=True)]]))
    hub.handle(TaskEnded(result(1, SLOW)))
    hub.handle(TaskEnded(result(2, SLOW)))
    hub.handle(FromAgent([[task(3, sent_ahead=True)]]))
    assert hub.move == ReadAll()
    hub.handle(AgentGone())
    assert hub.move == Die()


def test_an_event_the_table_has_no_transition_for_names_the_task_and_its_story():
    hub = Hub()
    hub.handle(FromAgent([[task(1)]]))
    hub.handle(TaskEnded(result(1)))
    hub.handle(FromAgent([[task(2)]]))
    running = hub.core._running
    with pytest.raises(TransitionError, match=r"task in the processor 0+2: no transition from running on resume"):
        hub.core._step(running, HubEvent.RESUME)


def test_the_runner_and_the_processor_apply_one_cache_rule_and_hold_the_same_entries():
    """The agent's copy (`outgoing`) and the processor's caches (`incoming`), fed the same tasks in the same order,
    hold the same IDs, whatever the capacity forgets; an object the processor lacks is a clear internal error."""
    agent: ProcessorCaches[bool] = ProcessorCaches(object_cache_bytes=20, function_capacity=2)
    processor: ProcessorCaches[Any] = ProcessorCaches(object_cache_bytes=20, function_capacity=2)
    sent_function = []
    for number, (function_id, object_id) in enumerate([(b"a", b"x"), (b"b", b"y"), (b"a", b"x"), (b"c", b"z"),
                                                       (b"b", b"y"), (b"a", b"x")]):  # fmt: skip
        ready = ReadyTask(
            make_task(number, function_id=function_id.ljust(16, b"_")), b"function " + function_id, None,
            [("", b"7" * 8, object_id)], 1,
        )  # fmt: skip
        sent = agent.outgoing(ready, False)
        sent_function.append(sent.function is not None)
        function, serializer, arguments, problem = processor.incoming(sent, FakeLoaded)
        assert problem is None and serializer is None and function.name == "function " + function_id.decode()
        assert arguments == [("", b"7" * 8, object_id)]
        for cache in ("functions", "serializers", "objects"):
            assert list(getattr(agent, cache)._entries) == list(getattr(processor, cache)._entries)
    assert sent_function == [True, True, False, True, True, True]  # b"b" and then b"a" were forgotten
    missing = ProcessorTask(task_id(9), b"never".ljust(16, b"_"), None, b"", None, [("", None, b"q")], False)
    problem = processor.incoming(missing, FakeLoaded)[3]
    assert isinstance(problem, RuntimeError) and "no cached function" in str(problem)
