"""The client core when its scheduler goes away and comes back (restarted, or the network failed and healed):
it waits up to ``reconnect_seconds``, sends it nothing meanwhile, says Hello again on a new connection, and
sends again every task and graph that has not ended; past the wait everything fails naming the address. The
property test drives random interleavings of these events among the usual ones: every future still ends
exactly once."""

from __future__ import annotations

import logging
from typing import List

from core_driver import (
    ADDRESS,
    CANCELLED,
    CLEAR,
    CLIENT_ID,
    ERROR,
    FUNCTION,
    REPLY,
    REPLY_ERROR,
    RESULT,
    SHUTDOWN,
    STORAGE,
    acknowledge_function,
    connected,
    outcomes,
    results,
    run,
    sent_tasks,
    submit,
    tid,
    to_scheduler,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_client_core_properties import ACTIONS, World

from scaler.client.client_core import ClientCore
from scaler.client.client_events import (
    Cancel,
    Clear,
    Connect,
    ConnectionChanged,
    Disconnect,
    FromScheduler,
    HandshakeFailed,
    Heartbeat,
    MadeIn,
    RenewConnection,
    Shutdown,
    SubmitGraph,
    ToScheduler,
)
from scaler.client.client_lifecycles import SessionState
from scaler.protocol.connection_events import DOWN, UP
from scaler.protocol.errors import DisconnectedError, ProtocolError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    ClientHeartbeatEcho,
    GraphTask,
    Hello,
    HelloAck,
    ObjectInstruction,
    Refusal,
    Task,
    TaskCancel,
    TaskResult,
)
from scaler.protocol.version import PROTOCOL_VERSION

WAIT = 30.0  # reconnect_seconds
ACK = FromScheduler(HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE))


def scheduler(change: str) -> ConnectionChanged:
    return ConnectionChanged(False, change)


def lost(now: float = 1.0, tasks=(1, 2)):
    """A core with ``tasks`` sent, whose scheduler connection was then lost at ``now``; and that turn's effects."""
    core = connected(reconnect=WAIT)
    acknowledge_function(core)
    assert sent_tasks(run(core, 0.0, submit(*tasks))) == [tid(n) for n in tasks]
    return core, run(core, now, scheduler(DOWN))


def test_a_lost_scheduler_is_waited_for_on_a_new_connection_and_nothing_is_sent_to_it_meanwhile(caplog):
    with caplog.at_level(logging.WARNING, logger="scaler.client.client_core"):
        core, effects = lost()
    assert core.state is SessionState.RECONNECTING and outcomes(effects) == {}
    assert any(isinstance(effect, RenewConnection) for effect in effects)
    assert f"lost the connection to the scheduler at {ADDRESS}; waiting up to 30s" in caplog.text
    meanwhile = run(core, 5.0, submit(3), Cancel([tid(2)]), Clear(CLEAR))
    assert to_scheduler(meanwhile) == [] and not any(isinstance(effect, Heartbeat) for effect in meanwhile)
    assert outcomes(meanwhile) == {f"task{n}": (CANCELLED, None) for n in (1, 2, 3)}  # the clear cancels them
    run(core, 6.0, scheduler(UP))
    back = run(core, 6.5, ACK)
    assert [type(message) for message in to_scheduler(back)] == [ObjectInstruction]  # the clear, at last
    assert outcomes(back) == {}
    heartbeat = run(core, 8.0)
    assert any(isinstance(effect, Heartbeat) for effect in heartbeat)
    assert outcomes(run(core, 8.1, FromScheduler(ClientHeartbeatEcho()))) == {"clear": (REPLY, None)}


def test_back_it_is_told_hello_and_every_task_not_done_goes_again_in_order_then_results_end_them_once():
    core, _ = lost(tasks=(1, 2, 3))
    run(core, 2.0, results(TaskResult(task_id=tid(2))))  # (read before the close was)
    run(core, 3.0, submit(4))  # taken while the scheduler is away
    assert [type(message) for message in to_scheduler(run(core, 10.0, scheduler(UP)))] == [Hello]
    assert core.state is SessionState.RESUMING
    again = run(core, 10.5, ACK)
    assert core.state is SessionState.READY
    assert sent_tasks(again) == [tid(1), tid(3), tid(4)]
    assert not any(isinstance(effect, Heartbeat) for effect in again)  # the first heartbeat comes after the tasks
    ended = run(core, 11.0, results(*(TaskResult(task_id=tid(n)) for n in (1, 3, 4, 3))))
    assert {name: kind for name, (kind, _) in outcomes(ended).items()} == {"task1": RESULT, "task3": RESULT,
                                                                           "task4": RESULT}  # fmt: skip
    assert any(isinstance(effect, Heartbeat) for effect in run(core, 12.0))


