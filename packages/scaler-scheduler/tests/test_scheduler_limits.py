"""What the scheduler's core tells of its limits and enforces of its quotas, driven directly."""

from __future__ import annotations

from typing import Dict

from test_scheduler_core import CLIENT, WORKER_A, admitted, hello, sent, serving, task

from scaler.protocol import codec, routed
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import STORAGE, FromPeer, FromStorage, MonitorSubscription, Publish, Start, Tick
from scaler.scheduler.scheduler_settings import SchedulerSettings


def test_every_hello_ack_states_the_message_size_limit():
    core = serving(SchedulerCore(SchedulerSettings(max_message_size=3 << 20)))
    for peer, role in ((CLIENT, m.PeerRole.CLIENT), (WORKER_A, m.PeerRole.WORKER)):
        (ack,) = sent(admitted(core, core.handle(FromPeer(peer, hello(role)), 0.0)), to=peer)
        assert type(ack) is m.HelloAck and ack.max_message_size == 3 << 20


OTHER = b"C|host|9|zz"


def _client_core(quota: int) -> SchedulerCore:
    core = serving(SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1", max_client_tasks=quota)))
    for client in (CLIENT, OTHER):
        core.handle(FromPeer(client, hello(m.PeerRole.CLIENT)), 0.0)
    return core


def _rejected(effects, client: bytes = CLIENT) -> Dict[bytes, str]:
    return {
        r.task_id: r.error_text
        for batch in sent(effects, client, m.TaskResultBatch)
        for r in batch.results
        if r.status == m.TaskStatus.REJECTED
    }


def test_every_hello_ack_states_the_quota_of_tasks_a_client_may_have():
    core = serving(SchedulerCore(SchedulerSettings(max_client_tasks=7)))
    (ack,) = sent(admitted(core, core.handle(FromPeer(CLIENT, hello(m.PeerRole.CLIENT)), 0.0)), to=CLIENT)
    assert ack.client_quota == 7


def test_tasks_beyond_a_clients_quota_are_rejected_naming_it_and_another_client_goes_on():
    core = _client_core(quota=3)
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(1, 6)])), 0.0)
    rejected = _rejected(effects)
    assert sorted(rejected) == [task(4).task_id, task(5).task_id]
    assert all(
        f"client {CLIENT.decode()} has its quota of 3 tasks queued here (scaler_scheduler --max-client-tasks)" in why
        for why in rejected.values()
    )
    assert core.task_count == 3
    effects = core.handle(FromPeer(OTHER, m.TaskBatch([task(n) for n in range(11, 14)])), 0.0)
    assert _rejected(effects, OTHER) == {} and core.task_count == 6  # a quota of its own


def test_only_queued_tasks_count_a_task_a_worker_takes_or_a_cancel_makes_room():
    core = _client_core(quota=2)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 0.0)  # no worker: both queued
    assert _rejected(core.handle(FromPeer(CLIENT, m.TaskBatch([task(3)])), 0.0)) != {}
    core.handle(FromPeer(CLIENT, m.TaskCancel([task(2).task_id])), 0.0)  # cancelled while queued
    assert _rejected(core.handle(FromPeer(CLIENT, m.TaskBatch([task(4)])), 0.0)) == {}
    core.handle(FromPeer(WORKER_A, hello(m.PeerRole.WORKER, capacity=10)), 0.0)  # takes tasks 1 and 4
    assert _rejected(core.handle(FromPeer(CLIENT, m.TaskBatch([task(5), task(6)])), 0.0)) == {}
    assert core.task_count == 4
    core.handle(FromPeer(WORKER_A, m.DisconnectRequest("leaving")), 0.0)  # its tasks queued again: 4 queued
    assert _rejected(core.handle(FromPeer(CLIENT, m.TaskBatch([task(7)])), 0.0)) != {}


def test_graph_nodes_do_not_count_against_the_quota():
    core = _client_core(quota=2)
    nodes = [m.Task(task_id=n.to_bytes(16, "big"), function_id=b"f") for n in range(100, 110)]
    graph = m.GraphTask(graph_id=b"g1", tasks=nodes, targets=[nodes[-1].task_id])
    core.handle(FromPeer(CLIENT, routed.decode_routed(codec.encode(graph))[0]), 0.0)
    assert core.task_count == 10  # released: every node is ready
    assert _rejected(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 0.0)) == {}


def test_the_monitor_sees_each_clients_tasks_and_stored_and_spilled_bytes_and_the_quotas():
    core = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1", max_client_tasks=9))
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION, role=m.PeerRole.OBJECT_STORAGE, client_quota=5 << 20)), 0.0)
    core.handle(FromPeer(CLIENT, hello(m.PeerRole.CLIENT)), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 0.0)
    core.handle(MonitorSubscription(1), 0.0)
    effects = core.handle(Tick(), 1.0)
    (usage,) = [r for r in sent(effects, STORAGE, m.ObjectRequest) if r.kind == m.ObjectRequestKind.USAGE]
    assert usage.object_ids == [CLIENT]
    usage = m.ObjectResponse(0, m.ObjectRequestKind.USAGE, [CLIENT], [m.ObjectStatus.OK], [42], spilled_sizes=[40])
    core.handle(FromStorage(usage), 1.5)
    (published,) = [e for e in core.handle(Tick(), 2.5) if type(e) is Publish]
    snapshot = published.snapshot
    assert (snapshot.client_task_quota, snapshot.client_memory_quota) == (9, 5 << 20)
    (client,) = snapshot.client_snapshots
    assert (client.client_id, client.tasks, client.stored_bytes, client.spilled_bytes) == (CLIENT, 2, 42, 40)


def test_a_storage_server_older_than_1_8_is_not_asked_for_usage():
    core = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1"))
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(m.Version(PROTOCOL_VERSION.major, 7), role=m.PeerRole.OBJECT_STORAGE)), 0.0)
    core.handle(FromPeer(CLIENT, hello(m.PeerRole.CLIENT)), 0.0)
    core.handle(MonitorSubscription(1), 0.0)
    effects = core.handle(Tick(), 1.0)
    assert [type(e) for e in effects if type(e) is Publish] == [Publish]
    assert sent(effects, STORAGE, m.ObjectRequest) == []
