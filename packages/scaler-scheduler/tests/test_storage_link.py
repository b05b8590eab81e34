"""The scheduler core's conversation with its object storage server, driven directly: no sockets, no clock."""

from __future__ import annotations

from typing import Any, List

import pytest

from scaler.protocol import messages as m
from scaler.protocol.lifecycle import TransitionError
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    STORAGE,
    FromPeer,
    FromStorage,
    MonitorSubscription,
    Send,
    Start,
    StartFailed,
    StartServing,
    StartStorage,
    StorageConnected,
    StorageLost,
    Tick,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.storage_link import ANSWER_SECONDS, PROBE_SECONDS

ADDRESS = "tcp://127.0.0.1:2346"
CLIENT = b"C|host|1|aa"


def core(given: bool = False) -> SchedulerCore:
    return SchedulerCore(SchedulerSettings(object_storage_address=ADDRESS, object_storage_address_given=given, pid=42))


def of_type(effects: List[Any], kind: type) -> List[Any]:
    return [e for e in effects if type(e) is kind]


def to_storage(effects: List[Any]) -> List[Any]:
    return [e.message for e in effects if type(e) is Send and e.to == STORAGE]


def test_start_says_hello_to_storage_and_serves_once_it_answers():
    scheduler = core()
    (hello,) = to_storage(scheduler.handle(Start(), 10.0))
    assert type(hello) is m.Hello and hello.role == m.PeerRole.SCHEDULER and hello.pid == 42
    assert scheduler.next_wakeup == 10.0 + min(PROBE_SECONDS, 0.5)
    effects = scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 10.2)
    assert of_type(effects, StartServing) and not of_type(effects, StartStorage)
    assert of_type(scheduler.handle(Tick(), 20.0), StartStorage) == []


def test_a_server_is_started_at_the_default_address_when_none_answers_in_time():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    assert of_type(scheduler.handle(Tick(), PROBE_SECONDS / 2), StartStorage) == []
    (start,) = of_type(scheduler.handle(Tick(), PROBE_SECONDS), StartStorage)
    assert start.address == ADDRESS
    assert to_storage(scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), PROBE_SECONDS + 1)) == []
    assert scheduler.next_wakeup == PROBE_SECONDS + 0.5  # the started server answered: only ticks now


def test_a_started_server_that_does_not_answer_stops_the_scheduler_saying_so():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(Tick(), PROBE_SECONDS)
    assert scheduler.next_wakeup == PROBE_SECONDS + 0.5
    assert of_type(scheduler.handle(Tick(), PROBE_SECONDS + ANSWER_SECONDS - 0.1), StartFailed) == []
    (failed,) = of_type(scheduler.handle(Tick(), PROBE_SECONDS + ANSWER_SECONDS), StartFailed)
    assert failed.reason == f"the object storage server started at {ADDRESS} did not answer"


def test_a_given_address_is_waited_for_and_never_started():
    scheduler = core(given=True)
    scheduler.handle(Start(), 0.0)
    for now in range(1, int(ANSWER_SECONDS)):
        effects = scheduler.handle(Tick(), float(now))
        assert of_type(effects, StartStorage) == [] and of_type(effects, StartFailed) == []
    (failed,) = of_type(scheduler.handle(Tick(), ANSWER_SECONDS), StartFailed)
    assert failed.reason == f"no object storage server answered at {ADDRESS}"


@pytest.mark.parametrize(
    "answer, complaint",
    [
        (m.Refusal(PROTOCOL_VERSION, "go away"), "object storage server refused the scheduler: go away"),
        (m.HelloAck(m.Version(PROTOCOL_VERSION.major + 1, 0)), f"{PROTOCOL_VERSION.major + 1}.0"),
    ],
)
def test_a_refusal_or_an_incompatible_server_stops_the_scheduler_naming_why(answer, complaint):
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    (failed,) = of_type(scheduler.handle(FromStorage(answer), 0.1), StartFailed)
    assert complaint in failed.reason
    with pytest.raises(TransitionError, match="failed on answered"):  # the link is over
        scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.2)


