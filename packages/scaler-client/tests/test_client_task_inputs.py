"""Futures as task arguments in the client's core (task_inputs.py): what goes to the scheduler, what waits here."""

from __future__ import annotations

from types import SimpleNamespace

from core_driver import (  # conftest puts this directory on sys.path
    CANCELLED,
    ERROR,
    READY,
    RESULT,
    STORAGE,
    acknowledge_function,
    connected,
    new_core,
    outcomes,
    put_ack,
    results,
    run,
    sent_tasks,
    storage_requests,
    task,
    tid,
    to_scheduler,
)

from scaler.client.client_events import Connect, FromScheduler, FromStorage, InputsEnded, ResolveInputs, Submit
from scaler.client.task_builder import Puts
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    HelloAck,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    TaskBatch,
    TaskResult,
    TaskStatus,
    Version,
)

TASK = ArgumentKind.TASK


def dependent(n: int, *inputs: int) -> Submit:
    """Task ``n`` taking the results of tasks ``inputs`` (their futures: only their task IDs matter here)."""
    puts = Puts()
    puts.inputs = {tid(n): [SimpleNamespace(task_id=tid(i)) for i in inputs]}
    return Submit([task(n, [Argument("", TASK, tid(i)) for i in inputs])], puts)


def test_a_task_taking_a_result_goes_as_it_is_to_a_scheduler_that_holds_it():
    core = connected()
    acknowledge_function(core)
    effects = run(core, 0.0, Submit([task(1)], {}), dependent(2, 1))
    (batch,) = [m for m in to_scheduler(effects) if isinstance(m, TaskBatch)]
    assert [t.task_id for t in batch.tasks] == [tid(1), tid(2)]
    assert [(a.kind, a.data) for a in batch.tasks[1].arguments] == [(TASK, tid(1))]
    assert not [e for e in effects if isinstance(e, ResolveInputs)]


def test_inputs_gone_parks_the_task_until_its_inputs_ended_then_it_goes_with_their_values():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, dependent(2, 1))
    gone = TaskResult(tid(2), 0, TaskStatus.INPUTS_GONE, PayloadKind.NONE, b"", "")
    effects = run(core, 1.0, results(gone))
    (resolve,) = [e for e in effects if isinstance(e, ResolveInputs)]
    assert resolve.task_id == tid(2) and outcomes(effects) == {}  # the future does not end
    effects = run(core, 2.0, InputsEnded(tid(2), {0: b"value"}))
    (batch,) = [m for m in to_scheduler(effects) if isinstance(m, TaskBatch)]
    assert [(a.kind, a.data) for a in batch.tasks[0].arguments] == [(ArgumentKind.INLINE, b"value")]


def test_a_large_value_is_put_and_an_input_that_failed_or_was_cancelled_ends_the_task_here():
    core = connected()
    acknowledge_function(core)
    gone = [TaskResult(tid(n), 0, TaskStatus.INPUTS_GONE, PayloadKind.NONE, b"", "") for n in (2, 3, 4)]
    run(core, 0.0, dependent(2, 1), dependent(3, 1), dependent(4, 1), results(*gone))
    effects = run(core, 1.0, InputsEnded(tid(2), {0: [b"x" * 100_000]}))
    ((put, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert sent_tasks(effects) == []  # it waits for its put
    effects = run(core, 1.5, put_ack(put))
    assert sent_tasks(effects) == [tid(2)]
    effects = run(core, 2.0, InputsEnded(tid(3), {}, ValueError("input failed")), InputsEnded(tid(4), {}, None, True))
    found = outcomes(effects)
    assert found["task3"][0] == ERROR and str(found["task3"][1]) == "input failed"
    assert found["task4"] == (CANCELLED, None)


def test_a_scheduler_older_than_1_8_never_sees_the_task_before_its_inputs_ended():
    core = new_core()
    run(core, 0.0, Connect(READY), FromScheduler(HelloAck(version=Version(1, 7), object_storage_address=STORAGE)))
    acknowledge_function(core)
    effects = run(core, 0.0, Submit([task(1)], {}), dependent(2, 1))
    assert sent_tasks(effects) == [tid(1)]
    assert [e.task_id for e in effects if isinstance(e, ResolveInputs)] == [tid(2)]


def test_an_input_result_in_storage_is_kept_there_until_the_tasks_taking_it_ended():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, Submit([task(1)], {}), dependent(2, 1), dependent(3, 1))
    stored = TaskResult(tid(1), 1, TaskStatus.SUCCESS, PayloadKind.OBJECT, b"r" * 16)
    ((get, _),) = storage_requests(run(core, 1.0, results(stored)), ObjectRequestKind.GET)
    answer = ObjectResponse(get.request_id, ObjectRequestKind.GET, [b"r" * 16], [ObjectStatus.OK], [1])
    effects = run(core, 1.5, FromStorage(answer, [b"v"]))
    assert outcomes(effects)["task1"][0] == RESULT
    assert storage_requests(effects, ObjectRequestKind.DELETE) == []  # the dependents take it by its ID
    done = [TaskResult(tid(n), 1, TaskStatus.SUCCESS, PayloadKind.INLINE, b"x") for n in (2, 3)]
    assert storage_requests(run(core, 2.0, results(done[0])), ObjectRequestKind.DELETE) == []
    ((delete, _),) = storage_requests(run(core, 3.0, results(done[1])), ObjectRequestKind.DELETE)
    assert delete.object_ids == [b"r" * 16]
