"""What keeps the scheduler's cost flat as workers and clients grow, driven through the core: messages read
together (`Burst`) answered together, tasks sent in runs while there are many per worker or the scheduler is
behind, balancing that looks only at the most loaded workers, heartbeats checked against the tasks on their
way, silent peers found without a scan."""

from __future__ import annotations

from typing import List

from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import Burst, FromPeer, FromStorage, Send, Start, Tick
from scaler.scheduler.scheduler_settings import SchedulerSettings

CLIENT = b"C|host|1|aa"
OTHER_CLIENT = b"C|host|1|bb"


def workers(count: int) -> List[bytes]:
    return [b"W|host|%d|w" % i for i in range(count)]


def core_with(worker_ids: List[bytes], capacity: int = 100, **options) -> SchedulerCore:
    core = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1", **options))
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    for client in (CLIENT, OTHER_CLIENT):
        core.handle(FromPeer(client, m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host")), 0.0)
    for worker in worker_ids:
        hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", m.WorkerInfo(1, capacity))
        core.handle(FromPeer(worker, hello), 0.0)
    return core


def task(n: int) -> m.Task:
    return m.Task(task_id=n.to_bytes(16, "big"), function_id=b"f")


def sent(effects, kind) -> List[Send]:
    return [e for e in effects if type(e) is Send and type(e.message) is kind]


def assigned(effects) -> dict:
    """worker -> the tasks sent to it."""
    return {e.to: [t for t in e.message.tasks] for e in sent(effects, m.TaskBatch)}


def success(t: m.Task) -> m.TaskResult:
    return m.TaskResult(t.task_id, t.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, b"r", "")


def test_results_read_together_reach_each_client_in_one_batch_and_room_is_filled_once():
    ids = workers(3)
    core = core_with(ids, capacity=2)
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(8)])), 1.0))
    assert sorted(len(tasks) for tasks in on.values()) == [2, 2, 2]  # two wait in the scheduler
    burst = Burst([FromPeer(worker, m.TaskResultBatch([success(t) for t in on[worker]])) for worker in ids])
    effects = core.handle(burst, 2.0)
    (to_client,) = sent(effects, m.TaskResultBatch)
    assert to_client.to == CLIENT and len(to_client.message.results) == 6
    assert sum(len(tasks) for tasks in assigned(effects).values()) == 2  # the two left, once room was made


def test_a_message_that_fails_costs_only_itself_the_rest_of_its_burst_goes_on():
    core = core_with(workers(1))
    bad = FromPeer(CLIENT, m.TaskBatch([object()]))  # not a task: its handler raises
    effects = core.handle(Burst([bad, FromPeer(OTHER_CLIENT, m.TaskBatch([task(1)]))]), 1.0)
    assert [t.task_id for tasks in assigned(effects).values() for t in tasks] == [task(1).task_id]


def test_tasks_go_one_by_one_while_there_is_about_one_per_worker():
    core = core_with(workers(10))
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(10)])), 1.0))
    assert sorted(len(tasks) for tasks in on.values()) == [1] * 10


def test_new_tasks_go_in_runs_while_each_worker_has_several_to_do():
    ids = workers(10)
    core = core_with(ids)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(50)])), 1.0)  # five each
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(50, 60)])), 2.0))
    # a share of six each: the least loaded worker takes six at once, the next the four left (two messages, not
    # ten); loads stay within a run of each other
    assert sorted(len(tasks) for tasks in on.values()) == [4, 6]


def test_while_the_scheduler_is_behind_each_worker_is_sent_a_full_run():
    core = core_with(workers(10))
    effects = core.handle(Burst([FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(10)]))], more=True), 1.0)
    assert [len(tasks) for tasks in assigned(effects).values()] == [10]
    # busy for a second after: a lone message is served the same way; then one task per idle worker again
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(10, 15)])), 1.5))
    assert [len(tasks) for tasks in on.values()] == [5]
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(15, 18)])), 3.0))
    assert [len(tasks) for tasks in on.values()] == [1, 1, 1]


def test_balancing_asks_only_the_workers_above_the_mean():
    a, b, c = workers(3)
    core = core_with([a, b])
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(12)])), 1.0))  # six each
    core.handle(FromPeer(b, m.TaskResultBatch([success(t) for t in on[b][:3]])), 1.5)  # b holds three now
    core.handle(FromPeer(c, m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", m.WorkerInfo(1, 100))), 1.5)
    # nine tasks over three workers, c idle: a holds three more than the mean, b none
    requests = sent(core.handle(Tick(), 2.0), m.BalanceRequest)
    assert [(e.to, e.message.count) for e in requests] == [(a, 3)]


def test_a_worker_that_joins_workers_of_equal_load_is_given_its_share():
    ids = workers(6)
    core = core_with(ids[:5])
    on = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(20)])), 1.0))  # four each
    core.handle(FromPeer(ids[5], m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, 1, "host", m.WorkerInfo(1, 100))), 1.5)
    # twenty tasks over six workers: a mean of three, so three workers give one each (none goes below three)
    requests = sent(core.handle(Tick(), 2.0), m.BalanceRequest)
    assert sorted(e.message.count for e in requests) == [1, 1, 1]
    for request in requests:  # each gives back its last task, which goes to the newcomer
        effects = core.handle(FromPeer(request.to, m.BalanceResponse([on[request.to][-1].task_id])), 2.5)
        assert list(assigned(effects)) == [ids[5]]


def test_a_heartbeat_is_checked_against_the_tasks_sent_up_to_its_last_batch():
    (worker,) = workers(1)
    core = core_with([worker])
    first = assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0))[worker]
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(3)])), 1.0)  # batch 2, on its way when the worker beats

    def beat(held: List[m.Task]) -> m.WorkerHeartbeatEcho:
        digest = 0
        for t in held:
            digest ^= task_term(t.task_id)
        heartbeat = m.WorkerHeartbeat(last_batch=1, held_tasks=len(held), held_digest=folded(digest))
        (echo,) = sent(core.handle(FromPeer(worker, heartbeat), 2.0), m.WorkerHeartbeatEcho)
        return echo.message

    assert not beat(first).send_task_ids  # batch 2 does not count yet
    assert beat(first[:1]).send_task_ids  # one missing: the scheduler asks for the IDs
    swapped = [first[0], task(9)]
    assert beat(swapped).send_task_ids  # as many, but not the same: the digest differs


def test_peers_silent_for_longer_than_their_timeout_are_forgotten_and_only_they():
    ids = workers(3)
    core = core_with(ids, worker_timeout_seconds=10.0, client_timeout_seconds=10.0)
    for t in (5.0, 9.0):
        core.handle(FromPeer(ids[1], m.WorkerHeartbeat()), t)
        core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), t)
    core.handle(Tick(), 10.5)
    assert sorted(core.worker_ids) == [ids[1]] and core.client_ids == [CLIENT]
    core.handle(Tick(), 18.5)  # silent for 9.5 s: not yet
    assert core.worker_ids == [ids[1]] and core.client_ids == [CLIENT]
    core.handle(Tick(), 19.5)
    assert core.worker_ids == [] and core.client_ids == []
