"""Tasks that take other tasks' results (futures as arguments), held by the scheduler core until those end."""

from __future__ import annotations

from typing import List

from test_scheduler_core import CLIENT, OTHER_CLIENT, WORKER_A, connect_client, core_with, routed, sent, sent_tasks

from scaler.protocol import messages as m
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import FromPeer
from scaler.scheduler.task_inputs import HELD_TASK, HeldEvent, HeldState

TASK, INLINE, OBJECT = m.ArgumentKind.TASK, m.ArgumentKind.INLINE, m.ArgumentKind.OBJECT


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def task(n: int, *inputs: int) -> m.Task:
    """Task ``n``, whose arguments are ``inputs``' results, and a plain one."""
    arguments = [m.Argument("", TASK, tid(i)) for i in inputs] + [m.Argument("", INLINE, b"plain")]
    return m.Task(task_id=tid(n), function_id=b"f", arguments=arguments)


def submit(core: SchedulerCore, *tasks: m.Task, client: bytes = CLIENT, now: float = 1.0) -> List:
    return core.handle(FromPeer(client, routed(*tasks)), now)


def end(core: SchedulerCore, n: int, status=m.TaskStatus.SUCCESS, kind=m.PayloadKind.INLINE, payload=b"value"):
    result = m.TaskResult(tid(n), 1, status, kind, payload, "why")
    return core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result])), 2.0)


def results(effects, client: bytes = CLIENT) -> List[m.TaskResult]:
    return [r for batch in sent(effects, to=client, kind=m.TaskResultBatch) for r in batch.results]


def test_a_dependent_is_held_until_its_input_succeeds_and_then_takes_its_value():
    core = core_with(capacity=10)
    effects = submit(core, task(1), task(2, 1))
    assert [t.task_id for t in sent_tasks(effects)] == [tid(1)]  # no room taken by the dependent
    effects = end(core, 1, payload=b"one")
    assert [r.task_id for r in results(effects)] == [tid(1)]  # the input's result still reaches its client
    (released,) = sent_tasks(effects)
    assert released.task_id == tid(2)
    assert [(a.kind, a.data) for a in released.arguments] == [(INLINE, b"one"), (INLINE, b"plain")]


def test_a_stored_result_is_passed_by_its_object_id_to_every_dependent():
    core = core_with(capacity=10)
    submit(core, task(1), *(task(n, 1) for n in range(2, 7)))
    released = sent_tasks(end(core, 1, kind=m.PayloadKind.OBJECT, payload=b"object-1"))
    assert sorted(t.task_id for t in released) == [tid(n) for n in range(2, 7)]
    assert {(t.arguments[0].kind, t.arguments[0].data) for t in released} == {(OBJECT, b"object-1")}


def test_a_task_of_several_inputs_waits_for_all_and_a_chain_runs_link_by_link():
    core = core_with(capacity=10)
    submit(core, task(1), task(2), task(3, 1, 2), task(4, 3))
    assert sent_tasks(end(core, 1)) == []
    (third,) = sent_tasks(end(core, 2))
    assert third.task_id == tid(3)
    (fourth,) = sent_tasks(end(core, 3, payload=b"three"))
    assert fourth.task_id == tid(4) and fourth.arguments[0].data == b"three"


def test_a_failed_input_fails_its_dependents_and_theirs_with_its_own_failure():
    core = core_with(capacity=10)
    submit(core, task(1), task(2, 1), task(3, 2))
    effects = end(core, 1, status=m.TaskStatus.FAILED, payload=b"exception")
    ended = {r.task_id: r for r in results(effects)}
    assert set(ended) == {tid(1), tid(2), tid(3)}
    for n in (2, 3):
        assert (ended[tid(n)].status, ended[tid(n)].payload, ended[tid(n)].error_text) == (
            m.TaskStatus.FAILED, b"exception", "why",
        )  # fmt: skip
    assert sent_tasks(effects) == []
    assert core._inputs.held_count == 0


def test_a_cancelled_input_cancels_its_dependents_and_a_held_task_cancels_at_once():
    core = core_with(workers=(), capacity=10)  # nothing runs: the input stays queued
    submit(core, task(1), task(2, 1), task(3, 2), task(4, 1))
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(4)])), 2.0)  # held: confirmed at once
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert (confirm.task_ids, confirm.cancelled) == ([tid(4)], [True])
    assert list(core._inputs._dependents[tid(1)]) == [tid(2)]  # its input no longer waits for it
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(1)])), 3.0)
    assert {r.task_id: r.status for r in results(effects)} == {
        tid(2): m.TaskStatus.CANCELLED, tid(3): m.TaskStatus.CANCELLED,
    }  # fmt: skip
    assert core._inputs.held_count == 0 and not core._inputs._dependents


def test_an_input_the_scheduler_does_not_hold_is_answered_inputs_gone():
    core = core_with(capacity=10)
    submit(core, task(1))
    end(core, 1)  # ended: its result went to the client
    connect_client(core, OTHER_CLIENT)
    submit(core, task(5), client=OTHER_CLIENT)
    effects = submit(core, task(2, 1), task(3, 2), task(4, 5))  # ended; depends on a refused one; another's
    assert {r.task_id: r.status for r in results(effects)} == {tid(n): m.TaskStatus.INPUTS_GONE for n in (2, 3, 4)}
    assert core._inputs.held_count == 0 and sent_tasks(effects) == []


def test_a_task_sent_again_while_held_is_held_once_and_a_client_that_leaves_takes_its_held_tasks():
    core = core_with(workers=(), capacity=10)
    submit(core, task(1), task(2, 1))
    submit(core, task(2, 1))
    assert core._inputs.held_count == 1
    core.handle(FromPeer(CLIENT, m.ObjectInstruction(m.ObjectInstructionKind.CLEAR, CLIENT, [])), 2.0)
    assert core._inputs.held_count == 0


def test_the_held_task_table_ends_every_held_task_on_cancel_and_client_gone():
    for event in (HeldEvent.CANCEL, HeldEvent.CLIENT_GONE):
        assert HELD_TASK.step(HeldState.WAITING, event, "t").next_state in HELD_TASK.terminal
