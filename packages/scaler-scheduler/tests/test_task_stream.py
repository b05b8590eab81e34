"""The task runs the scheduler gathers (protocol 1.8), driven through the core: workers record only while a monitor
subscribes or a client reports; snapshots carry each worker's runs once; a report gets the runs of its client's tasks
and of the tasks of the Clients made in them (which stand for it), and nothing of another client's."""

from __future__ import annotations

from typing import List, Optional

import pytest
from test_scheduler_core import (
    CLIENT,
    KEY_A,
    WORKER_A,
    WORKER_B,
    admitted,
    connect_client,
    core_with,
    delegating_core,
    hello,
    nested_hello,
    result,
    routed,
    sent,
    task,
)
from test_worker_managers import MANAGER, SCALING, manager_hello
from test_worker_managers import beat as manager_beat

from scaler.protocol import messages as m
from scaler.protocol.task_runs import Arrival
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    STORAGE,
    ConnectionClosed,
    FromPeer,
    FromStorage,
    MonitorSubscription,
    PeerConnection,
    Publish,
    Send,
    Start,
    Tick,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings

OTHER_CLIENT = b"C|host|9|bb"
NESTED_CLIENT = b"C|host|7|cc"  # a Client made inside a task


def runs(*numbers: int, failed: int = 0, ago: float = 0.5, queued: float = 0.0, client=CLIENT) -> m.TaskRuns:
    """What a worker's heartbeat says of these ended runs (each ran one second, ended ``ago`` seconds before)."""
    count = len(numbers)
    return m.TaskRuns(
        function_names=["module.square"],
        client_ids=[client],
        task_ids=[task(n).task_id for n in numbers],
        functions=[0] * count,
        clients=[0] * count,
        queued_seconds=[queued] * count,
        run_seconds=[1.0] * count,
        ended_seconds_ago=[ago] * count,
        failed_runs=[numbers.index(failed)] if failed else [],
        failed_statuses=[m.TaskStatus.FAILED] if failed else [],
        error_texts=["ValueError: bad"] if failed else [],
    )


def beat(core: SchedulerCore, now: float, ended: Optional[m.TaskRuns] = None) -> List:
    return core.handle(FromPeer(WORKER_A, m.WorkerHeartbeat(ended_runs=ended or m.TaskRuns())), now)


def snapshot(core: SchedulerCore, now: float) -> m.StateSnapshot:
    (publish,) = [e for e in core.handle(Tick(), now) if type(e) is Publish]
    return publish.snapshot


def echoes(effects, to: bytes, kind: type) -> List:
    return sent(effects, to=to, kind=kind)


def test_workers_record_only_while_a_monitor_subscribes_and_are_told_at_once():
    core = core_with()
    (echo,) = echoes(beat(core, 1.0), WORKER_A, m.WorkerHeartbeatEcho)
    assert not echo.record_tasks
    effects = core.handle(MonitorSubscription(1), 1.5)
    assert echoes(effects, WORKER_A, m.WorkerHeartbeatEcho) == [m.WorkerHeartbeatEcho(record_tasks=True)]
    assert echoes(effects, CLIENT, m.ClientHeartbeatEcho)[0].record_tasks  # clients say their work per function
    (echo,) = echoes(beat(core, 2.0), WORKER_A, m.WorkerHeartbeatEcho)
    assert echo.record_tasks
    effects = core.handle(MonitorSubscription(-1), 2.5)
    assert echoes(effects, WORKER_A, m.WorkerHeartbeatEcho) == [m.WorkerHeartbeatEcho(record_tasks=False)]


def test_a_snapshot_carries_each_ended_run_once_with_the_runs_going_on_as_of_the_snapshot():
    core = core_with()
    core.handle(MonitorSubscription(1), 0.0)
    beat(core, 10.0, runs(1, 2))
    current = m.TaskRuns(["module.slow"], [CLIENT], [], [task(3).task_id], [0], [0], [], [0.0], [4.0])
    core.handle(FromPeer(WORKER_A, m.WorkerHeartbeat(ended_runs=runs(4, ago=0.0), current_runs=current)), 10.25)
    (worker,) = snapshot(core, 11.0).workers
    ended = list(Arrival(worker.heartbeat.ended_runs, 100.0, WORKER_A).records())
    assert [r.task_id for r in ended] == [task(n).task_id.hex() for n in (1, 2, 4)]
    # placed from the snapshot: task 1 ended 0.5 s before the heartbeat of 10.0, the snapshot was made at 11.0
    assert ended[0].ended == pytest.approx(100.0 - 1.5) and ended[0].started == pytest.approx(100.0 - 2.5)
    assert ended[2].ended == pytest.approx(100.0 - 0.75)
    (going_on,) = Arrival(worker.heartbeat.current_runs, 100.0, WORKER_A, ended=False).records()
    assert going_on.started == pytest.approx(100.0 - 4.75) and going_on.state == "running"  # 4 s at 10.25
    (worker,) = snapshot(core, 12.0).workers
    assert worker.heartbeat.ended_runs.task_ids == []


