"""The client core when a peer fails or is not the one wanted: connections that drop, addresses that lead to
another kind of peer, a storage server that goes away or restarts."""

from __future__ import annotations

from core_driver import (
    ADDRESS,
    ERROR,
    PUT,
    READY,
    REPLY,
    REPLY_ERROR,
    STORAGE,
    connected,
    new_core,
    outcomes,
    put_ack,
    run,
    storage_requests,
    submit,
    to_scheduler,
)

from scaler.client.client_events import (
    Connect,
    ConnectionChanged,
    FromScheduler,
    FromStorage,
    ObjectsFailed,
    PutObject,
    ToStorage,
)
from scaler.client.client_lifecycles import SessionState
from scaler.client.storage_requests import RECONNECT_SECONDS
from scaler.protocol.connection_events import DOWN, REFUSED, UP
from scaler.protocol.errors import DisconnectedError, ProtocolError
from scaler.protocol.messages import Hello, HelloAck, ObjectRequestKind, PeerRole, Refusal
from scaler.protocol.version import PROTOCOL_VERSION


def scheduler(change: str) -> ConnectionChanged:
    return ConnectionChanged(False, change)


def storage(change: str) -> ConnectionChanged:
    return ConnectionChanged(True, change)


# --- who answered ---------------------------------------------------------------------------------------------


def test_a_hello_ack_from_an_object_storage_server_stops_the_client_naming_the_mistake():
    core = new_core()
    ack = HelloAck(version=PROTOCOL_VERSION, role=PeerRole.OBJECT_STORAGE)
    effects = run(core, 0.0, Connect(READY), FromScheduler(ack))
    kind, error = outcomes(effects)["ready"]
    assert kind == REPLY_ERROR and isinstance(error, DisconnectedError)
    assert str(error) == f"{ADDRESS} is an object storage server, not a scheduler"
    assert core.state is SessionState.STOPPED


def test_an_address_whose_handshake_fails_is_not_a_scheduler():
    core = new_core()
    effects = run(core, 0.0, Connect(READY), scheduler(REFUSED))
    kind, error = outcomes(effects)["ready"]
    assert kind == REPLY_ERROR and isinstance(error, DisconnectedError)
    assert str(error).startswith(f"{ADDRESS} is not a scheduler, or it requires CurveZMQ keys: it closed the")


def test_a_hello_ack_that_does_not_say_who_answered_is_an_older_schedulers():
    core = new_core()
    effects = run(core, 0.0, Connect(READY), FromScheduler(HelloAck(version=PROTOCOL_VERSION)))
    assert outcomes(effects)["ready"][0] == REPLY
    assert core.state is SessionState.READY


# --- the scheduler's connection ----------------------------------------------------------------------------------


def test_when_the_connection_to_the_scheduler_closes_everything_waiting_fails_at_once():
    core = connected()
    run(core, 0.0, scheduler(UP), submit(1))
    effects = run(core, 1.0, scheduler(DOWN))
    kind, error = outcomes(effects)["task1"]
    assert kind == ERROR and isinstance(error, DisconnectedError)
    assert str(error) == f"lost the connection to the scheduler at {ADDRESS}"
    assert core.state is SessionState.STOPPED


def test_a_connection_that_drops_before_the_hello_ack_is_waited_out_and_hello_said_again():
    core = new_core()
    assert [type(m) for m in to_scheduler(run(core, 0.0, Connect(READY), scheduler(UP)))] == [Hello]
    assert to_scheduler(run(core, 1.0, scheduler(DOWN))) == []
    assert core.state is SessionState.CONNECTING
    assert [type(m) for m in to_scheduler(run(core, 1.5, scheduler(UP)))] == [Hello]
    effects = run(core, 2.0, FromScheduler(HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE)))
    assert outcomes(effects)["ready"][0] == REPLY


# --- the storage server's connection -----------------------------------------------------------------------------


