"""The client agent's decisions (client_core.py and the parts it drives), through `ClientCore.handle` alone: no
sockets, no threads, no clock."""

from __future__ import annotations

import tracemalloc

import pytest
from core_driver import (  # conftest puts this directory on sys.path
    ADDRESS,
    BYE,
    CANCEL_REFUSED,
    CANCELLED,
    CLEAR,
    CLIENT_ID,
    ERROR,
    FUNCTION,
    INFO,
    INTERVAL,
    PUT,
    READY,
    REPLY,
    REPLY_ERROR,
    RESULT,
    SERIALIZER,
    SHUTDOWN,
    STORAGE,
    TIMEOUT,
    acknowledge_function,
    connected,
    new_core,
    outcomes,
    put_ack,
    results,
    run,
    sent_tasks,
    storage_requests,
    submit,
    task,
    tid,
    to_scheduler,
)

from scaler.client.client_events import (
    TICK,
    Abort,
    AskInfo,
    Cancel,
    Clear,
    Connect,
    ConnectStorage,
    Disconnect,
    FromScheduler,
    HandshakeFailed,
    Heartbeat,
    PutObject,
    Shutdown,
    Stopped,
    Submit,
    ToScheduler,
    ToStorage,
)
from scaler.client.client_lifecycles import SessionState, TaskEvent
from scaler.protocol.errors import (
    DisconnectedError,
    ProtocolError,
)
from scaler.protocol.lifecycle import TransitionError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    ClientHeartbeatEcho,
    ClientShutdownRequest,
    ClientShutdownResponse,
    DisconnectRequest,
    DisconnectResponse,
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectRequestKind,
    PayloadKind,
    PeerRole,
    Refusal,
    SchedulerInfo,
    SchedulerInfoRequest,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskStatus,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION

# --- handshake ----------------------------------------------------------------------------------------


def test_connect_says_hello_as_a_client_with_the_protocol_version_pid_and_host():
    core = new_core()
    (hello,) = to_scheduler(core.handle(Connect(READY), 0.0))
    assert isinstance(hello, Hello)
    assert hello.role == PeerRole.CLIENT
    assert hello.version == PROTOCOL_VERSION
    assert (hello.pid, hello.hostname) == (4242, "test-host")  # given: the core looks nothing up
    assert core.state is SessionState.CONNECTING


def test_hello_ack_connects_storage_and_resolves_ready():
    core = new_core()
    core.handle(Connect(READY), 0.0)
    ack = HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE)
    effects = core.handle(FromScheduler(ack), 0.1)
    assert effects[0] == ConnectStorage(STORAGE)  # before anything goes to storage
    assert isinstance(effects[1], ToStorage) and isinstance(effects[1].message, Hello)
    assert outcomes(effects)["ready"] == (REPLY, ack)
    assert core.state is SessionState.READY


def test_empty_storage_address_falls_back_to_scheduler_port_plus_one():
    core = new_core()
    core.handle(Connect(READY), 0.0)
    effects = core.handle(FromScheduler(HelloAck(version=PROTOCOL_VERSION)), 0.0)
    assert ConnectStorage("tcp://127.0.0.1:2346") in effects


def test_refusal_during_handshake_is_a_protocol_error_with_the_reason():
    core = new_core()
    core.handle(Connect(READY), 0.0)
    reason = "protocol version 1.0 is not compatible with protocol version 2.0: major versions differ"
    effects = core.handle(FromScheduler(Refusal(version=Version(2, 0), reason=reason)), 0.0)
    outcome, error = outcomes(effects)["ready"]
    assert outcome == REPLY_ERROR
    assert isinstance(error, ProtocolError)
    assert "1.0" in str(error) and "2.0" in str(error)
    assert core.state is SessionState.STOPPED and effects[-1] == Stopped(error)


def test_a_refused_handshake_stops_the_connecting_client_with_its_reason():
    core = new_core()
    core.handle(Connect(READY), 0.0)
    refused = HandshakeFailed("the scheduler refused key SHA256:x: it does not accept this key", False)
    effects = core.handle(refused, 0.0)
    outcome, error = outcomes(effects)["ready"]
    assert outcome == REPLY_ERROR and isinstance(error, ProtocolError)
    assert "refused the client: the scheduler refused key SHA256:x" in str(error)
    assert core.state is SessionState.STOPPED


def test_a_handshake_refused_by_storage_fails_what_waits_for_storage():
    core = connected()
    run(core, 0.0, PutObject(PUT, b"o" * 16, b"payload"))
    effects = core.handle(HandshakeFailed("the object storage server refused key SHA256:x", True), 0.0)
    outcome, error = outcomes(effects)["put"]
    assert outcome == REPLY_ERROR and "object storage server refused key SHA256:x" in str(error)


