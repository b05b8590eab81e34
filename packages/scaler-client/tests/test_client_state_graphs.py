"""Graph submissions in the client agent's core (client_state.py): no sockets, no threads, no clock."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from scaler.client.client_state import ClientState, GraphSubmission, Outcome
from scaler.protocol.errors import DisconnectedError, ObjectStorageRefusedError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    GraphTask,
    HelloAck,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    Task,
    TaskCancel,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
)
from scaler.protocol.version import PROTOCOL_VERSION

CLIENT_ID = b"C|test|1|abc"
FUNCTION = b"f" * 16
BIG = b"b" * 16


class Token:
    def __init__(self, name: str) -> None:
        self.name = name


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def connected() -> ClientState:
    state = ClientState(CLIENT_ID, "tcp://127.0.0.1:2345", 10.0, 1.0, 0.0)
    state.start(Token("ready"), 0.0)
    state.on_scheduler_message(HelloAck(version=PROTOCOL_VERSION, object_storage_address="tcp://127.0.0.1:2346"), [], 0)
    state.take_effects(0.0)
    return state


def graph_submission(targets=(3, 4), with_big_literal: bool = True) -> GraphSubmission:
    tasks = [
        Task(task_id=tid(1), function_id=FUNCTION),
        Task(task_id=tid(3), function_id=FUNCTION, arguments=[Argument("", ArgumentKind.TASK, tid(1))]),
        Task(task_id=tid(4), function_id=FUNCTION, arguments=[Argument("", ArgumentKind.OBJECT, BIG)]),
    ]
    message = GraphTask(graph_id=b"g" * 16, tasks=tasks, targets=[tid(t) for t in targets])
    futures = {tid(t): Token(f"target{t}") for t in targets}
    puts = [(BIG, b"big literal")] if with_big_literal else []
    temporary = [BIG] if with_big_literal else []
    return GraphSubmission(message, futures, puts, [FUNCTION, *temporary], temporary, [FUNCTION])


def storage_requests(effects, kind: ObjectRequestKind) -> List[Tuple[ObjectRequest, Any]]:
    return [(m, b) for m, b in effects.to_storage if isinstance(m, ObjectRequest) and m.kind == kind]


def graphs_sent(effects) -> List[GraphTask]:
    return [message for message in effects.to_scheduler if isinstance(message, GraphTask)]


def outcomes(effects) -> Dict[str, Tuple[Outcome, Any]]:
    return {target.name: (outcome, value) for target, outcome, value in effects.resolutions}


def acknowledge(state: ClientState, effects, status: ObjectStatus = ObjectStatus.OK):
    for request, _ in storage_requests(effects, ObjectRequestKind.PUT):
        answer = ObjectResponse(request.request_id, ObjectRequestKind.PUT, list(request.object_ids),
                                [status] * len(request.object_ids))  # fmt: skip
        state.on_storage_message(answer, [], 0.1)
    return state.take_effects(0.1)


def result(n: int) -> TaskResult:
    return TaskResult(tid(n), 1, TaskStatus.SUCCESS, PayloadKind.INLINE, b"value")


def test_graph_leaves_whole_once_its_objects_are_stored_and_resolves_target_by_target():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit_graph(graph_submission(), 0.0)
    effects = state.take_effects(0.0)
    assert graphs_sent(effects) == []
    ((put, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert put.object_ids == [FUNCTION, BIG] and blobs == [b"function", b"big literal"]
    (sent,) = graphs_sent(acknowledge(state, effects))
    assert sent.targets == [tid(3), tid(4)] and len(sent.tasks) == 3
    assert state.pending_tasks == 2

    state.on_scheduler_message(TaskResultBatch([result(3)]), [], 0.2)
    effects = state.take_effects(0.2)
    assert outcomes(effects)["target3"][0] is Outcome.TASK_RESULT
    assert storage_requests(effects, ObjectRequestKind.DELETE) == []  # target 4 may still need the literal
    state.on_scheduler_message(TaskResultBatch([result(4)]), [], 0.3)
    effects = state.take_effects(0.3)
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [BIG] and state.pending_tasks == 0


def test_a_failed_put_fails_every_target_and_nothing_is_sent():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit_graph(graph_submission(), 0.0)
    effects = acknowledge(state, state.take_effects(0.0), ObjectStatus.STORAGE_FULL)
    assert graphs_sent(effects) == []
    found = outcomes(effects)
    assert {name for name in found} == {"target3", "target4"}
    assert all(o is Outcome.TASK_ERROR and isinstance(v, ObjectStorageRefusedError) for o, v in found.values())
    assert state.pending_tasks == 0


def test_cancelled_targets_are_left_out_of_a_graph_not_yet_sent_and_cancelled_at_the_scheduler_after():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit_graph(graph_submission(), 0.0)
    effects = state.take_effects(0.0)
    state.cancel([tid(4)], 0.05)
    assert outcomes(state.take_effects(0.05))["target4"][0] is Outcome.TASK_CANCELLED
    (sent,) = graphs_sent(acknowledge(state, effects))
    assert sent.targets == [tid(3)]
    state.cancel([tid(3)], 0.2)
    assert [m for m in state.take_effects(0.2).to_scheduler if isinstance(m, TaskCancel)] == [TaskCancel([tid(3)])]


def test_a_graph_whose_objects_are_stored_goes_at_once():
    state = connected()
    state.submit_graph(graph_submission(targets=(3,), with_big_literal=False), 0.0)
    (sent,) = graphs_sent(state.take_effects(0.0))
    assert sent.targets == [tid(3)]


def test_graph_targets_fail_when_the_client_stops():
    state = connected()
    state.submit_graph(graph_submission(with_big_literal=False), 0.0)
    state.take_effects(0.0)
    state.abort(DisconnectedError("gone"), 1.0)
    found = outcomes(state.take_effects(1.0))
    assert all(o is Outcome.TASK_ERROR and isinstance(v, DisconnectedError) for o, v in found.values())
    assert len(found) == 2


def test_a_graph_submitted_after_the_client_stopped_fails_its_targets():
    state = connected()
    state.abort(DisconnectedError("gone"), 1.0)
    state.take_effects(1.0)
    state.submit_graph(graph_submission(with_big_literal=False), 2.0)
    found = outcomes(state.take_effects(2.0))
    assert len(found) == 2 and all(o is Outcome.TASK_ERROR for o, _ in found.values())
