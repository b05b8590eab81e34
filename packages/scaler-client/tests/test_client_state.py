"""The client agent's decisions (client_state.py), driven directly: no sockets, no threads, no clock."""

from __future__ import annotations

import tracemalloc
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.client.client_state import RELEASE_GRACE_SECONDS, ClientState, Outcome, Phase, Submission
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
)
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    ClientHeartbeat,
    ClientHeartbeatEcho,
    ClientShutdownRequest,
    ClientShutdownResponse,
    DisconnectRequest,
    DisconnectResponse,
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    PeerRole,
    Refusal,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION

CLIENT_ID = b"C|test|1|abc"
ADDRESS = "tcp://127.0.0.1:2345"
STORAGE = "tcp://127.0.0.1:2346"
TIMEOUT = 10.0
INTERVAL = 1.0
FUNCTION = b"f" * 16


class Token:
    """A stand-in for a future or a reply: the core treats them as opaque targets."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Token({self.name})"


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def connected(now: float = 0.0, argument_bytes: int = 1 << 30) -> ClientState:
    state = ClientState(
        CLIENT_ID, ADDRESS, TIMEOUT, INTERVAL, now, batch_size=1000, disconnect_wait_seconds=2.0,
        argument_bytes_in_storage=argument_bytes,
    )  # fmt: skip
    state.start(Token("ready"), now)
    state.on_scheduler_message(HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE), [], now)
    state.take_effects(now)
    return state


def submission(n: int, puts=(), requires=(FUNCTION,), temporary=()) -> Submission:
    task = Task(task_id=tid(n), client_id=CLIENT_ID, function_id=FUNCTION)
    return Submission(task=task, future=Token(f"task{n}"), puts=puts, requires=requires, temporary_objects=temporary)


def sent_tasks(effects) -> List[bytes]:
    return [task.task_id for m in effects.to_scheduler if isinstance(m, TaskBatch) for task in m.tasks]


def storage_requests(effects, kind: ObjectRequestKind) -> List[Tuple[ObjectRequest, Any]]:
    return [(m, blobs) for m, blobs in effects.to_storage if isinstance(m, ObjectRequest) and m.kind == kind]


def outcomes(effects) -> Dict[str, Tuple[Outcome, Any]]:
    return {target.name: (outcome, value) for target, outcome, value in effects.resolutions}


def put_ack(request: ObjectRequest, status: ObjectStatus = ObjectStatus.OK) -> ObjectResponse:
    return ObjectResponse(
        request_id=request.request_id,
        kind=ObjectRequestKind.PUT,
        object_ids=list(request.object_ids),
        statuses=[status] * len(request.object_ids),
    )


def acknowledge_function(state: ClientState, now: float = 0.0):
    state.put_object(FUNCTION, b"function", None, now)
    ((request, blobs),) = storage_requests(state.take_effects(now), ObjectRequestKind.PUT)
    state.on_storage_message(put_ack(request), [], now)
    return state.take_effects(now)


# --- handshake ----------------------------------------------------------------------------------------


def test_start_says_hello_as_a_client_with_the_protocol_version():
    state = ClientState(CLIENT_ID, ADDRESS, TIMEOUT, INTERVAL, 0.0)
    state.start(Token("ready"), 0.0)
    (hello,) = state.take_effects(0.0).to_scheduler
    assert isinstance(hello, Hello)
    assert hello.role == PeerRole.CLIENT
    assert hello.version == PROTOCOL_VERSION
    assert state.phase is Phase.CONNECTING


def test_hello_ack_connects_storage_and_resolves_ready():
    state = ClientState(CLIENT_ID, ADDRESS, TIMEOUT, INTERVAL, 0.0)
    state.start(Token("ready"), 0.0)
    state.take_effects(0.0)
    ack = HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE)
    state.on_scheduler_message(ack, [], 0.1)
    effects = state.take_effects(0.1)
    assert effects.connect_storage == STORAGE
    assert isinstance(effects.to_storage[0][0], Hello)
    assert outcomes(effects)["ready"] == (Outcome.REPLY_VALUE, ack)
    assert state.phase is Phase.READY


def test_empty_storage_address_falls_back_to_scheduler_port_plus_one():
    state = ClientState(CLIENT_ID, ADDRESS, TIMEOUT, INTERVAL, 0.0)
    state.start(Token("ready"), 0.0)
    state.on_scheduler_message(HelloAck(version=PROTOCOL_VERSION), [], 0.0)
    assert state.take_effects(0.0).connect_storage == "tcp://127.0.0.1:2346"


def test_refusal_during_handshake_is_a_protocol_error_with_the_reason():
    state = ClientState(CLIENT_ID, ADDRESS, TIMEOUT, INTERVAL, 0.0)
    state.start(Token("ready"), 0.0)
    reason = "protocol version 1.0 is not compatible with protocol version 2.0: major versions differ"
    state.on_scheduler_message(Refusal(version=Version(2, 0), reason=reason), [], 0.0)
    outcome, error = outcomes(state.take_effects(0.0))["ready"]
    assert outcome is Outcome.REPLY_ERROR
    assert isinstance(error, ProtocolError)
    assert "1.0" in str(error) and "2.0" in str(error)
    assert state.stopped


def test_handshake_times_out_with_a_disconnected_error_naming_the_address():
    state = ClientState(CLIENT_ID, ADDRESS, 2.0, INTERVAL, 0.0)
    state.start(Token("ready"), 0.0)
    state.tick(1.0)
    assert not state.stopped
    state.tick(2.0)
    outcome, error = outcomes(state.take_effects(2.0))["ready"]
    assert outcome is Outcome.REPLY_ERROR
    assert isinstance(error, DisconnectedError)
    assert str(error) == f"no scheduler answered at {ADDRESS} within 2s"
    assert state.stopped


# --- submitting -------------------------------------------------------------------------------------------


def test_task_waits_for_its_function_put_to_be_acknowledged():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1), submission(2)], 0.0)
    effects = state.take_effects(0.0)
    assert sent_tasks(effects) == []
    ((request, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert request.object_ids == [FUNCTION] and list(blobs) == [b"function"]
    assert request.owner_id == CLIENT_ID
    state.on_storage_message(put_ack(request), [], 0.1)
    effects = state.take_effects(0.1)
    assert sent_tasks(effects) == [tid(1), tid(2)]
    assert len([m for m in effects.to_scheduler if isinstance(m, TaskBatch)]) == 1


def test_acknowledged_function_lets_tasks_go_at_once_in_one_batch_per_drain():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(n) for n in range(2500)], 0.0)
    effects = state.take_effects(0.0)
    batches = [m for m in effects.to_scheduler if isinstance(m, TaskBatch)]
    assert [len(batch.tasks) for batch in batches] == [1000, 1000, 500]


def test_a_sent_task_keeps_only_what_its_end_needs_not_the_task_message():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1)], 0.0)
    ((request, _),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.PUT)
    assert state._tasks[tid(1)].task is not None  # waiting for its function: the message is kept to send later
    state.on_storage_message(put_ack(request), [], 0.1)
    state.submit([submission(2)], 0.1)
    assert sent_tasks(state.take_effects(0.1)) == [tid(1), tid(2)]
    assert state._tasks[tid(1)].task is None and state._tasks[tid(2)].task is None
    assert state._tasks[tid(2)].function_id == FUNCTION
    state.on_scheduler_message(TaskResultBatch(results=[TaskResult(task_id=tid(1), payload=b"r")]), [], 0.2)
    assert outcomes(state.take_effects(0.2))["task1"][0] == Outcome.TASK_RESULT
    assert state.pending_tasks == 1


def test_memory_the_core_keeps_per_sent_task_is_bounded():
    state = connected()
    acknowledge_function(state)
    future = Token("shared")  # the futures are the caller's; only what the core itself keeps is measured
    count = 20_000
    tracemalloc.start()
    try:
        submissions = [
            Submission(
                Task(
                    task_id=tid(n),
                    client_id=CLIENT_ID,
                    function_id=FUNCTION,
                    arguments=[Argument(name="", kind=ArgumentKind.INLINE, data=b"argument %d" % n)],
                ),
                future,
                requires=(FUNCTION,),
            )
            for n in range(count)
        ]
        state.submit(submissions, 0.0)
        effects = state.take_effects(0.0)
        assert len(sent_tasks(effects)) == count
        del submissions, effects  # encoded and forgotten by the shell
        kept = tracemalloc.get_traced_memory()[0] / count
    finally:
        tracemalloc.stop()
    # its record, the task ID and the dict entry; not the Task message with its Argument objects
    assert kept <= 250, f"{kept:.0f} bytes per sent task"


def test_large_arguments_are_put_with_the_task_and_deleted_after_its_result():
    state = connected()
    acknowledge_function(state)
    argument = b"a" * 16
    state.submit([submission(1, puts=[(argument, b"big")], requires=(FUNCTION, argument), temporary=[argument])], 0.0)
    effects = state.take_effects(0.0)
    assert sent_tasks(effects) == []
    ((request, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    state.on_storage_message(put_ack(request), [], 0.0)
    assert sent_tasks(state.take_effects(0.0)) == [tid(1)]
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"r")
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    effects = state.take_effects(0.0)
    assert outcomes(effects)["task1"] == (Outcome.TASK_RESULT, result)
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [argument]


def test_large_arguments_beyond_the_room_in_storage_wait_in_order_for_earlier_tasks_to_end():
    state = connected(argument_bytes=10)
    acknowledge_function(state)

    def large(n: int, size: int) -> Submission:
        argument = b"a%015d" % n
        return submission(n, puts=[(argument, b"x" * size)], requires=(FUNCTION, argument), temporary=[argument])

    state.submit([large(1, 6), large(2, 6), submission(3), large(4, 3), large(5, 30)], 0.0)
    effects = state.take_effects(0.0)
    ((put, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert put.object_ids == [b"a%015d" % 1] and blobs == [b"x" * 6]  # 2 would overflow; 4 and 5 queue behind it
    assert sent_tasks(effects) == [tid(3)]  # a task without large arguments never waits
    state.cancel([tid(4)], 0.0)  # a held task ends at once, with nothing to cancel or delete anywhere
    effects = state.take_effects(0.0)
    assert outcomes(effects) == {"task4": (Outcome.TASK_CANCELLED, None)}
    assert effects.to_scheduler == [] and effects.to_storage == []

    state.on_storage_message(put_ack(put), [], 0.0)
    assert sent_tasks(state.take_effects(0.0)) == [tid(1)]
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"r")
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    effects = state.take_effects(0.0)
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    ((put, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert delete.object_ids == [b"a%015d" % 1] and put.object_ids == [b"a%015d" % 2]
    # task 2 ends: task 5, larger than all the room, goes alone
    state.on_storage_message(put_ack(put), [], 0.0)
    state.take_effects(0.0)
    result = TaskResult(task_id=tid(2), status=TaskStatus.FAILED, payload_kind=PayloadKind.NONE)
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    ((put, blobs),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.PUT)
    assert put.object_ids == [b"a%015d" % 5] and blobs == [b"x" * 30]


def test_refused_put_fails_waiting_tasks_and_later_ones():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1)], 0.0)
    ((request, _),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.PUT)
    state.on_storage_message(put_ack(request, ObjectStatus.TOO_LARGE), [], 0.0)
    effects = state.take_effects(0.0)
    outcome, error = outcomes(effects)["task1"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, ObjectStorageRefusedError)
    assert "too_large" in str(error)
    assert effects.failed_objects == [FUNCTION]
    state.submit([submission(2)], 0.0)
    outcome, error = outcomes(state.take_effects(0.0))["task2"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, ObjectStorageRefusedError)


def test_send_object_reply_resolves_on_ack():
    state = connected()
    state.put_object(b"o" * 16, b"data", Token("put"), 0.0)
    ((request, _),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.PUT)
    state.on_storage_message(put_ack(request), [], 0.0)
    assert outcomes(state.take_effects(0.0))["put"] == (Outcome.REPLY_VALUE, b"o" * 16)


def test_storage_silence_fails_the_waiting_task_within_the_timeout():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    for now in (3.0, 6.0, 9.0):  # the scheduler keeps talking; storage says nothing
        state.on_scheduler_message(ClientHeartbeatEcho(), [], now)
        state.tick(now)
    assert "task1" not in outcomes(state.take_effects(9.0))
    state.on_scheduler_message(ClientHeartbeatEcho(), [], 10.0)
    state.tick(10.0)
    outcome, error = outcomes(state.take_effects(10.0))["task1"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, DisconnectedError)
    assert STORAGE in str(error)


def test_storage_refusal_fails_pending_puts_with_a_protocol_error():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    state.on_storage_message(Refusal(reason="protocol version 1.0 is not compatible with 2.0"), [], 0.0)
    outcome, error = outcomes(state.take_effects(0.0))["task1"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, ProtocolError)


# --- results ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(TaskStatus))
def test_inline_results_of_every_status_resolve_their_future(status):
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    result = TaskResult(task_id=tid(1), status=status, payload_kind=PayloadKind.INLINE, payload=b"x")
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    assert outcomes(state.take_effects(0.0))["task1"] == (Outcome.TASK_RESULT, result)
    assert state.pending_tasks == 0


def test_object_result_is_fetched_then_deleted_before_the_future_resolves():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    result_id = b"r" * 16
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT, payload=result_id)
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    effects = state.take_effects(0.0)
    assert "task1" not in outcomes(effects)
    ((get, _),) = storage_requests(effects, ObjectRequestKind.GET)
    assert get.object_ids == [result_id]
    response = ObjectResponse(
        request_id=get.request_id, kind=ObjectRequestKind.GET, object_ids=[result_id], statuses=[ObjectStatus.OK]
    )
    state.on_storage_message(response, [b"value"], 0.0)
    effects = state.take_effects(0.0)
    outcome, resolved = outcomes(effects)["task1"]
    assert outcome is Outcome.TASK_RESULT
    assert resolved.payload == b"value" and resolved.payload_kind == PayloadKind.INLINE
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [result_id]


def test_object_result_missing_from_storage_fails_the_future():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT, payload=b"r" * 16)
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    ((get, _),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.GET)
    response = ObjectResponse(
        request_id=get.request_id, kind=ObjectRequestKind.GET, object_ids=[b"r" * 16], statuses=[ObjectStatus.NOT_FOUND]
    )
    state.on_storage_message(response, [], 0.0)
    outcome, error = outcomes(state.take_effects(0.0))["task1"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, ObjectNotFoundError)


def test_result_of_an_unknown_task_is_dropped():
    state = connected()
    result = TaskResult(task_id=tid(9), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"x")
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    assert state.take_effects(0.0).resolutions == []


def test_released_function_is_deleted_once_no_task_names_it_and_its_grace_is_over():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.release([FUNCTION], 0.0)
    state.take_effects(0.0)
    state.on_scheduler_message(ClientHeartbeatEcho(), [], RELEASE_GRACE_SECONDS)
    state.tick(RELEASE_GRACE_SECONDS)
    assert storage_requests(state.take_effects(RELEASE_GRACE_SECONDS), ObjectRequestKind.DELETE) == []
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE)
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], RELEASE_GRACE_SECONDS)
    state.tick(RELEASE_GRACE_SECONDS)
    ((delete, _),) = storage_requests(state.take_effects(RELEASE_GRACE_SECONDS), ObjectRequestKind.DELETE)
    assert delete.object_ids == [FUNCTION]


def test_released_function_waits_for_its_grace_period():
    state = connected()
    acknowledge_function(state)
    state.release([FUNCTION], 0.0)
    state.tick(RELEASE_GRACE_SECONDS / 2)
    assert storage_requests(state.take_effects(1.0), ObjectRequestKind.DELETE) == []
    state.on_scheduler_message(ClientHeartbeatEcho(), [], RELEASE_GRACE_SECONDS)
    state.tick(RELEASE_GRACE_SECONDS)
    ((delete, _),) = storage_requests(state.take_effects(RELEASE_GRACE_SECONDS), ObjectRequestKind.DELETE)
    assert delete.object_ids == [FUNCTION]


# --- cancel -------------------------------------------------------------------------------------------------


def test_cancel_of_a_sent_task_waits_for_the_confirmation():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1), submission(2)], 0.0)
    state.take_effects(0.0)
    state.cancel([tid(1), tid(2)], 0.0)
    effects = state.take_effects(0.0)
    (cancel,) = [m for m in effects.to_scheduler if isinstance(m, TaskCancel)]
    assert cancel.task_ids == [tid(1), tid(2)]
    assert effects.resolutions == []
    state.on_scheduler_message(TaskCancelConfirm(task_ids=[tid(1), tid(2)], cancelled=[True, False]), [], 0.0)
    effects = outcomes(state.take_effects(0.0))
    assert effects == {"task1": (Outcome.TASK_CANCELLED, None), "task2": (Outcome.CANCEL_REFUSED, None)}
    result = TaskResult(task_id=tid(2), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"x")
    state.on_scheduler_message(TaskResultBatch(results=[result]), [], 0.0)
    assert outcomes(state.take_effects(0.0))["task2"] == (Outcome.TASK_RESULT, result)


def test_cancel_of_a_task_still_waiting_for_its_objects_needs_no_scheduler():
    state = connected()
    state.put_object(FUNCTION, b"function", None, 0.0)
    state.submit([submission(1)], 0.0)
    ((request, _),) = storage_requests(state.take_effects(0.0), ObjectRequestKind.PUT)
    state.cancel([tid(1)], 0.0)
    effects = state.take_effects(0.0)
    assert outcomes(effects) == {"task1": (Outcome.TASK_CANCELLED, None)}
    assert not any(isinstance(m, TaskCancel) for m in effects.to_scheduler)
    state.on_storage_message(put_ack(request), [], 0.0)
    assert sent_tasks(state.take_effects(0.0)) == []


# --- liveness -------------------------------------------------------------------------------------------------


def test_heartbeats_go_every_interval_and_echoes_keep_the_client_alive():
    state = connected()
    state.tick(0.5)
    assert not state.take_effects(0.5).to_scheduler
    state.tick(1.0)
    (heartbeat,) = state.take_effects(1.0).to_scheduler
    assert isinstance(heartbeat, ClientHeartbeat)
    for now in range(2, 30):
        state.on_scheduler_message(ClientHeartbeatEcho(), [], float(now))
        state.tick(float(now))
    assert not state.stopped


def test_scheduler_silence_fails_every_pending_future_and_later_calls():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1), submission(2)], 0.0)
    state.take_effects(0.0)
    state.tick(TIMEOUT - 0.1)
    assert not state.stopped
    state.tick(TIMEOUT)
    effects = state.take_effects(TIMEOUT)
    assert effects.stop and state.stopped
    for name in ("task1", "task2"):
        outcome, error = outcomes(effects)[name]
        assert outcome is Outcome.TASK_ERROR and isinstance(error, DisconnectedError)
        assert ADDRESS in str(error)
    assert isinstance(state.error, DisconnectedError)
    state.submit([submission(3)], TIMEOUT)
    outcome, error = outcomes(state.take_effects(TIMEOUT))["task3"]
    assert outcome is Outcome.TASK_ERROR and isinstance(error, DisconnectedError)


def test_scheduler_leaving_stops_the_client():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.on_scheduler_message(DisconnectRequest(reason="scheduler shutting down"), [], 0.0)
    outcome, error = outcomes(state.take_effects(0.0))["task1"]
    assert isinstance(error, DisconnectedError) and "scheduler shutting down" in str(error)
    assert state.stopped


# --- leaving, clear, shutdown ---------------------------------------------------------------------------------


def test_disconnect_waits_for_the_response_then_fails_what_is_left():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    state.disconnect(Token("bye"), 0.0)
    effects = state.take_effects(0.0)
    assert any(isinstance(m, DisconnectRequest) for m in effects.to_scheduler)
    assert effects.resolutions == [] and state.phase is Phase.CLOSING
    state.on_scheduler_message(DisconnectResponse(), [], 0.1)
    effects = outcomes(state.take_effects(0.1))
    assert effects["bye"] == (Outcome.REPLY_VALUE, None)
    assert effects["task1"][0] is Outcome.TASK_ERROR and isinstance(effects["task1"][1], DisconnectedError)
    assert state.stopped and state.error is None


def test_disconnect_without_response_ends_at_its_bound():
    state = connected()
    state.disconnect(Token("bye"), 0.0)
    state.take_effects(0.0)
    state.tick(1.9)
    assert not state.stopped
    state.tick(2.0)
    assert outcomes(state.take_effects(2.0))["bye"] == (Outcome.REPLY_VALUE, None)
    assert state.stopped


def test_clear_cancels_tasks_and_answers_after_the_scheduler_echo():
    state = connected()
    acknowledge_function(state)
    state.submit([submission(1)], 0.0)
    state.take_effects(0.0)
    state.clear(Token("clear"), 0.0)
    effects = state.take_effects(0.0)
    instruction, heartbeat = effects.to_scheduler
    assert instruction == ObjectInstruction(kind=ObjectInstructionKind.CLEAR, owner_id=CLIENT_ID)
    assert isinstance(heartbeat, ClientHeartbeat)
    assert outcomes(effects) == {"task1": (Outcome.TASK_CANCELLED, None)}
    state.on_scheduler_message(ClientHeartbeatEcho(), [], 0.1)
    assert outcomes(state.take_effects(0.1)) == {"clear": (Outcome.REPLY_VALUE, None)}


@pytest.mark.parametrize("accepted", [True, False])
def test_shutdown_reply_carries_the_answer(accepted):
    state = connected()
    state.shutdown(Token("shutdown"), 0.0)
    assert isinstance(state.take_effects(0.0).to_scheduler[0], ClientShutdownRequest)
    state.on_scheduler_message(ClientShutdownResponse(accepted=accepted, reason="protected"), [], 0.0)
    assert outcomes(state.take_effects(0.0))["shutdown"] == (Outcome.REPLY_VALUE, (accepted, "protected"))


# --- every future resolves, exactly once ----------------------------------------------------------------------

_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "ack_puts", "refuse_puts", "result", "cancel", "confirm", "tick", "echo"]),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_EVENTS, st.sampled_from(["silence", "disconnect", "clear_then_silence"]))
def test_every_submitted_future_resolves_exactly_once(events, ending):
    state = connected(argument_bytes=8)  # room in storage for two of the larger arguments
    now = 0.0
    resolved: Dict[str, int] = {}
    submitted = set()
    puts: List[ObjectRequest] = []
    sent: List[bytes] = []

    def absorb() -> None:
        effects = state.take_effects(now)
        for target, outcome, _ in effects.resolutions:
            if outcome is not Outcome.CANCEL_REFUSED:  # not an end: the task's result still comes
                resolved[target.name] = resolved.get(target.name, 0) + 1
        puts.extend(
            m for m, _ in effects.to_storage if isinstance(m, ObjectRequest) and m.kind == ObjectRequestKind.PUT
        )
        sent.extend(sent_tasks(effects))

    function = 0
    for number, (event, k) in enumerate(events):
        if event == "submit":
            function += k % 2  # sometimes a new function, which must be put first
            function_id = function.to_bytes(16, "big")
            if k % 2:
                state.put_object(function_id, b"f", None, now)
            task = Task(task_id=tid(1000 + number), client_id=CLIENT_ID, function_id=function_id)
            argument = b"a%015d" % number
            large = [(argument, b"x" * k)] if k > 2 else []  # beyond the room in storage, tasks wait for it
            each = Submission(task, Token(f"t{number}"), large, [function_id, *dict(large)], list(dict(large)))
            state.submit([each], now)
            submitted.add(f"t{number}")
        elif event in ("ack_puts", "refuse_puts") and puts:
            status = ObjectStatus.OK if event == "ack_puts" else ObjectStatus.STORAGE_FULL
            state.on_storage_message(put_ack(puts.pop(0), status), [], now)
        elif event == "result" and sent:
            task_id = sent[k % len(sent)]
            result = TaskResult(task_id=task_id, status=TaskStatus(k % 5), payload_kind=PayloadKind.INLINE)
            state.on_scheduler_message(TaskResultBatch(results=[result]), [], now)
        elif event == "cancel" and submitted:
            state.cancel([tid(1000 + number - k)], now)
        elif event == "confirm" and sent:
            state.on_scheduler_message(
                TaskCancelConfirm(task_ids=[sent[k % len(sent)]], cancelled=[k % 2 == 0]), [], now
            )
        elif event == "tick":
            now += k
            state.tick(now)
        elif event == "echo":
            state.on_scheduler_message(ClientHeartbeatEcho(), [], now)
        absorb()
    if ending == "disconnect":
        state.disconnect(None, now)
        absorb()
    if ending == "clear_then_silence":
        state.clear(None, now)
        absorb()
    now += 1000
    state.tick(now)
    absorb()
    assert state.stopped
    assert {name: count for name, count in resolved.items() if name in submitted} == {name: 1 for name in submitted}