def test_handshake_times_out_with_a_disconnected_error_naming_the_address():
    core = new_core(timeout=2.0)
    core.handle(Connect(READY), 0.0)
    assert core.next_wakeup == 2.0
    assert outcomes(core.handle(TICK, 1.0)) == {}
    effects = core.handle(TICK, 2.0)
    outcome, error = outcomes(effects)["ready"]
    assert outcome == REPLY_ERROR
    assert isinstance(error, DisconnectedError)
    assert str(error) == f"no scheduler answered at {ADDRESS} within 2s"
    assert core.state is SessionState.STOPPED


# --- submitting -------------------------------------------------------------------------------------------


def test_task_waits_for_its_function_put_to_be_acknowledged():
    core = connected()
    effects = run(core, 0.0, PutObject(0, FUNCTION, b"function"), submit(1, 2))
    assert sent_tasks(effects) == []
    ((request, blobs),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert request.object_ids == [FUNCTION] and list(blobs) == [b"function"]
    assert request.owner_id == CLIENT_ID
    effects = run(core, 0.1, put_ack(request))
    assert sent_tasks(effects) == [tid(1), tid(2)]
    assert len([m for m in to_scheduler(effects) if isinstance(m, TaskBatch)]) == 1


def test_a_task_waits_for_its_serializer_too():
    core = connected()
    acknowledge_function(core)
    effects = run(core, 0.0, PutObject(0, SERIALIZER, b"serializer"), Submit([task(1, serializer_id=SERIALIZER)], {}))
    assert sent_tasks(effects) == []
    ((request, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert sent_tasks(run(core, 0.1, put_ack(request))) == [tid(1)]


def test_acknowledged_function_lets_tasks_go_at_once_in_one_batch_per_turn():
    core = connected()
    acknowledge_function(core)
    effects = run(core, 0.0, submit(*range(2000)), submit(*range(2000, 2500)))
    batches = [m for m in to_scheduler(effects) if isinstance(m, TaskBatch)]
    assert [len(batch.tasks) for batch in batches] == [1000, 1000, 500]


def test_a_sent_task_keeps_only_what_its_end_needs_not_the_task_message():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f"), submit(1)), ObjectRequestKind.PUT)
    records = core._tasks._tasks
    assert records[tid(1)].task is not None  # waiting for its function: the message is kept to send later
    assert sent_tasks(run(core, 0.1, put_ack(request), submit(2))) == [tid(1), tid(2)]
    assert records[tid(1)].task is None and records[tid(2)].task is None
    assert records[tid(2)].function_id == FUNCTION
    effects = run(core, 0.2, results(TaskResult(task_id=tid(1), payload=b"r")))
    assert outcomes(effects)["task1"][0] == RESULT
    assert core.pending_tasks == 1


def test_memory_the_core_keeps_per_sent_task_is_bounded():
    core = connected()
    acknowledge_function(core)
    count = 20_000
    tracemalloc.start()
    try:
        tasks = [
            Task(
                task_id=tid(n),
                client_id=CLIENT_ID,
                function_id=FUNCTION,
                arguments=[Argument(name="", kind=ArgumentKind.INLINE, data=b"argument %d" % n)],
            )
            for n in range(count)
        ]
        effects = run(core, 0.0, Submit(tasks, {}))
        assert len(sent_tasks(effects)) == count
        del tasks, effects  # encoded and forgotten by the shell
        kept = tracemalloc.get_traced_memory()[0] / count
    finally:
        tracemalloc.stop()
    # its record, the task ID and the dict entry; not the Task message with its Argument objects
    assert kept <= 250, f"{kept:.0f} bytes per sent task"


# --- results ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", list(TaskStatus))
def test_inline_results_of_every_status_resolve_their_future(status):
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1))
    result = TaskResult(task_id=tid(1), status=status, payload_kind=PayloadKind.INLINE, payload=b"x")
    assert outcomes(run(core, 0.0, results(result)))["task1"] == (RESULT, result)
    assert core.pending_tasks == 0


def test_results_of_one_message_end_in_one_effect():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(*range(100)))
    effects = core.handle(results(*(TaskResult(task_id=tid(n), payload=b"x") for n in range(100))), 0.0)
    (ended,) = effects
    assert [result.task_id for result in ended.results] == [tid(n) for n in range(100)]


