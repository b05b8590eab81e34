"""Graph submissions in the client agent's core (graph_submissions.py, through `ClientCore.handle`): no sockets,
no threads, no clock."""

from __future__ import annotations

from typing import List

from core_driver import (
    CANCELLED,
    ERROR,
    FUNCTION,
    RESULT,
    connected,
    outcomes,
    put_ack,
    run,
    storage_requests,
    tid,
    to_scheduler,
)

from scaler.client.client_core import ClientCore
from scaler.client.client_events import Abort, Cancel, FromScheduler, PutObject, SubmitGraph
from scaler.protocol.errors import DisconnectedError, ObjectStorageRefusedError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    GraphTask,
    ObjectRequestKind,
    ObjectStatus,
    PayloadKind,
    Task,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
)

BIG = b"b" * 16


def graph_submission(targets=(3, 4), with_big_literal: bool = True) -> SubmitGraph:
    tasks = [
        Task(task_id=tid(1), function_id=FUNCTION),
        Task(task_id=tid(3), function_id=FUNCTION, arguments=[Argument("", ArgumentKind.TASK, tid(1))]),
        Task(task_id=tid(4), function_id=FUNCTION, arguments=[Argument("", ArgumentKind.OBJECT, BIG)]),
    ]
    message = GraphTask(graph_id=b"g" * 16, tasks=tasks, targets=[tid(t) for t in targets])
    puts = [(BIG, b"big literal")] if with_big_literal else []
    temporary = [BIG] if with_big_literal else []
    return SubmitGraph(message, puts, [FUNCTION, *temporary], temporary, [FUNCTION], message.targets)


def graphs_sent(effects) -> List[GraphTask]:
    return [message for message in to_scheduler(effects) if isinstance(message, GraphTask)]


def acknowledge(core: ClientCore, effects, status: ObjectStatus = ObjectStatus.OK):
    answers = [put_ack(request, status) for request, _ in storage_requests(effects, ObjectRequestKind.PUT)]
    return run(core, 0.1, *answers)


def result(n: int) -> FromScheduler:
    return FromScheduler(TaskResultBatch([TaskResult(tid(n), 1, TaskStatus.SUCCESS, PayloadKind.INLINE, b"value")]))


