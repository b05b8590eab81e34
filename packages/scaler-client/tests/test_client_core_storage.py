"""The client core's conversation with object storage (storage_requests.py, and the room the tasks' large
arguments take there, tasks_in_flight.py), through `ClientCore.handle` alone: no sockets, no threads, no clock."""

from __future__ import annotations

import pytest
from core_driver import (  # conftest puts this directory on sys.path
    CANCELLED,
    ERROR,
    FUNCTION,
    PUT,
    REPLY,
    RESULT,
    STORAGE,
    TIMEOUT,
    acknowledge_function,
    connected,
    large,
    outcomes,
    put_ack,
    results,
    run,
    sent_tasks,
    storage_requests,
    submit,
    submit_large,
    task,
    tid,
)

from scaler.client.client_events import (
    Cancel,
    FromScheduler,
    FromStorage,
    ObjectsFailed,
    PutObject,
    Release,
    ToScheduler,
    ToStorage,
)
from scaler.client.storage_requests import FULL_RETRY_SECONDS, RELEASE_GRACE_SECONDS
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
)
from scaler.protocol.messages import (
    ClientHeartbeatEcho,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    Refusal,
    TaskResult,
    TaskStatus,
)

# --- puts, large arguments, the room in storage ----------------------------------------------------------


def test_large_arguments_are_put_with_the_task_and_deleted_after_its_result():
    core = connected()
    acknowledge_function(core)
    one = large(1, 16)
    effects = run(core, 0.0, submit_large(one))
    assert sent_tasks(effects) == []
    ((request, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert request.object_ids == [one[1][0][0]] and blobs == [b"x" * 16]
    assert sent_tasks(run(core, 0.0, put_ack(request))) == [tid(1)]
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"r")
    effects = run(core, 0.0, results(result))
    assert outcomes(effects)["task1"] == (RESULT, result)
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [one[1][0][0]]


def test_large_arguments_beyond_the_room_in_storage_wait_in_order_for_earlier_tasks_to_end():
    core = connected(argument_bytes=10)
    acknowledge_function(core)
    effects = run(core, 0.0, submit_large(large(1, 6), large(2, 6), (task(3), []), large(4, 3), large(5, 30)))
    ((put, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert put.object_ids == [b"a%015d" % 1] and blobs == [b"x" * 6]  # 2 would overflow; 4 and 5 queue behind it
    assert sent_tasks(effects) == [tid(3)]  # a task without large arguments never waits
    effects = run(core, 0.0, Cancel([tid(4)]))  # a held task ends at once, with nothing to cancel or delete anywhere
    assert outcomes(effects) == {"task4": (CANCELLED, None)}
    assert [e for e in effects if isinstance(e, (ToScheduler, ToStorage))] == []

    assert sent_tasks(run(core, 0.0, put_ack(put))) == [tid(1)]
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"r")
    effects = run(core, 0.0, results(result))
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    ((put, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert delete.object_ids == [b"a%015d" % 1] and put.object_ids == [b"a%015d" % 2]
    # task 2 ends: task 5, larger than all the room, goes alone
    run(core, 0.0, put_ack(put))
    result = TaskResult(task_id=tid(2), status=TaskStatus.FAILED, payload_kind=PayloadKind.NONE)
    ((put, blobs),) = storage_requests(run(core, 0.0, results(result)), ObjectRequestKind.PUT)
    assert put.object_ids == [b"a%015d" % 5] and blobs == [b"x" * 30]


def test_a_held_task_whose_function_failed_meanwhile_fails_without_putting_its_arguments():
    core = connected(argument_bytes=10)
    ((function_put, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f")), ObjectRequestKind.PUT)
    ((put, _),) = storage_requests(run(core, 0.0, submit_large(large(1, 6), large(2, 6))), ObjectRequestKind.PUT)
    assert put.object_ids == [b"a%015d" % 1]  # task 2 is held
    effects = run(core, 0.0, put_ack(function_put, ObjectStatus.TOO_LARGE))
    # task 1 fails and its argument is deleted; that makes room for task 2, which fails at once, nothing put
    found = outcomes(effects)
    assert found["task1"][0] == found["task2"][0] == ERROR and isinstance(found["task2"][1], ObjectStorageRefusedError)
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [b"a%015d" % 1]
    assert storage_requests(effects, ObjectRequestKind.PUT) == []


def test_refused_put_fails_waiting_tasks_and_later_ones():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f"), submit(1)), ObjectRequestKind.PUT)
    effects = run(core, 0.0, put_ack(request, ObjectStatus.TOO_LARGE))
    outcome, error = outcomes(effects)["task1"]
    assert outcome == ERROR and isinstance(error, ObjectStorageRefusedError)
    assert "too_large" in str(error)
    assert ObjectsFailed([FUNCTION]) in effects
    outcome, error = outcomes(run(core, 0.0, submit(2)))["task2"]
    assert outcome == ERROR and isinstance(error, ObjectStorageRefusedError)


def test_send_object_reply_resolves_on_ack():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(PUT, b"o" * 16, b"data")), ObjectRequestKind.PUT)
    assert outcomes(run(core, 0.0, put_ack(request)))["put"] == (REPLY, b"o" * 16)


def test_storage_silence_fails_the_waiting_task_within_the_timeout():
    core = connected()
    run(core, 0.0, PutObject(0, FUNCTION, b"function"), submit(1))
    assert core.next_wakeup == 1.0  # the first heartbeat; the put's deadline is at TIMEOUT
    for now in (3.0, 6.0, 9.0):  # the scheduler keeps talking; storage says nothing
        assert "task1" not in outcomes(run(core, now, FromScheduler(ClientHeartbeatEcho())))
    outcome, error = outcomes(run(core, 10.0, FromScheduler(ClientHeartbeatEcho())))["task1"]
    assert outcome == ERROR and isinstance(error, DisconnectedError)
    assert STORAGE in str(error)


def test_storage_refusal_fails_pending_puts_with_a_protocol_error():
    core = connected()
    run(core, 0.0, PutObject(0, FUNCTION, b"function"), submit(1))
    effects = run(core, 0.0, FromStorage(Refusal(reason="protocol version 1.0 is not compatible with 2.0"), []))
    outcome, error = outcomes(effects)["task1"]
    assert outcome == ERROR and isinstance(error, ProtocolError)


def test_object_result_is_fetched_then_deleted_before_the_future_resolves():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1))
    result_id = b"r" * 16
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT, payload=result_id)
    effects = run(core, 0.0, results(result))
    assert "task1" not in outcomes(effects)
    ((get, _),) = storage_requests(effects, ObjectRequestKind.GET)
    assert get.object_ids == [result_id]
    response = ObjectResponse(
        request_id=get.request_id, kind=ObjectRequestKind.GET, object_ids=[result_id], statuses=[ObjectStatus.OK]
    )
    effects = run(core, 0.0, FromStorage(response, [b"value"]))
    outcome, resolved = outcomes(effects)["task1"]
    assert outcome == RESULT
    assert resolved.payload == b"value" and resolved.payload_kind == PayloadKind.INLINE
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [result_id]


def test_object_result_missing_from_storage_fails_the_future():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1))
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT, payload=b"r" * 16)
    ((get, _),) = storage_requests(run(core, 0.0, results(result)), ObjectRequestKind.GET)
    response = ObjectResponse(
        request_id=get.request_id, kind=ObjectRequestKind.GET, object_ids=[b"r" * 16], statuses=[ObjectStatus.NOT_FOUND]
    )
    outcome, error = outcomes(run(core, 0.0, FromStorage(response, [])))["task1"]
    assert outcome == ERROR and isinstance(error, ObjectNotFoundError)


