"""Worker managers at the scheduler core, driven directly: the decision, drains, stops, the webhook's calls."""

from __future__ import annotations

from typing import Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_scheduler_core import CLIENT, core_with, hello, sent, task

from scaler.protocol import messages as m
from scaler.protocol.security import Credential
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scaling_policy import ScalingSettings
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    ConnectionClosed,
    FromPeer,
    MonitorSubscription,
    PeerConnection,
    Publish,
    Tick,
)
from scaler.scheduler.webhook_manager import CallWebhook, WebhookAnswer

MANAGER = b"M|host|9|aa"
SCALING = ScalingSettings(up_after_seconds=1.0, idle_seconds=3.0)
NO_TIMEOUTS = dict(worker_timeout_seconds=1e9, client_timeout_seconds=1e9)


def manager_hello(version: m.Version = PROTOCOL_VERSION) -> m.Hello:
    return m.Hello(version, m.PeerRole.WORKER_MANAGER, 9, "host")


def beat(groups=(), per_group=1, low=0, high=3, caps=()) -> m.WorkerManagerHeartbeat:
    capabilities = [m.Capability(name, -1) for name in caps]
    return m.WorkerManagerHeartbeat(high * per_group, 0, per_group, low, high, capabilities, list(groups), "test")


def group(group_id: bytes, state=m.WorkerGroupState.RUNNING, workers=1) -> m.WorkerGroup:
    return m.WorkerGroup(group_id, state, workers, "")


def worker_hello(group_id: bytes, capacity: int = 10, caps=()) -> m.Hello:
    message = hello(m.PeerRole.WORKER, capacity, caps=caps)
    message.version = PROTOCOL_VERSION
    message.worker_info.group_id = group_id
    return message


def command(effects) -> m.WorkerManagerCommand:
    (found,) = sent(effects, to=MANAGER, kind=m.WorkerManagerCommand)
    return found


def managed_core(**options) -> SchedulerCore:
    core = core_with(workers=(), scaling=SCALING, **NO_TIMEOUTS, **options)
    (ack,) = sent(core.handle(FromPeer(MANAGER, manager_hello()), 0.0), to=MANAGER)
    assert type(ack) is m.HelloAck and ack.role == m.PeerRole.SCHEDULER
    return core


def test_a_manager_older_than_1_6_or_a_key_of_another_role_is_refused():
    core = core_with(workers=())
    (refusal,) = sent(core.handle(FromPeer(MANAGER, manager_hello(m.Version(1, 5))), 0.0))
    assert type(refusal) is m.Refusal and "a worker manager needs protocol 1.6 or later" in refusal.reason
    worker_key = Credential("w" * 40, frozenset({m.PeerRole.WORKER}))
    (refusal,) = sent(core.handle(FromPeer(MANAGER, manager_hello(), worker_key), 0.0))
    assert type(refusal) is m.Refusal and "not as a worker_manager" in refusal.reason
    manager_key = Credential("k" * 40, frozenset({m.PeerRole.WORKER_MANAGER}))
    (ack,) = sent(core.handle(FromPeer(MANAGER, manager_hello(), manager_key), 0.0))
    assert type(ack) is m.HelloAck
    assert sent(core.handle(FromPeer(MANAGER, m.TaskBatch([task(1)]), manager_key), 0.0)) == []
    assert core.task_count == 0  # a manager submits nothing: dropped