def test_requests_wait_while_the_connection_is_down_and_follow_a_new_hello():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(StorageConnected(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    scheduler.handle(FromPeer(CLIENT, m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host")), 0.1)
    assert to_storage(scheduler.handle(StorageLost(), 1.0)) == []
    delete = m.ObjectInstruction(m.ObjectInstructionKind.DELETE, CLIENT, [b"o1"])
    assert to_storage(scheduler.handle(FromPeer(CLIENT, delete), 1.1)) == []
    (hello,) = to_storage(scheduler.handle(StorageConnected(), 2.0))
    assert type(hello) is m.Hello
    request, admit = to_storage(scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 2.1))
    assert request.kind == m.ObjectRequestKind.DELETE and request.object_ids == [b"o1"]
    assert admit.kind == m.ObjectRequestKind.ADMIT and admit.owner_id == CLIENT  # a new server knows no client
    (clear,) = to_storage(scheduler.handle(FromPeer(CLIENT, m.DisconnectRequest()), 3.0))
    assert clear.kind == m.ObjectRequestKind.CLEAR_OWNER and clear.owner_id == CLIENT


def test_a_refused_request_is_logged_and_the_scheduler_goes_on(caplog):
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    assert scheduler.handle(FromStorage(m.Refusal(PROTOCOL_VERSION, "bad request")), 1.0) == []
    assert "bad request" in caplog.text
    assert scheduler.handle(FromStorage(m.ObjectResponse(kind=m.ObjectRequestKind.DELETE)), 1.0) == []


# --- admissions (protocol 1.8) ----------------------------------------------------------------------------------


def client_hello(scheduler: SchedulerCore, client: bytes, now: float) -> List[Any]:
    return scheduler.handle(FromPeer(client, m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host")), now)


def answers(effects: List[Any], to: bytes) -> List[Any]:
    return [e.message for e in effects if type(e) is Send and e.to == to]


def admitted(admit: m.ObjectRequest) -> FromStorage:
    return FromStorage(m.ObjectResponse(admit.request_id, m.ObjectRequestKind.ADMIT))


def test_a_clients_hello_ack_waits_until_storage_admitted_it():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    effects = client_hello(scheduler, CLIENT, 1.0)
    (admit,) = to_storage(effects)
    assert (admit.kind, admit.owner_id, admit.scope_id) == (m.ObjectRequestKind.ADMIT, CLIENT, b"")
    assert answers(effects, CLIENT) == []
    assert answers(client_hello(scheduler, CLIENT, 1.1), CLIENT) == []  # said again: still one answer, later
    (ack,) = answers(scheduler.handle(admitted(admit), 1.2), CLIENT)
    assert type(ack) is m.HelloAck
    assert type(answers(client_hello(scheduler, CLIENT, 1.3), CLIENT)[0]) is m.HelloAck  # admitted: at once
    other = b"C|host|2|bb"
    (admit,) = to_storage(client_hello(scheduler, other, 2.0))
    scheduler.handle(FromPeer(other, m.DisconnectRequest()), 2.1)  # it leaves before it was admitted
    assert answers(scheduler.handle(admitted(admit), 2.2), other) == []


def test_an_older_storage_server_is_not_asked_to_admit_and_the_hello_ack_leaves_at_once():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(m.Version(1, 7))), 0.0)
    effects = client_hello(scheduler, CLIENT, 1.0)
    assert to_storage(effects) == [] and type(answers(effects, CLIENT)[0]) is m.HelloAck


def test_a_server_that_answers_again_admits_every_client_again_and_the_waiting_hello_acks_leave():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(StorageConnected(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    scheduler.handle(admitted(to_storage(client_hello(scheduler, CLIENT, 0.1))[0]), 0.1)
    waiting = b"C|host|2|bb"
    client_hello(scheduler, waiting, 0.2)  # its admission is asked of the connection about to go down
    scheduler.handle(StorageLost(), 1.0)
    away = b"C|host|3|cc"
    effects = client_hello(scheduler, away, 1.1)  # while storage is away: answered at once, admitted later
    assert to_storage(effects) == [] and type(answers(effects, away)[0]) is m.HelloAck
    scheduler.handle(StorageConnected(), 2.0)
    admits = to_storage(scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 2.1))
    assert {(a.kind, a.owner_id) for a in admits} == {(m.ObjectRequestKind.ADMIT, c) for c in (CLIENT, waiting, away)}
    effects = [e for admit in admits for e in scheduler.handle(admitted(admit), 2.2)]
    assert [(e.to, type(e.message)) for e in effects if type(e) is Send] == [(waiting, m.HelloAck)]


def test_nothing_reaches_a_client_before_its_hello_ack_not_even_a_monitors_arrival():
    scheduler = core()
    scheduler.handle(Start(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    (admit,) = to_storage(client_hello(scheduler, CLIENT, 1.0))
    assert answers(scheduler.handle(MonitorSubscription(1), 1.1), CLIENT) == []  # watching changed meanwhile
    (ack,) = answers(scheduler.handle(admitted(admit), 1.2), CLIENT)
    assert type(ack) is m.HelloAck
    (echo,) = answers(scheduler.handle(MonitorSubscription(-1), 1.3), CLIENT)  # greeted: told at once
    assert type(echo) is m.ClientHeartbeatEcho and not echo.record_tasks