def test_past_its_wait_every_task_fails_naming_the_address_and_the_wait():
    core, _ = lost(now=1.0)
    assert outcomes(run(core, 30.5)) == {}
    effects = run(core, 31.0)
    kind, error = outcomes(effects)["task1"]
    assert kind == ERROR and isinstance(error, DisconnectedError)
    assert str(error) == f"lost the connection to the scheduler at {ADDRESS}, which did not come back within 30s"
    assert core.state is SessionState.STOPPED


def test_a_scheduler_reachable_again_late_has_the_timeout_to_answer_the_hello():
    core, _ = lost(now=1.0)
    run(core, 30.0, scheduler(UP))
    assert outcomes(run(core, 39.0)) == {} and core.state is SessionState.RESUMING  # the timeout is 10 s
    assert outcomes(run(core, 40.0))["task1"][0] == ERROR


def test_a_cancel_whose_confirm_was_lost_ends_the_task_cancelled_and_goes_again():
    core, _ = lost(tasks=(1, 2))
    run(core, 2.0, Cancel([tid(1)]))  # cancelling, unsent
    run(core, 3.0, scheduler(UP))
    again = run(core, 3.5, ACK)
    assert outcomes(again) == {"task1": (CANCELLED, None)}
    assert sent_tasks(again) == [tid(2)]
    assert [message.task_ids for message in to_scheduler(again) if isinstance(message, TaskCancel)] == [[tid(1)]]


def test_the_commands_that_wait_for_the_scheduler_end_when_it_is_lost():
    core = connected(reconnect=WAIT)
    run(core, 0.0, Shutdown(SHUTDOWN), Clear(CLEAR))
    done = outcomes(run(core, 1.0, scheduler(DOWN)))
    assert done["clear"] == (REPLY, None)
    kind, error = done["shutdown"]
    assert kind == REPLY_ERROR and "before it answered" in str(error)


def test_a_refusal_of_the_hello_said_again_stops_the_client_with_its_reason():
    core, _ = lost()
    run(core, 2.0, scheduler(UP))
    effects = run(core, 2.5, FromScheduler(Refusal(PROTOCOL_VERSION, "protocol version 1.8 is not compatible")))
    kind, error = outcomes(effects)["task1"]
    assert kind == ERROR and isinstance(error, ProtocolError) and "not compatible" in str(error)
    assert core.state is SessionState.STOPPED


def test_a_handshake_refused_while_the_scheduler_restarts_is_waited_out_and_named_if_the_wait_ends():
    core, _ = lost(now=1.0)
    refused = HandshakeFailed("the CurveZMQ handshake with the scheduler failed", from_storage=False)
    assert outcomes(run(core, 2.0, refused)) == {} and core.state is SessionState.RECONNECTING
    run(core, 3.0, scheduler(UP))
    assert core.state is SessionState.RESUMING  # (it was a restart: the next handshake goes through)
    kind, error = outcomes(run(core, 45.0))["task1"]
    assert kind == ERROR and "its last handshake: the CurveZMQ handshake with the scheduler failed" in str(error)


def test_a_connection_lost_again_while_resuming_is_waited_for_on_another_new_connection():
    core, _ = lost(now=1.0)
    run(core, 2.0, scheduler(UP))
    effects = run(core, 3.0, scheduler(DOWN))
    assert core.state is SessionState.RECONNECTING and any(isinstance(e, RenewConnection) for e in effects)
    assert outcomes(run(core, 30.5)) == {}  # the same wait: from the first loss
    assert outcomes(run(core, 31.0))["task1"][0] == ERROR


def test_a_disconnect_while_the_scheduler_is_away_ends_at_once():
    core, _ = lost()
    done = outcomes(run(core, 2.0, Disconnect(3)))
    assert done["bye"] == (REPLY, None) and done["task1"][0] == ERROR
    assert core.state is SessionState.STOPPED


def test_a_graph_goes_again_marked_again_with_the_targets_still_waited_for():
    core = connected(reconnect=WAIT)
    acknowledge_function(core)
    tasks = [
        Task(task_id=tid(1), function_id=FUNCTION),
        Task(task_id=tid(3), function_id=FUNCTION, arguments=[Argument("", ArgumentKind.TASK, tid(1))]),
        Task(task_id=tid(4), function_id=FUNCTION),
    ]
    first = GraphTask(graph_id=b"g" * 16, tasks=tasks[:2], targets=[tid(3), tid(4)], more=True)
    second = GraphTask(graph_id=b"g" * 16, tasks=tasks[2:])
    sent = run(
        core, 0.0,
        SubmitGraph(first, [], [FUNCTION], [], [FUNCTION], first.targets), SubmitGraph(second, [], [], [], []),
    )  # fmt: skip
    assert len([m for m in to_scheduler(sent) if isinstance(m, GraphTask)]) == 2
    run(core, 1.0, results(TaskResult(task_id=tid(4))))
    run(core, 2.0, scheduler(DOWN))
    run(core, 3.0, scheduler(UP))
    again: List[GraphTask] = [m for m in to_scheduler(run(core, 3.5, ACK)) if isinstance(m, GraphTask)]
    assert [(m.again, m.more, m.targets, [t.task_id for t in m.tasks]) for m in again] == [
        (True, True, [tid(3)], [tid(1), tid(3)]),
        (False, False, [], [tid(4)]),
    ]
    assert outcomes(run(core, 4.0, results(TaskResult(task_id=tid(3)))))["task3"][0] == RESULT