def test_load_on_an_empty_cluster_starts_a_group_whose_workers_take_the_tasks_and_idle_groups_stop():
    core = managed_core()
    assert command(core.handle(FromPeer(MANAGER, beat()), 0.0)).desired_groups == 0
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 0.1)
    assert sent(core.handle(Tick(), 0.5), to=MANAGER) == []  # waiting since 0.5: not long enough
    assert command(core.handle(Tick(), 1.5)).desired_groups == 2  # two tasks, groups of one worker
    core.handle(FromPeer(MANAGER, beat([group(b"g1"), group(b"g2")])), 1.6)
    batches = sent(core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1")), 1.7), kind=m.TaskBatch)
    assert [t.task_id for b in batches for t in b.tasks] == [task(1).task_id, task(2).task_id]
    core.handle(FromPeer(b"W|h|2|g2", worker_hello(b"g2")), 1.8)  # came late: nothing left for it
    core.handle(FromPeer(b"W|h|1|g1", m.TaskResultBatch([m.TaskResult(task(1).task_id, 1)])), 2.0)
    core.handle(FromPeer(b"W|h|1|g1", m.TaskResultBatch([m.TaskResult(task(2).task_id, 1)])), 2.0)
    core.handle(Tick(), 2.5)  # both idle from here
    assert sent(core.handle(Tick(), 5.0), to=MANAGER) == []  # idle 2.5 s of 3
    effects = core.handle(Tick(), 5.5)
    assert command(effects) == m.WorkerManagerCommand(desired_groups=0, stop_groups=[b"g1", b"g2"])
    answer = command(core.handle(FromPeer(MANAGER, beat([group(b"g1", m.WorkerGroupState.STOPPING)])), 6.0))
    assert answer == m.WorkerManagerCommand(desired_groups=0, stop_groups=[])


def test_a_retiring_group_gives_back_what_it_has_not_started_and_stops_only_once_it_holds_nothing():
    core = managed_core()
    core.handle(FromPeer(MANAGER, beat([group(b"g1"), group(b"g2")])), 0.0)
    core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1", capacity=10)), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(1, 6)])), 0.1)
    effects = core.handle(FromPeer(MANAGER, beat([group(b"g1", m.WorkerGroupState.RETIRING), group(b"g2")])), 0.2)
    (balance,) = sent(effects, to=b"W|h|1|g1", kind=m.BalanceRequest)
    assert balance.count == 5
    assert command(effects) == m.WorkerManagerCommand(desired_groups=1, stop_groups=[])  # g1 holds tasks
    given_back = [task(n).task_id for n in range(2, 6)]  # task 1 runs
    effects = core.handle(FromPeer(b"W|h|1|g1", m.BalanceResponse(given_back)), 0.3)
    assert sent(effects, kind=m.TaskBatch) == []  # nowhere to go yet
    effects = core.handle(FromPeer(b"W|h|2|g2", worker_hello(b"g2")), 0.4)
    assert [t.task_id for b in sent(effects, to=b"W|h|2|g2", kind=m.TaskBatch) for t in b.tasks] == given_back
    for now in (0.5, 1.0):  # g1 still runs task 1
        assert all(c.stop_groups == [] for c in sent(core.handle(Tick(), now), kind=m.WorkerManagerCommand))
    core.handle(FromPeer(b"W|h|1|g1", m.TaskResultBatch([m.TaskResult(task(1).task_id, 1)])), 1.2)
    effects = core.handle(Tick(), 1.5)
    assert command(effects).stop_groups == [b"g1"]
    assert sent(effects, kind=m.TaskBatch) == []


def test_a_capability_routed_task_grows_the_manager_that_offers_the_capability():
    core = core_with(workers=(), scaling=SCALING, **NO_TIMEOUTS)
    other = b"M|host|8|bb"
    core.handle(FromPeer(other, manager_hello()), 0.0)
    core.handle(FromPeer(MANAGER, manager_hello()), 0.0)
    core.handle(FromPeer(other, beat()), 0.0)
    core.handle(FromPeer(MANAGER, beat(caps=("gpu",))), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=[m.Capability("gpu", 1)])])), 0.1)
    core.handle(Tick(), 0.5)
    effects = core.handle(Tick(), 1.5)
    assert command(effects).desired_groups == 1
    assert sent(effects, to=other) == []  # it cannot run it


def test_a_manager_whose_connection_closes_is_forgotten_with_its_groups_and_monitors_see_managers():
    core = managed_core()
    core.handle(PeerConnection(MANAGER, 40), 0.0)
    core.handle(FromPeer(MANAGER, beat([group(b"g1")])), 0.1)
    core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1")), 0.2)
    core.handle(MonitorSubscription(1), 0.2)
    (publish,) = [e for e in core.handle(Tick(), 1.0) if type(e) is Publish]
    (snapshot,) = publish.snapshot.managers
    assert snapshot.manager_id == MANAGER and [g.group_id for g in snapshot.heartbeat.groups] == [b"g1"]
    assert [w.group_id for w in publish.snapshot.workers] == [b"g1"]
    core.handle(ConnectionClosed(40), 1.5)
    (publish,) = [e for e in core.handle(Tick(), 2.5) if type(e) is Publish]
    assert publish.snapshot.managers == [] and len(publish.snapshot.workers) == 1  # its worker stays a worker