def test_graph_leaves_whole_once_its_objects_are_stored_and_resolves_target_by_target():
    core = connected()
    effects = run(core, 0.0, PutObject(0, FUNCTION, b"function"), graph_submission())
    assert graphs_sent(effects) == []
    ((put, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert put.object_ids == [FUNCTION, BIG] and blobs == [b"function", b"big literal"]
    (sent,) = graphs_sent(acknowledge(core, effects))
    assert sent.targets == [tid(3), tid(4)] and len(sent.tasks) == 3
    assert core.pending_tasks == 2

    effects = run(core, 0.2, result(3))
    assert outcomes(effects)["task3"][0] == RESULT
    assert storage_requests(effects, ObjectRequestKind.DELETE) == []  # target 4 may still need the literal
    effects = run(core, 0.3, result(4))
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [BIG] and core.pending_tasks == 0


def test_a_failed_put_fails_every_target_and_nothing_is_sent():
    core = connected()
    effects = acknowledge(core, run(core, 0.0, PutObject(0, FUNCTION, b"function"), graph_submission()),
                          ObjectStatus.TOO_LARGE)  # fmt: skip
    assert graphs_sent(effects) == []
    found = outcomes(effects)
    assert {name for name in found} == {"task3", "task4"}
    assert all(o == ERROR and isinstance(v, ObjectStorageRefusedError) for o, v in found.values())
    assert core.pending_tasks == 0


def test_a_graph_needing_an_object_whose_put_failed_fails_at_once_and_puts_nothing():
    core = connected()
    acknowledge(core, run(core, 0.0, PutObject(0, FUNCTION, b"function")), ObjectStatus.TOO_LARGE)
    effects = run(core, 0.2, graph_submission())
    found = outcomes(effects)
    assert set(found) == {"task3", "task4"} and all(o == ERROR for o, _ in found.values())
    assert storage_requests(effects, ObjectRequestKind.PUT) == [] and core.pending_tasks == 0


def test_cancelled_targets_are_left_out_of_a_graph_not_yet_sent_and_cancelled_at_the_scheduler_after():
    core = connected()
    effects = run(core, 0.0, PutObject(0, FUNCTION, b"function"), graph_submission())
    assert outcomes(run(core, 0.05, Cancel([tid(4)])))["task4"][0] == CANCELLED
    (sent,) = graphs_sent(acknowledge(core, effects))
    assert sent.targets == [tid(3)]
    assert [m for m in to_scheduler(run(core, 0.2, Cancel([tid(3)]))) if isinstance(m, TaskCancel)] == [
        TaskCancel([tid(3)])
    ]


def test_a_graph_whose_objects_are_stored_goes_at_once():
    core = connected()
    (sent,) = graphs_sent(run(core, 0.0, graph_submission(targets=(3,), with_big_literal=False)))
    assert sent.targets == [tid(3)]


def test_graph_targets_fail_when_the_client_stops():
    core = connected()
    run(core, 0.0, graph_submission(with_big_literal=False))
    found = outcomes(run(core, 1.0, Abort(DisconnectedError("gone"))))
    assert all(o == ERROR and isinstance(v, DisconnectedError) for o, v in found.values())
    assert len(found) == 2


def test_a_graph_submitted_after_the_client_stopped_fails_its_targets():
    core = connected()
    run(core, 1.0, Abort(DisconnectedError("gone")))
    found = outcomes(run(core, 2.0, graph_submission(with_big_literal=False)))
    assert len(found) == 2 and all(o == ERROR for o, _ in found.values())


# ----------------------------------------------------------------------------- graphs in parts


def parts_of_a_graph(big_in_first: bool = True):
    """A graph in two parts: 1 (with a large literal, and naming the targets) then 3 and 4 (the targets)."""
    first, last = graph_submission(), graph_submission()
    first.graph = GraphTask(
        graph_id=first.graph.graph_id, tasks=first.graph.tasks[:1], targets=first.targets, more=True
    )
    last.graph = GraphTask(graph_id=last.graph.graph_id, tasks=last.graph.tasks[1:])
    if not big_in_first:
        first.puts, first.requires, first.temporary_objects = [], [FUNCTION], []
    last.puts, last.requires, last.temporary_objects, last.function_ids, last.targets = [], [], [], [], ()
    return first, last


def test_parts_leave_in_order_each_once_its_objects_are_stored_and_the_targets_with_the_first():
    core = connected()
    first, last = parts_of_a_graph()
    effects = run(core, 0.0, PutObject(0, FUNCTION, b"function"), first, last)
    assert graphs_sent(effects) == []  # the last part needs nothing, but waits behind the first
    sent = graphs_sent(acknowledge(core, effects))
    assert [(len(part.tasks), part.more, part.targets) for part in sent] == [
        (1, True, [tid(3), tid(4)]),
        (2, False, []),
    ]
    effects = run(core, 0.2, result(3), result(4))
    assert {name: o for name, (o, _) in outcomes(effects).items()} == {"task3": RESULT, "task4": RESULT}
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)  # the first part's literal
    assert delete.object_ids == [BIG] and core.pending_tasks == 0


def test_targets_cancelled_after_the_first_part_left_close_the_graph_with_an_empty_last_part():
    core = connected()
    first, last = parts_of_a_graph(big_in_first=False)
    (sent,) = graphs_sent(run(core, 0.0, first))
    assert sent.more and sent.targets == [tid(3), tid(4)]
    effects = run(core, 0.1, Cancel([tid(3), tid(4)]))
    assert to_scheduler(effects) == [TaskCancel([tid(3), tid(4)])]
    effects = run(core, 0.15, FromScheduler(TaskCancelConfirm([tid(3), tid(4)], [True, True])))
    assert {o for o, _ in outcomes(effects).values()} == {CANCELLED}
    assert graphs_sent(effects) == [GraphTask(graph_id=sent.graph_id, more=False)]
    assert graphs_sent(run(core, 0.2, last)) == []  # the rest of a graph nobody waits for is not sent
    assert core.pending_tasks == 0


def test_a_failed_put_of_a_later_part_fails_the_targets_and_closes_the_graph():
    core = connected()
    first, last = parts_of_a_graph(big_in_first=False)
    last.puts, last.requires, last.temporary_objects = [(BIG, b"big literal")], [BIG], [BIG]
    effects = run(core, 0.0, first, last)
    (sent,) = graphs_sent(effects)
    effects = acknowledge(core, effects, ObjectStatus.TOO_LARGE)
    assert {o for o, _ in outcomes(effects).values()} == {ERROR}
    assert graphs_sent(effects) == [GraphTask(graph_id=sent.graph_id, more=False)]
    assert core.pending_tasks == 0
