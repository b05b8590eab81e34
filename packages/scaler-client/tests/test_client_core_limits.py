"""The client core keeps every message within what the scheduler and the storage server take (their HelloAck's
``maxMessageSize``): it splits what it sends, and fails at once, naming the limit and the option that raises
it, what cannot fit. It keeps no more tasks at the scheduler than its quota (``clientQuota``): the others wait
here."""

from __future__ import annotations

from core_driver import (
    CANCELLED,
    ERROR,
    FUNCTION,
    RESULT,
    connected,
    outcomes,
    results,
    run,
    sent_tasks,
    storage_requests,
    submit,
    task,
    tid,
    to_scheduler,
)
from test_client_core_graphs import acknowledge, graphs_sent

from scaler.client.client_events import Cancel, FromStorage, PutObject, Submit, SubmitGraph
from scaler.protocol import codec
from scaler.protocol.errors import ObjectStorageRefusedError, ProtocolError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    GraphTask,
    HelloAck,
    ObjectRequestKind,
    PayloadKind,
    PeerRole,
    Task,
    TaskBatch,
    TaskCancel,
    TaskResult,
    TaskStatus,
)
from scaler.protocol.version import PROTOCOL_VERSION

LIMIT = 1 << 20  # the scheduler's --max-message-size in these tests
CHUNK = 60 << 10  # an inline argument, under the client's 64 KiB


def heavy(n: int, arguments: int = 1) -> Task:
    return task(n, [Argument("", ArgumentKind.INLINE, bytes(CHUNK)) for _ in range(arguments)])


def test_tasks_of_one_turn_leave_in_as_many_batches_as_the_limit_needs():
    core = connected(max_message_size=LIMIT)
    effects = run(core, 0.0, Submit([heavy(n) for n in range(1, 101)], {}))
    batches = [message for message in to_scheduler(effects) if isinstance(message, TaskBatch)]
    assert len(batches) > 1
    assert all(len(codec.encode(batch)[0]) <= LIMIT for batch in batches)
    assert sent_tasks(effects) == [tid(n) for n in range(1, 101)]  # all of them, in order


def test_without_a_stated_limit_a_turn_leaves_in_batches_of_a_thousand():
    core = connected()  # an older scheduler: no maxMessageSize
    effects = run(core, 0.0, Submit([heavy(n) for n in range(1, 101)], {}))
    assert len([m for m in to_scheduler(effects) if isinstance(m, TaskBatch)]) == 1


def test_a_task_too_large_for_any_message_fails_naming_the_limit_and_the_others_go():
    core = connected(max_message_size=LIMIT)
    effects = run(core, 0.0, Submit([heavy(1), heavy(2, arguments=20), heavy(3)], {}))
    assert sent_tasks(effects) == [tid(1), tid(3)]
    kind, error = outcomes(effects)["task2"]
    assert kind == ERROR and isinstance(error, ProtocolError)
    assert f"task {tid(2).hex()}" in str(error)
    assert "the scheduler's message size limit of 1.0 MiB (scaler_scheduler --max-message-size)" in str(error)
    assert core.pending_tasks == 2


def test_a_cancel_of_many_tasks_leaves_in_messages_within_the_limit():
    core = connected(max_message_size=LIMIT)
    count = 50_000
    run(core, 0.0, Submit([task(n) for n in range(1, count + 1)], {}))
    effects = run(core, 0.1, Cancel([tid(n) for n in range(1, count + 1)]))
    cancels = [message for message in to_scheduler(effects) if isinstance(message, TaskCancel)]
    assert len(cancels) > 1 and all(len(codec.encode(cancel)[0]) <= LIMIT for cancel in cancels)
    assert [task_id for cancel in cancels for task_id in cancel.task_ids] == [tid(n) for n in range(1, count + 1)]


def _graph(*tasks: Task, more: bool = False) -> SubmitGraph:
    message = GraphTask(graph_id=b"g" * 16, tasks=list(tasks), targets=[tasks[-1].task_id], more=more)
    return SubmitGraph(message, [], [FUNCTION], [], [FUNCTION], message.targets)


def test_a_graph_part_larger_than_the_limit_leaves_as_several_parts():
    core = connected(max_message_size=LIMIT)
    effects = acknowledge(core, run(core, 0.0, PutObject(0, FUNCTION, b"function"), _graph(*map(heavy, range(1, 41)))))
    parts = graphs_sent(effects)
    assert len(parts) > 1 and all(len(codec.encode(part)[0]) <= LIMIT for part in parts)
    assert [part.more for part in parts] == [True] * (len(parts) - 1) + [False]
    assert parts[0].targets == [tid(40)] and all(part.targets == [] for part in parts[1:])
    assert [t.task_id for part in parts for t in part.tasks] == [tid(n) for n in range(1, 41)]


def test_a_graph_with_a_node_too_large_for_any_message_fails_unsent():
    core = connected(max_message_size=LIMIT)
    submitted = run(core, 0.0, PutObject(0, FUNCTION, b"function"), _graph(heavy(1, arguments=20), heavy(2)))
    effects = acknowledge(core, submitted)
    assert graphs_sent(effects) == []
    kind, error = outcomes(effects)["task2"]
    assert kind == ERROR and isinstance(error, ProtocolError)
    assert f"graph node task {tid(1).hex()}" in str(error) and "--max-message-size" in str(error)


def test_an_object_with_a_frame_larger_than_the_storage_server_takes_fails_unsent():
    core = connected()
    run(core, 0.0, FromStorage(HelloAck(PROTOCOL_VERSION, role=PeerRole.OBJECT_STORAGE, max_message_size=LIMIT), []))
    big, fits = b"o" * 16, b"p" * 16
    effects = run(core, 0.1, PutObject(7, big, [b"pickle", bytes(LIMIT + 1)]), PutObject(0, fits, bytes(LIMIT)))
    ((request, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert request.object_ids == [fits]
    (error,) = [effect.error for effect in effects if getattr(effect, "command_id", 0) == 7]
    assert isinstance(error, ObjectStorageRefusedError)
    assert f"object {big.hex()}" in str(error)
    assert "the object storage server's message size limit of 1.0 MiB" in str(error)
    assert "scaler_object_storage_server --max-object-size" in str(error)


def _success(n: int) -> TaskResult:
    return TaskResult(tid(n), 1, TaskStatus.SUCCESS, PayloadKind.INLINE, b"value")


def test_tasks_beyond_the_schedulers_quota_wait_here_and_leave_as_tasks_end():
    core = connected(client_quota=3)
    effects = run(core, 0.0, submit(1, 2, 3, 4, 5))
    assert sent_tasks(effects) == [tid(1), tid(2), tid(3)]
    effects = run(core, 0.1, results(_success(1)))
    assert outcomes(effects)["task1"][0] == RESULT and sent_tasks(effects) == [tid(4)]
    effects = run(core, 0.2, Cancel([tid(5)]))  # held here: cancelled here, the scheduler never hears of it
    assert outcomes(effects)["task5"][0] == CANCELLED and to_scheduler(effects) == []
    effects = run(core, 0.3, results(_success(2), _success(3), _success(4)))
    assert sorted(outcomes(effects)) == ["task2", "task3", "task4"] and sent_tasks(effects) == []
    assert core.pending_tasks == 0
    assert sent_tasks(run(core, 0.4, submit(6, 7, 8, 9))) == [tid(6), tid(7), tid(8)]  # the room is back