def manager_gone(core: SchedulerCore, how: str, now: float) -> None:
    if how == "it left":
        core.handle(FromPeer(MANAGER, m.DisconnectRequest("stopping")), now)
    elif how == "its connection closed":
        core.handle(ConnectionClosed(40), now)
    else:  # silent past its timeout (managed_core's: 1e9 s), while the others were not
        core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), now - 1)
        core.handle(FromPeer(b"W|h|1|g1", m.WorkerHeartbeat()), now - 1)
        core.handle(Tick(), now)


@pytest.mark.parametrize("how", ["its connection closed", "it left", "it timed out"])
def test_the_workers_of_a_manager_that_is_gone_work_then_are_sent_away_once_idle(how, caplog):
    """Nobody is left to stop its groups (a Slurm job would run to its time limit): the scheduler does it."""
    core = managed_core()
    core.handle(PeerConnection(MANAGER, 40), 0.0)
    core.handle(FromPeer(MANAGER, beat([group(b"g1")])), 0.0)
    core.handle(PeerConnection(b"W|h|1|g1", 41), 0.0)
    core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1")), 0.0)
    manager_gone(core, how, 2e9 if how == "it timed out" else 0.1)
    start = 2e9 if how == "it timed out" else 0.0
    (batch,) = sent(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), start + 0.2), kind=m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(1).task_id]  # it works while there is work
    core.handle(Tick(), start + 0.25)  # seen busy: not idle
    core.handle(FromPeer(b"W|h|1|g1", m.TaskResultBatch([m.TaskResult(task(1).task_id, 1)])), start + 0.3)
    for now in (start + 0.5, start + 3.0):  # idle from 0.5: not the 3 s of SCALING yet
        assert sent(core.handle(Tick(), now), kind=m.DisconnectRequest) == []
    core.handle(Tick(), start + 3.6)  # idle 3.1 s: drained (it holds nothing)
    (leave,) = sent(core.handle(Tick(), start + 3.7), to=b"W|h|1|g1", kind=m.DisconnectRequest)
    assert "idle, and its manager is gone" in leave.reason
    caplog.clear()
    core.handle(ConnectionClosed(41), start + 3.8)  # it leaves: already forgotten, no news
    assert "disconnected" not in caplog.text
    assert sent(core.handle(FromPeer(CLIENT, m.TaskBatch([task(2)])), start + 4.0), kind=m.TaskBatch) == []


@pytest.mark.parametrize("told_to_stop", [False, True])
def test_a_group_drained_for_a_stop_is_sent_away_once_its_manager_is_gone_and_it_holds_nothing(told_to_stop):
    core = managed_core()
    core.handle(PeerConnection(MANAGER, 40), 0.0)
    core.handle(FromPeer(MANAGER, beat([group(b"g1")])), 0.0)
    core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1")), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 0.0)  # it runs task 1
    effects = core.handle(FromPeer(MANAGER, beat([group(b"g1", m.WorkerGroupState.RETIRING)])), 0.1)
    assert command(effects).stop_groups == []  # draining: it holds task 1
    core.handle(FromPeer(b"W|h|1|g1", m.BalanceResponse([])), 0.1)
    ended = FromPeer(b"W|h|1|g1", m.TaskResultBatch([m.TaskResult(task(1).task_id, 1)]))
    if told_to_stop:
        core.handle(ended, 0.2)
        assert command(core.handle(Tick(), 0.2)).stop_groups == [b"g1"]  # drained
    core.handle(ConnectionClosed(40), 0.3)
    assert sent(core.handle(FromPeer(CLIENT, m.TaskBatch([task(2)])), 0.4), kind=m.TaskBatch) == []  # drained
    if not told_to_stop:
        assert sent(core.handle(Tick(), 0.5), kind=m.DisconnectRequest) == []  # task 1 still runs
        core.handle(ended, 0.6)
    (leave,) = sent(core.handle(Tick(), 0.7), to=b"W|h|1|g1", kind=m.DisconnectRequest)
    (batch,) = sent(core.handle(FromPeer(b"W|h|2|", worker_hello(b"")), 0.8), kind=m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(2).task_id]  # the work it did not take goes elsewhere


def test_a_group_whose_manager_is_gone_and_whose_workers_left_is_forgotten_and_its_id_free(caplog):
    core = managed_core()
    core.handle(PeerConnection(MANAGER, 40), 0.0)
    core.handle(FromPeer(MANAGER, beat([group(b"g1")])), 0.0)
    core.handle(FromPeer(b"W|h|1|g1", worker_hello(b"g1")), 0.0)
    core.handle(ConnectionClosed(40), 0.1)
    core.handle(FromPeer(b"W|h|1|g1", m.DisconnectRequest("its job ended")), 0.2)
    other = b"M|host|7|cc"
    core.handle(FromPeer(other, manager_hello()), 0.3)
    caplog.clear()
    core.handle(FromPeer(other, beat([group(b"g1")])), 0.3)
    assert "dropped group" not in caplog.text  # the ID is free again


