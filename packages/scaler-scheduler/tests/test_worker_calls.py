"""Calls on every worker (`worker_calls.py`, through `SchedulerCore`): each goes to every worker of protocol 1.8,
the client is answered once all of them answered or left, an upload reaches the workers that join later while its
client stays."""

from __future__ import annotations

from test_scheduler_core import CLIENT, WORKER_A, WORKER_B, core_with, hello, sent

from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_events import FromPeer

WORKER_C = b"W|host|4|cc"


def _worker_hello() -> m.Hello:
    message = hello(m.PeerRole.WORKER)
    message.version = PROTOCOL_VERSION
    return message


def _core(workers=(WORKER_A, WORKER_B)):
    core = core_with(workers=())
    for worker in workers:
        core.handle(FromPeer(worker, _worker_hello()), 0.0)
    return core


def _upload(call_id: int = 1, name: str = "helper.py") -> m.WorkerCall:
    return m.WorkerCall(call_id, m.WorkerCallKind.UPLOAD, b"", name, b"X = 1\n")


def _answer(call: m.WorkerCall, success: bool = True) -> m.WorkerCallResult:
    return m.WorkerCallResult(call.call_id, call.client_id, b"", success, b"", "" if success else "it failed")


def test_a_call_goes_to_every_worker_and_is_answered_once_all_did():
    core = _core()
    effects = core.handle(FromPeer(CLIENT, m.WorkerCall(5, m.WorkerCallKind.RUN, b"", "", b"f")), 1.0)
    calls = {worker: sent(effects, to=worker, kind=m.WorkerCall) for worker in (WORKER_A, WORKER_B)}
    assert all(len(each) == 1 and each[0].client_id == CLIENT for each in calls.values())
    assert sent(effects, to=CLIENT) == []
    call = calls[WORKER_A][0]
    assert sent(core.handle(FromPeer(WORKER_A, _answer(call)), 2.0), to=CLIENT) == []
    (answer,) = sent(core.handle(FromPeer(WORKER_B, _answer(call, False)), 2.0), to=CLIENT)
    assert answer.call_id == 5
    assert {(r.worker_id, r.success) for r in answer.results} == {(WORKER_A, True), (WORKER_B, False)}


def test_a_worker_that_leaves_before_it_answers_is_an_answer_that_says_so():
    core = _core()
    effects = core.handle(FromPeer(CLIENT, m.WorkerCall(6, m.WorkerCallKind.RESTART)), 1.0)
    (call,) = sent(effects, to=WORKER_A, kind=m.WorkerCall)
    core.handle(FromPeer(WORKER_A, _answer(call)), 2.0)
    effects = core.handle(FromPeer(WORKER_B, m.DisconnectRequest("bye")), 3.0)
    (answer,) = sent(effects, to=CLIENT, kind=m.WorkerCallAnswer)
    (left,) = [result for result in answer.results if result.worker_id == WORKER_B]
    assert not left.success and "left before it answered" in left.error


def test_without_workers_a_call_is_answered_at_once_and_an_old_worker_is_not_asked():
    core = core_with(workers=(WORKER_A,))  # its Hello says protocol 1.0: it cannot read a WorkerCall
    effects = core.handle(FromPeer(CLIENT, m.WorkerCall(7, m.WorkerCallKind.RUN)), 1.0)
    assert sent(effects, to=WORKER_A) == []
    (answer,) = sent(effects, to=CLIENT)
    assert answer == m.WorkerCallAnswer(7, [])


def test_an_upload_reaches_a_worker_that_joins_later_while_its_client_stays():
    core = _core(workers=(WORKER_A,))
    core.handle(FromPeer(CLIENT, _upload(1, "helper.py")), 1.0)
    core.handle(FromPeer(CLIENT, _upload(2, "helper.py")), 1.0)  # the same name again: the latest only is kept
    core.handle(FromPeer(CLIENT, _upload(3, "other.zip")), 1.0)
    effects = core.handle(FromPeer(WORKER_B, _worker_hello()), 2.0)
    messages = sent(effects, to=WORKER_B)
    assert type(messages[0]) is m.HelloAck  # the uploads come after its HelloAck
    assert [(call.call_id, call.name) for call in messages if type(call) is m.WorkerCall] == [
        (2, "helper.py"), (3, "other.zip")
    ]
    late = [call for call in messages if type(call) is m.WorkerCall][0]
    assert sent(core.handle(FromPeer(WORKER_B, _answer(late)), 3.0), to=CLIENT) == []  # nobody waits for it

    core.handle(FromPeer(CLIENT, m.DisconnectRequest()), 4.0)
    assert sent(core.handle(FromPeer(WORKER_C, _worker_hello()), 5.0), to=WORKER_C, kind=m.WorkerCall) == []


def test_uploads_past_what_the_scheduler_keeps_of_a_client_are_refused_at_once(monkeypatch):
    from scaler.scheduler import worker_calls

    monkeypatch.setattr(worker_calls, "MAX_KEPT_BYTES", 10)
    core = _core(workers=(WORKER_A,))
    kept = m.WorkerCall(1, m.WorkerCallKind.UPLOAD, b"", "a.py", b"123456")
    assert len(sent(core.handle(FromPeer(CLIENT, kept), 1.0), to=WORKER_A, kind=m.WorkerCall)) == 1
    again = m.WorkerCall(2, m.WorkerCallKind.UPLOAD, b"", "a.py", b"1234567890")  # replaces a.py: within
    assert len(sent(core.handle(FromPeer(CLIENT, again), 1.0), to=WORKER_A, kind=m.WorkerCall)) == 1
    other = m.WorkerCall(3, m.WorkerCallKind.UPLOAD, b"", "b.py", b"1")
    effects = core.handle(FromPeer(CLIENT, other), 2.0)
    assert sent(effects, to=WORKER_A) == []
    (answer,) = sent(effects, to=CLIENT)
    (failure,) = answer.results
    assert answer.call_id == 3 and not failure.success and "at most 10 bytes of uploads per client" in failure.error