def test_when_storage_goes_away_what_waits_on_it_fails_at_once_and_its_functions_are_forgotten():
    core = connected()
    run(core, 0.0, storage(UP))
    effects = run(core, 0.5, PutObject(PUT, b"o" * 16, b"data"))
    assert storage_requests(effects, ObjectRequestKind.PUT)
    effects = run(core, 1.0, storage(DOWN))
    kind, error = outcomes(effects)["put"]
    assert kind == REPLY_ERROR and isinstance(error, DisconnectedError)
    assert "lost the connection to the object storage server" in str(error)
    assert ObjectsFailed(None) in effects  # what it held is gone: functions are put again


def test_while_storage_is_away_requests_wait_for_it_and_go_after_hello_again():
    core = connected()
    run(core, 0.0, storage(UP), storage(DOWN))
    effects = run(core, 1.0, PutObject(PUT, b"o" * 16, b"data"))
    assert "put" not in outcomes(effects)
    assert storage_requests(effects, ObjectRequestKind.PUT) == []  # nothing goes while it is away
    effects = run(core, 2.0, storage(UP))
    assert [type(e.message) for e in effects if isinstance(e, ToStorage)][:1] == [Hello]  # Hello first
    ((request, _),) = storage_requests(effects, ObjectRequestKind.PUT)
    assert outcomes(run(core, 3.0, put_ack(request)))["put"][0] == REPLY


def test_a_request_made_while_storage_is_away_fails_if_it_does_not_come_back_in_time():
    core = connected()
    run(core, 0.0, storage(UP), storage(DOWN))
    run(core, 1.0, PutObject(PUT, b"o" * 16, b"data"))
    kind, error = outcomes(run(core, 1.0 + RECONNECT_SECONDS))["put"]
    assert kind == REPLY_ERROR and isinstance(error, DisconnectedError)
    assert str(error) == f"the object storage server at {STORAGE} was unreachable for {RECONNECT_SECONDS:g}s"
    effects = run(core, 9.0, storage(UP))
    assert storage_requests(effects, ObjectRequestKind.PUT) == []  # what failed is not sent when it is back


def test_a_storage_server_that_refuses_after_accepting_restarted_and_is_told_hello_again():
    core = connected()
    run(core, 0.0, FromStorage(HelloAck(version=PROTOCOL_VERSION, role=PeerRole.OBJECT_STORAGE), []))
    run(core, 0.5, PutObject(PUT, b"o" * 16, b"data"))
    effects = run(core, 1.0, FromStorage(Refusal(PROTOCOL_VERSION, "send Hello first"), []))
    kind, error = outcomes(effects)["put"]
    assert kind == REPLY_ERROR and isinstance(error, DisconnectedError) and "restarted" in str(error)
    assert [type(e.message) for e in effects if isinstance(e, ToStorage)] == [Hello]
    effects = run(core, 2.0, PutObject(PUT, b"p" * 16, b"data"))
    assert storage_requests(effects, ObjectRequestKind.PUT)  # served again, not refused for good


def test_a_storage_server_that_refuses_the_first_hello_refuses_the_client_for_good():
    core = connected()
    run(core, 0.5, PutObject(PUT, b"o" * 16, b"data"))
    effects = run(core, 1.0, FromStorage(Refusal(PROTOCOL_VERSION, "protocol 9.0"), []))
    kind, error = outcomes(effects)["put"]
    assert kind == REPLY_ERROR and isinstance(error, ProtocolError)


def test_a_storage_address_that_answers_as_a_scheduler_is_refused():
    core = connected()
    run(core, 0.5, PutObject(PUT, b"o" * 16, b"data"))
    effects = run(core, 1.0, FromStorage(HelloAck(version=PROTOCOL_VERSION, role=PeerRole.SCHEDULER), []))
    kind, error = outcomes(effects)["put"]
    assert kind == REPLY_ERROR and f"{STORAGE}, named by the scheduler, is a scheduler" in str(error)