# ----------------------------------------------------------------------------- the webhook


def webhook_calls(effects) -> List[CallWebhook]:
    return [e for e in effects if type(e) is CallWebhook]


def test_the_webhook_is_asked_what_it_can_start_then_starts_and_shuts_down_groups_retrying_failures():
    core = core_with(workers=(), scaling=SCALING, adapter_webhook_url="http://127.0.0.1:1/", **NO_TIMEOUTS)
    (info,) = webhook_calls(core.handle(Tick(), 0.5))
    assert info.body == {"action": "get_worker_adapter_info"}
    assert webhook_calls(core.handle(WebhookAnswer(info.call_id, 0, {}, "timed out"), 0.6)) == []
    assert webhook_calls(core.handle(Tick(), 1.0)) == []  # retried after 1 s
    (info,) = webhook_calls(core.handle(Tick(), 1.7))
    body = {"max_worker_groups": 2, "workers_per_group": 1, "base_capabilities": {}}
    core.handle(WebhookAnswer(info.call_id, 200, body), 1.8)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(1, 4)])), 2.0)
    core.handle(Tick(), 2.5)
    starts = webhook_calls(core.handle(Tick(), 3.5))
    assert [call.body["action"] for call in starts] == ["start_worker_group"] * 2  # at most 2 groups
    core.handle(WebhookAnswer(starts[0].call_id, 429, {"error": "no capacity"}), 3.6)
    core.handle(WebhookAnswer(starts[1].call_id, 200, {"worker_group_id": "a1", "worker_ids": ["w"]}), 3.6)
    effects = core.handle(FromPeer(b"W|h|1|a1", worker_hello(b"a1", capacity=1)), 3.7)
    assert len(sent(effects, kind=m.TaskBatch)) == 1
    (retry,) = webhook_calls(core.handle(Tick(), 4.7))  # the refused start, again after its delay
    core.handle(WebhookAnswer(retry.call_id, 200, {"worker_group_id": "a2", "worker_ids": ["v"]}), 4.8)
    core.handle(FromPeer(b"W|h|2|a2", worker_hello(b"a2", capacity=1)), 4.9)
    for n, worker in ((1, b"W|h|1|a1"), (2, b"W|h|2|a2")):
        core.handle(FromPeer(worker, m.TaskResultBatch([m.TaskResult(task(n).task_id, 1)])), 5.0)
    core.handle(FromPeer(b"W|h|1|a1", m.TaskResultBatch([m.TaskResult(task(3).task_id, 1)])), 5.0)
    core.handle(Tick(), 5.5)
    shutdowns = webhook_calls(core.handle(Tick(), 9.0))
    assert sorted(call.body["worker_group_id"] for call in shutdowns) == ["a1", "a2"]
    core.handle(WebhookAnswer(shutdowns[0].call_id, 500, {"error": "boom"}), 9.1)
    core.handle(WebhookAnswer(shutdowns[1].call_id, 404, {"error": "unknown"}), 9.1)
    (again,) = webhook_calls(core.handle(Tick(), 11.0))
    assert again.body == shutdowns[0].body
    core.handle(WebhookAnswer(again.call_id, 200, {"status": "ok"}), 11.1)
    assert webhook_calls(core.handle(Tick(), 13.0)) == []