def test_a_client_made_in_a_task_names_the_last_task_a_client_of_its_connection_was_made_in_when_it_resumes():
    core = ClientCore(
        CLIENT_ID, ADDRESS, 10.0, 1.0, 1, "host", made_in=(tid(7), b"proof-7"), reconnect_seconds=WAIT
    )  # fmt: skip
    (first,) = to_scheduler(run(core, 0.0, Connect(1)))
    assert (first.made_in, first.made_in_proof, first.resuming) == (tid(7), b"proof-7", False)
    run(core, 0.5, ACK, MadeIn(tid(8), b"proof-8"))  # task 7 may end; a Client was made in task 8
    run(core, 1.0, scheduler(DOWN))
    (again,) = to_scheduler(run(core, 2.0, scheduler(UP)))
    assert (again.made_in, again.made_in_proof, again.resuming) == (tid(8), b"proof-8", True)


def test_a_client_that_does_not_wait_keeps_no_sent_task_message_and_one_that_waits_keeps_it():
    for reconnect, kept in ((0.0, False), (WAIT, True)):
        core = connected(reconnect=reconnect)
        acknowledge_function(core)
        run(core, 0.0, submit(1))
        assert (core._tasks.record(tid(1)).task is not None) is kept


def test_a_client_that_does_not_wait_stops_at_once_as_before():
    core = connected()
    run(core, 0.0, submit(1))
    assert outcomes(run(core, 1.0, scheduler(DOWN)))["task1"][0] == ERROR


# --- random interleavings ----------------------------------------------------------------------------------------


class ReconnectingWorld(World):
    """The property test's world, with a client that waits for its scheduler, and a scheduler that goes away
    and comes back, as a new one (knowing nothing) or the same (cut off: it kept what it got)."""

    def __init__(self, quota: int) -> None:
        super().__init__(quota, reconnect=WAIT)

    def absorb(self, effect):
        if isinstance(effect, RenewConnection):
            return
        if isinstance(effect, ToScheduler) and isinstance(effect.message, TaskCancel):
            # a cancel whose confirm was lost goes again: whether it reached the scheduler is not known
            self.cancels_sent.update(effect.message.task_ids)
            return
        super().absorb(effect)

    def lose(self, k: int) -> None:
        if k % 2:  # a new scheduler: it answers for nothing sent before
            self.at_scheduler.clear()
            self.cancels_sent.clear()
        self.feed(scheduler(DOWN))

    def come_back(self, k: int) -> None:
        self.feed(scheduler(UP))

    def answer_again(self, k: int) -> None:
        self.feed(ACK)


RECONNECT_ACTIONS = [*ACTIONS, *["lose", "come_back", "answer_again"] * 3]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(RECONNECT_ACTIONS), st.integers(min_value=0, max_value=7)), max_size=80),
    st.sampled_from([0, 3]),
)
def test_every_task_ends_once_whatever_the_scheduler_losses_and_returns(script, quota):
    world = ReconnectingWorld(quota)
    for action, k in script:
        world.do(action, k)
        assert all(count == 1 for count in world.ends.values()), "a task ended twice"
        assert all(count <= 1 for count in world.replies.values()), "a command answered twice"
    world.disconnect(0)
    for _ in range(2):
        world.now += 1000
        world.feed()
    assert world.stopped and world.core.state is SessionState.STOPPED and world.core.pending_tasks == 0
    assert world.ends == {task_id: 1 for task_id in world.submitted}, "every task ends exactly once"
    assert world.replies == {command_id: 1 for command_id in world.commands}, "every command is answered once"


def test_the_scheduler_lost_and_back_unanswered_the_client_ends_every_task_past_its_wait():
    world = ReconnectingWorld(0)
    for n in range(3):
        world.submit(n)
    world.ack_put(0)
    world.lose(1)
    world.come_back(0)
    world.now += WAIT + 20
    world.feed()
    assert world.stopped and world.ends == {task_id: 1 for task_id in world.submitted}
