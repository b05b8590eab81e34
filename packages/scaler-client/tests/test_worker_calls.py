"""Calls on every worker in the client core (`scheduler_asks.py`): a `WorkerCall` leaves under its command's ID,
the scheduler's answer of that ID replies, one of no command is dropped, and what waits fails when the client
stops."""

from __future__ import annotations

from core_driver import REPLY, REPLY_ERROR, connected, outcomes, run, to_scheduler

from scaler.client.client_events import Abort, AskWorkers, FromScheduler
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.messages import WorkerCall, WorkerCallAnswer, WorkerCallKind, WorkerCallResult

RUN, RESTART = 5, 6  # command IDs the driver names ("shutdown", "info")


def test_a_call_leaves_under_its_command_id_and_its_answer_replies():
    core = connected()
    (call,) = to_scheduler(run(core, 0.0, AskWorkers(RUN, WorkerCall(0, WorkerCallKind.RUN, b"", "", b"f"))))
    assert (call.call_id, call.kind, call.payload) == (RUN, WorkerCallKind.RUN, b"f")
    answer = WorkerCallAnswer(RUN, [WorkerCallResult(RUN, b"", b"W|h|1|a", True, b"v")])
    assert outcomes(run(core, 0.1, FromScheduler(answer))) == {"shutdown": (REPLY, answer)}
    assert outcomes(run(core, 0.2, FromScheduler(answer))) == {}  # answered already: dropped


def test_calls_that_wait_fail_when_the_client_stops():
    core = connected()
    run(core, 0.0, AskWorkers(RESTART, WorkerCall(0, WorkerCallKind.RESTART)))
    found = outcomes(run(core, 0.1, Abort(DisconnectedError("gone"))))
    assert found["info"][0] == REPLY_ERROR