# ----------------------------------------------------------------------------- a property test


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sbfrmtk"), st.integers(0, 7)), min_size=30, max_size=80))
def test_whatever_the_order_of_events_every_task_starts_exactly_once(operations):
    """A manager that starts groups as told and stops each as soon as it is named, workers that start the
    first task they hold and give back the rest when asked, groups that retire on their own, managers killed
    and replaced (their groups' workers left to the scheduler), in any order: every task started exactly once
    (a worker stopped while it held a started task would make its task start again elsewhere); then, with
    nothing new, everything runs and every group stops, the killed managers' too."""
    core = managed_core()
    manager = [MANAGER, 40]  # the manager now, and its connection
    core.handle(PeerConnection(MANAGER, 40), 0.0)
    now = 0.0
    starts: Dict[bytes, int] = {}
    workers: Dict[bytes, List] = {}  # worker -> [group, held tasks (task ID, attempt), the first started]
    pending: List[bytes] = []  # groups started, worker not connected yet
    groups: Dict[bytes, m.WorkerGroupState] = {}
    last: List[m.WorkerManagerCommand] = [m.WorkerManagerCommand()]
    submitted = 0
    serial = [0]

    def feed(event):
        for effect in core.handle(event, now):
            message = getattr(effect, "message", None)
            to = getattr(effect, "to", None)
            if type(message) is m.WorkerManagerCommand:
                last[0] = message
            elif type(message) is m.TaskBatch and to in workers:
                workers[to][1].extend((t.task_id, t.attempt) for t in message.tasks)
            elif type(message) is m.BalanceRequest and to in workers:
                held = workers[to][1]
                keep = 1 if held and workers[to][2] else 0
                given = held[keep:][-message.count :] if message.count else []
                workers[to][1] = [h for h in held if h not in given]
                feed_later.append((to, m.BalanceResponse([task_id for task_id, _ in given])))
            elif type(message) is m.TaskCancel and to in workers:
                held = workers[to][1]
                workers[to][1] = [h for h in held if h[0] not in message.task_ids]
            elif type(message) is m.DisconnectRequest and to in workers:  # sent away: it leaves
                assert not workers.pop(to)[1], "a worker sent away while it held tasks"

    def manager_acts():
        for group_id in last[0].stop_groups:
            if group_id in groups:
                groups.pop(group_id)
                for worker_id in [w for w, state in workers.items() if state[0] == group_id]:
                    feed(FromPeer(worker_id, m.DisconnectRequest("stopped")))
                    del workers[worker_id]
                if group_id in pending:
                    pending.remove(group_id)
        counted = [g for g, state in groups.items() if state is m.WorkerGroupState.RUNNING]
        for _ in range(last[0].desired_groups - len(counted)):
            serial[0] += 1
            group_id = b"g%d" % serial[0]
            groups[group_id] = m.WorkerGroupState.RUNNING
            pending.append(group_id)
        feed(FromPeer(manager[0], beat([group(g, state) for g, state in groups.items()], high=3)))

    def manager_killed():  # its groups' workers stay (their jobs run on); its pending groups never start
        feed(ConnectionClosed(manager[1]))
        groups.clear()
        pending.clear()
        serial[0] += 1
        manager[:] = [b"M|host|%d|aa" % serial[0], 40 + serial[0]]
        feed(PeerConnection(manager[0], manager[1]))
        feed(FromPeer(manager[0], manager_hello()))
        last[0] = m.WorkerManagerCommand()

    feed_later: List = []
    operations = operations + [op for _ in range(40) for op in (("b", 0), ("f", 0), ("m", 0), ("t", 2))]
    for operation, value in operations:
        now += 0.25
        if operation == "s" and submitted < 40:  # submit
            feed(FromPeer(CLIENT, m.TaskBatch([task(submitted + n + 1) for n in range(value + 1)])))
            submitted += value + 1
        elif operation == "b":  # the workers of the started groups connect
            while pending:
                group_id = pending.pop(0)
                worker_id = b"W|" + group_id
                workers[worker_id] = [group_id, [], False]
                feed(FromPeer(worker_id, worker_hello(group_id, capacity=4)))
        elif operation == "f":  # workers finish the task they started
            for worker_id, state in list(workers.items())[value % 3 :]:
                if state[1] and state[2]:
                    task_id, attempt = state[1].pop(0)
                    state[2] = False
                    feed(FromPeer(worker_id, m.TaskResultBatch([m.TaskResult(task_id, attempt)])))
        elif operation == "r":  # a group retires on its own
            for group_id in list(groups)[value % 4 :][:1]:
                groups[group_id] = m.WorkerGroupState.RETIRING
        elif operation == "m":
            manager_acts()
        elif operation == "k":
            manager_killed()
        else:  # a pause
            now += value * 0.5
        feed(Tick())  # the scheduler's tick (every 0.5 s in a real one)
        for state in workers.values():  # each worker starts the first task it holds
            if state[1] and not state[2]:
                state[2] = True
                starts[state[1][0][0]] = starts.get(state[1][0][0], 0) + 1
        while feed_later:
            feed(FromPeer(*feed_later.pop(0)))
    assert all(count == 1 for count in starts.values()), starts
    assert set(starts) == {task(n).task_id for n in range(1, submitted + 1)}  # then it all ran,
    assert groups == {} and workers == {}  # and once idle, every group stopped