def test_released_function_is_deleted_once_no_task_names_it_and_its_grace_is_over():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1), Release([FUNCTION]))
    effects = run(core, RELEASE_GRACE_SECONDS, FromScheduler(ClientHeartbeatEcho()))
    assert storage_requests(effects, ObjectRequestKind.DELETE) == []
    result = TaskResult(task_id=tid(1), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE)
    ((delete, _),) = storage_requests(run(core, RELEASE_GRACE_SECONDS, results(result)), ObjectRequestKind.DELETE)
    assert delete.object_ids == [FUNCTION]


def test_released_function_waits_for_its_grace_period():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, Release([FUNCTION]))
    assert storage_requests(run(core, RELEASE_GRACE_SECONDS / 2), ObjectRequestKind.DELETE) == []
    effects = run(core, RELEASE_GRACE_SECONDS, FromScheduler(ClientHeartbeatEcho()))
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [FUNCTION]


@pytest.mark.parametrize("no_room", [ObjectStatus.STORAGE_FULL, ObjectStatus.OVER_QUOTA])
def test_a_put_refused_for_want_of_room_goes_again_and_fails_only_once_refused_for_the_whole_timeout(no_room):
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f"), submit(1)), ObjectRequestKind.PUT)
    effects = run(core, 0.0, put_ack(request, no_room, reason="it holds 2.0 GiB of 2.0 GiB"))
    assert outcomes(effects) == {} and storage_requests(effects, ObjectRequestKind.PUT) == []  # it waits
    assert core.next_wakeup == FULL_RETRY_SECONDS
    ((again, blobs),) = storage_requests(run(core, FULL_RETRY_SECONDS), ObjectRequestKind.PUT)
    assert again.object_ids == [FUNCTION] and blobs == [b"f"]
    assert outcomes(run(core, FULL_RETRY_SECONDS, put_ack(again, no_room))) == {}
    # refused for the client's whole timeout since the first refusal: the task fails, saying why
    now = FULL_RETRY_SECONDS
    while True:
        now += FULL_RETRY_SECONDS
        effects = run(core, now, FromScheduler(ClientHeartbeatEcho()))  # the scheduler is there all along
        puts = storage_requests(effects, ObjectRequestKind.PUT)
        if not puts:
            break
        ((again, _),) = puts
        run(core, now, put_ack(again, no_room, reason="it holds 2.0 GiB of 2.0 GiB"))
    assert TIMEOUT <= now < TIMEOUT + 2 * FULL_RETRY_SECONDS
    outcome, error = outcomes(effects)["task1"]
    assert outcome == ERROR and isinstance(error, ObjectStorageRefusedError)
    assert f"had no room for it for {TIMEOUT:g}s: it holds 2.0 GiB of 2.0 GiB" in str(error)


def test_a_put_refused_by_a_full_server_is_stored_once_there_is_room():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f"), submit(1)), ObjectRequestKind.PUT)
    run(core, 0.0, put_ack(request, ObjectStatus.STORAGE_FULL))
    ((again, _),) = storage_requests(run(core, FULL_RETRY_SECONDS), ObjectRequestKind.PUT)
    effects = run(core, FULL_RETRY_SECONDS, put_ack(again, ObjectStatus.OK))
    assert sent_tasks(effects) == [tid(1)]