def test_runs_that_do_not_add_up_are_dropped_with_a_warning(caplog):
    core = core_with()
    core.handle(MonitorSubscription(1), 0.0)
    broken = runs(1, 2)
    broken.functions = [0, 7]  # no function 7
    beat(core, 1.0, broken)
    (worker,) = snapshot(core, 2.0).workers
    assert worker.heartbeat.ended_runs.task_ids == []
    assert "dropped the task runs of worker" in caplog.text and "functions refers to entry 7 of 1" in caplog.text


def test_a_sent_task_says_how_long_it_waited_while_workers_record():
    core = core_with(capacity=1)
    core.handle(MonitorSubscription(1), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)
    effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id)])), 3.5)
    (batch,) = echoes(effects, WORKER_A, m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(2).task_id]
    assert batch.tasks[0].queued_seconds == pytest.approx(2.5)


def reporting(core: SchedulerCore, client: bytes, on: bool, now: float) -> m.ClientHeartbeatEcho:
    effects = core.handle(FromPeer(client, m.ClientHeartbeat(report_tasks=on)), now)
    return echoes(effects, client, m.ClientHeartbeatEcho)[-1]


def test_a_report_gets_the_runs_of_its_tasks_and_of_the_clients_made_in_them_and_no_one_elses():
    core = delegating_core()  # CLIENT's task 1 runs on WORKER_A
    connect_client(core, OTHER_CLIENT, 0.5)
    effects = core.handle(FromPeer(CLIENT, m.ClientHeartbeat(report_tasks=True)), 1.0)
    assert echoes(effects, WORKER_A, m.WorkerHeartbeatEcho) == [m.WorkerHeartbeatEcho(record_tasks=True)]
    admitted(core, core.handle(FromPeer(NESTED_CLIENT, nested_hello(task(1).task_id, KEY_A, NESTED_CLIENT)), 1.5))
    core.handle(FromPeer(NESTED_CLIENT, routed(task(3))), 1.5)  # submitted by task 1's code: it stands for CLIENT
    core.handle(FromPeer(OTHER_CLIENT, routed(task(2))), 1.5)
    for number in (3, 1, 2):
        core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(number).task_id)])), 2.0)
    beat(core, 2.5, runs(3, client=NESTED_CLIENT))
    beat(core, 2.6, runs(1))
    beat(core, 2.7, runs(2, client=OTHER_CLIENT))
    echo = reporting(core, CLIENT, True, 3.0)
    report = list(Arrival(echo.task_runs, 50.0).records())
    assert sorted(r.task_id for r in report) == sorted(task(n).task_id.hex() for n in (1, 3))
    assert {r.worker for r in report} == {"W|host|2|aa"} and {r.state for r in report} == {"success"}
    assert reporting(core, OTHER_CLIENT, False, 3.0).task_runs == m.TaskRuns()
    assert reporting(core, CLIENT, True, 3.5).task_runs.task_ids == []  # each run once


def test_the_runs_of_one_heartbeat_are_split_between_the_reports_they_belong_to():
    core = core_with()
    connect_client(core, OTHER_CLIENT)
    reporting(core, CLIENT, True, 1.0)
    reporting(core, OTHER_CLIENT, True, 1.0)
    mixed = runs(1, 2, 3, failed=3)
    mixed.client_ids, mixed.clients = [CLIENT, OTHER_CLIENT], [0, 1, 0]
    beat(core, 2.0, mixed)
    mine = list(Arrival(reporting(core, CLIENT, True, 3.0).task_runs, 50.0).records())
    theirs = list(Arrival(reporting(core, OTHER_CLIENT, True, 3.0).task_runs, 50.0).records())
    assert [(r.task_id[-2:], r.state) for r in mine] == [("01", "success"), ("03", "failed")]
    assert [r.task_id[-2:] for r in theirs] == ["02"] and theirs[0].client == "C|host|9|bb"


def test_a_report_that_ends_stops_the_recording():
    core = core_with()
    reporting(core, CLIENT, True, 1.0)
    effects = core.handle(FromPeer(CLIENT, m.ClientHeartbeat(report_tasks=False)), 2.0)
    assert echoes(effects, WORKER_A, m.WorkerHeartbeatEcho) == [m.WorkerHeartbeatEcho(record_tasks=False)]