def test_result_of_an_unknown_task_is_dropped_and_its_stored_payload_deleted():
    core = connected()
    inline = TaskResult(task_id=tid(9), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"x")
    stored = TaskResult(task_id=tid(8), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT, payload=b"r" * 16)
    effects = run(core, 0.0, results(inline, stored))
    assert outcomes(effects) == {}
    ((delete, _),) = storage_requests(effects, ObjectRequestKind.DELETE)
    assert delete.object_ids == [b"r" * 16]


def test_a_result_for_a_task_never_sent_is_dropped():
    core = connected()
    run(core, 0.0, PutObject(0, FUNCTION, b"function"), submit(1))  # waits for its function
    effects = run(core, 0.0, results(TaskResult(task_id=tid(1), payload=b"x")))
    assert outcomes(effects) == {} and core.pending_tasks == 1


# --- cancel -------------------------------------------------------------------------------------------------


def test_cancel_of_a_sent_task_waits_for_the_confirmation():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1, 2))
    effects = run(core, 0.0, Cancel([tid(1), tid(2)]), Cancel([tid(1)]))
    (cancel,) = [m for m in to_scheduler(effects) if isinstance(m, TaskCancel)]
    assert cancel.task_ids == [tid(1), tid(2)]  # the second cancel of task 1 is not sent again
    assert outcomes(effects) == {}
    effects = run(core, 0.0, FromScheduler(TaskCancelConfirm(task_ids=[tid(1), tid(2)], cancelled=[True, False])))
    assert outcomes(effects) == {"task1": (CANCELLED, None), "task2": (CANCEL_REFUSED, None)}
    result = TaskResult(task_id=tid(2), status=TaskStatus.SUCCESS, payload_kind=PayloadKind.INLINE, payload=b"x")
    assert outcomes(run(core, 0.0, results(result)))["task2"] == (RESULT, result)


def test_cancel_of_a_task_still_waiting_for_its_objects_needs_no_scheduler():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f"), submit(1)), ObjectRequestKind.PUT)
    effects = run(core, 0.0, Cancel([tid(1)]))
    assert outcomes(effects) == {"task1": (CANCELLED, None)}
    assert not any(isinstance(m, TaskCancel) for m in to_scheduler(effects))
    assert sent_tasks(run(core, 0.0, put_ack(request))) == []


def test_an_illegal_transition_raises_naming_the_task_and_its_recent_events():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1), Cancel([tid(1)]))
    record = core._tasks.record(tid(1))
    with pytest.raises(TransitionError, match=r"client task .*0001: no transition from cancelling on fetched; "
                       r"recent events: send -> cancel"):  # fmt: skip
        core._tasks.step(tid(1), record, TaskEvent.FETCHED)


# --- liveness -------------------------------------------------------------------------------------------------


def test_heartbeats_go_every_interval_and_echoes_keep_the_client_alive():
    core = connected()
    assert core.next_wakeup == INTERVAL
    assert not [e for e in run(core, 0.5) if isinstance(e, Heartbeat)]
    assert [e for e in run(core, 1.0) if isinstance(e, Heartbeat)] == [Heartbeat(pending_tasks=0)]
    for now in range(2, 30):
        run(core, float(now), FromScheduler(ClientHeartbeatEcho()))
    assert core.state is SessionState.READY


def test_scheduler_silence_fails_every_pending_future_and_later_calls():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1, 2))
    assert [e for e in run(core, INTERVAL) if isinstance(e, Heartbeat)]  # unanswered from now on
    run(core, INTERVAL + TIMEOUT - 0.1)
    assert core.state is SessionState.READY
    effects = run(core, INTERVAL + TIMEOUT)
    assert core.state is SessionState.STOPPED
    (stopped,) = [e for e in effects if isinstance(e, Stopped)]
    assert isinstance(stopped.error, DisconnectedError)
    for name in ("task1", "task2"):
        outcome, error = outcomes(effects)[name]
        assert outcome == ERROR and isinstance(error, DisconnectedError)
        assert ADDRESS in str(error)
    outcome, error = outcomes(run(core, TIMEOUT, submit(3)))["task3"]
    assert outcome == ERROR and isinstance(error, DisconnectedError)