def test_the_events_of_a_second_go_in_the_next_snapshot_only_while_a_monitor_subscribes():
    core = core_with(workers=())
    core.handle(FromPeer(WORKER_A, hello(m.PeerRole.WORKER)), 1.0)  # nobody watches: not noted
    core.handle(MonitorSubscription(1), 2.0)
    core.handle(FromPeer(b"W|host|5|ee", hello(m.PeerRole.WORKER)), 2.5)
    core.handle(FromPeer(WORKER_A, m.DisconnectRequest("stopping")), 2.75)
    events = snapshot(core, 3.0).events
    assert [(e.kind, e.subject) for e in events] == [("worker joined", b"W|host|5|ee"), ("worker left", WORKER_A)]
    assert [e.seconds_ago for e in events] == [0.5, 0.25]
    assert "stopping" in events[1].text
    assert snapshot(core, 4.0).events == []


def test_workers_that_die_or_time_out_refused_peers_and_scaling_commands_are_events():
    core = core_with(workers=(), scaling=SCALING, worker_timeout_seconds=10, client_timeout_seconds=1e9)
    core.handle(MonitorSubscription(1), 0.0)
    core.handle(FromPeer(MANAGER, manager_hello()), 0.0)
    core.handle(PeerConnection(WORKER_A, 21), 0.0)
    core.handle(FromPeer(WORKER_A, hello(m.PeerRole.WORKER)), 0.0)
    core.handle(FromPeer(WORKER_B, hello(m.PeerRole.WORKER)), 0.0)
    core.handle(FromPeer(MANAGER, manager_beat()), 0.5)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(1, 40)])), 1.0)  # work for more groups
    core.handle(ConnectionClosed(21), 2.0)
    core.handle(FromPeer(b"W|host|6|ff", hello(m.PeerRole.WORKER, major=PROTOCOL_VERSION.major + 1)), 3.0)
    core.handle(FromPeer(MANAGER, manager_beat()), 4.0)
    core.handle(FromPeer(MANAGER, manager_beat()), 11.0)
    kinds = {(e.kind, e.subject) for e in snapshot(core, 11.0).events}
    assert {("worker died", WORKER_A), ("refused", b"W|host|6|ff"), ("worker timed out", WORKER_B)} <= kinds
    assert ("scaling", MANAGER) in kinds


def test_a_task_a_worker_stopped_for_memory_is_an_event_told_once():
    core = core_with()
    core.handle(MonitorSubscription(1), 0.0)
    killed = [
        m.MemoryKill(task(1).task_id, "module.greedy", 412 << 20),
        m.MemoryKill(task(2).task_id, "module.greedy", 0, refused=True),
    ]
    heartbeat = m.WorkerHeartbeat(memory_limit_bytes=300 << 20, memory_kills=2, memory_killed=killed)
    core.handle(FromPeer(WORKER_A, heartbeat), 1.0)
    snapped = snapshot(core, 2.0)
    assert [(e.kind, e.subject) for e in snapped.events] == [("memory kill", WORKER_A)] * 2
    stopped = f"worker {WORKER_A.decode()} stopped task"
    assert [e.text for e in snapped.events] == [
        f"{stopped} {task(1).task_id.hex()} of module.greedy: memory 412.0 MiB over its limit of 300.0 MiB",
        f"{stopped} {task(2).task_id.hex()} of module.greedy: an allocation past its memory limit of 300.0 MiB was "
        "refused",
    ]
    (shown,) = snapped.workers
    assert (shown.heartbeat.memory_kills, shown.heartbeat.memory_killed) == (2, [])
    core.handle(FromPeer(WORKER_A, m.WorkerHeartbeat(memory_limit_bytes=300 << 20, memory_kills=2)), 2.5)
    assert snapshot(core, 3.0).events == []


def summaries(effects) -> List:
    return [e.message for e in effects if type(e) is Send and e.to == STORAGE and type(e.message) is m.ObjectRequest
            and e.message.kind == m.ObjectRequestKind.SUMMARY]  # fmt: skip


def test_while_a_monitor_subscribes_the_storage_server_is_asked_what_it_holds_for_the_next_snapshot():
    core = core_with()
    assert summaries(core.handle(Tick(), 1.0)) == []  # nobody watches
    core.handle(MonitorSubscription(1), 1.0)
    assert len(summaries(core.handle(Tick(), 2.0))) == 1
    summary = m.ObjectSummary([b"o1"], [CLIENT], [2000])
    core.handle(FromStorage(m.ObjectResponse(kind=m.ObjectRequestKind.SUMMARY, summary=summary)), 2.5)
    assert snapshot(core, 3.0).object_summary == summary


def test_a_storage_server_older_than_1_8_is_not_asked():
    core = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1"))
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(m.Version(1, 7))), 0.0)
    core.handle(MonitorSubscription(1), 1.0)
    assert summaries(core.handle(Tick(), 2.0)) == []