def test_a_client_whose_own_thread_stalled_waits_for_the_answer_to_its_next_heartbeat():
    """Its agent thread ran nothing for longer than the timeout (the GIL held elsewhere, the process stopped):
    the scheduler was asked nothing meanwhile, so its silence is no sign; the heartbeat sent now must be
    answered within the timeout."""
    core = connected()
    run(core, INTERVAL)  # a heartbeat,
    run(core, INTERVAL + 0.1, FromScheduler(ClientHeartbeatEcho()))  # answered; then the stall
    stalled_until = 3 * TIMEOUT
    assert [e for e in run(core, stalled_until) if isinstance(e, Heartbeat)]
    assert core.state is SessionState.READY
    run(core, stalled_until + TIMEOUT - 0.1)
    assert core.state is SessionState.READY
    run(core, stalled_until + TIMEOUT)
    assert core.state is SessionState.STOPPED


def test_scheduler_leaving_stops_the_client():
    core = connected()
    acknowledge_function(core)
    effects = run(core, 0.0, submit(1), FromScheduler(DisconnectRequest(reason="scheduler shutting down")))
    outcome, error = outcomes(effects)["task1"]
    assert isinstance(error, DisconnectedError) and "scheduler shutting down" in str(error)
    assert core.state is SessionState.STOPPED


# --- leaving, clear, shutdown ---------------------------------------------------------------------------------


def test_disconnect_waits_for_the_response_then_fails_what_is_left():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1))
    effects = run(core, 0.0, Disconnect(BYE))
    assert any(isinstance(m, DisconnectRequest) for m in to_scheduler(effects))
    assert outcomes(effects) == {} and core.state is SessionState.CLOSING
    effects = run(core, 0.1, FromScheduler(DisconnectResponse()))
    found = outcomes(effects)
    assert found["bye"] == (REPLY, None)
    assert found["task1"][0] == ERROR and isinstance(found["task1"][1], DisconnectedError)
    assert core.state is SessionState.STOPPED and effects[-1] == Stopped(None)


def test_disconnect_without_response_ends_at_its_bound():
    core = connected()
    run(core, 0.0, Disconnect(BYE))
    assert core.next_wakeup == 2.0
    run(core, 1.9)
    assert core.state is SessionState.CLOSING
    assert outcomes(run(core, 2.0))["bye"] == (REPLY, None)
    assert core.state is SessionState.STOPPED


def test_commands_while_closing_and_after_stopping_are_refused_and_disconnect_answered():
    core = connected()
    run(core, 0.0, Disconnect(BYE))
    found = outcomes(run(core, 0.0, submit(1), Clear(CLEAR), Disconnect(PUT)))
    assert found["task1"][0] == ERROR and found["clear"][0] == REPLY_ERROR
    assert found["put"] == (REPLY, None)  # a second disconnect is answered at once
    run(core, 2.0)
    found = outcomes(run(core, 3.0, Shutdown(SHUTDOWN), Disconnect(BYE), Abort(DisconnectedError("late"))))
    assert found["shutdown"][0] == REPLY_ERROR and found["bye"] == (REPLY, None)


def test_clear_cancels_tasks_and_answers_after_the_scheduler_echo():
    core = connected()
    acknowledge_function(core)
    run(core, 0.0, submit(1))
    effects = run(core, 0.0, Clear(CLEAR))
    (instruction,) = to_scheduler(effects)
    assert instruction == ObjectInstruction(kind=ObjectInstructionKind.CLEAR, owner_id=CLIENT_ID)
    assert effects.index(ToScheduler(instruction)) < effects.index(Heartbeat(pending_tasks=0))
    assert outcomes(effects) == {"task1": (CANCELLED, None)}
    assert outcomes(run(core, 0.1, FromScheduler(ClientHeartbeatEcho()))) == {"clear": (REPLY, None)}


@pytest.mark.parametrize("accepted", [True, False])
def test_shutdown_reply_carries_the_answer(accepted):
    core = connected()
    assert isinstance(to_scheduler(run(core, 0.0, Shutdown(SHUTDOWN)))[0], ClientShutdownRequest)
    effects = run(core, 0.0, FromScheduler(ClientShutdownResponse(accepted=accepted, reason="protected")))
    assert outcomes(effects)["shutdown"] == (REPLY, (accepted, "protected"))


def test_asking_what_the_scheduler_serves_is_answered_with_its_info_and_fails_when_the_client_stops():
    core = connected()
    assert to_scheduler(run(core, 0.0, AskInfo(INFO))) == [SchedulerInfoRequest()]
    info = SchedulerInfo(monitor_address="tcp://127.0.0.1:2347", dashboard_link="http://127.0.0.1:8081/")
    assert outcomes(run(core, 0.1, FromScheduler(info)))["info"] == (REPLY, info)
    run(core, 0.2, AskInfo(INFO))
    found = outcomes(run(core, 0.3, Abort(DisconnectedError("gone"))))
    assert found["info"][0] == REPLY_ERROR
