"""What the client core says and hears for task streams and monitors (protocol 1.8), through `ClientCore.handle`:
a stream that opens or closes, or asks, sends a heartbeat at once and is answered by its echo, after the runs the
echo carries; while a monitor watches, the heartbeats count the tasks in flight per function."""

from __future__ import annotations

from core_driver import CLEAR, FUNCTION, REPLY, connected, outcomes, put_ack, run, storage_requests, submit

from scaler.client.client_events import FromScheduler as Scheduler
from scaler.client.client_events import Heartbeat, PutObject, Reply, ReportTasks, TaskRunsArrived
from scaler.protocol.messages import ClientHeartbeatEcho, Counter, ObjectRequestKind, TaskRuns

PUT_KIND = ObjectRequestKind.PUT


def heartbeats(effects):
    return [effect for effect in effects if isinstance(effect, Heartbeat)]


def test_a_stream_that_opens_is_told_to_the_scheduler_at_once_and_answered_by_the_echo():
    core = connected()
    effects = run(core, 0.25, ReportTasks(CLEAR, +1))
    assert heartbeats(effects) == [Heartbeat(0, True, [])]  # before the next heartbeat is due
    assert outcomes(effects) == {}
    runs = TaskRuns(task_ids=[b"t" * 16])
    effects = run(core, 0.5, Scheduler(ClientHeartbeatEcho(task_runs=runs)))
    assert effects.index(TaskRunsArrived(runs)) < effects.index(Reply(CLEAR, None))  # the runs first
    assert outcomes(effects) == {"clear": (REPLY, None)}
    assert heartbeats(run(core, 1.5))[0].report_tasks  # while it is open
    effects = run(core, 1.6, ReportTasks(CLEAR, -1))
    assert heartbeats(effects) == [Heartbeat(0, False, [])]


def test_an_echo_without_runs_hands_no_runs_on():
    core = connected()
    effects = run(core, 0.5, Scheduler(ClientHeartbeatEcho()))
    assert not [effect for effect in effects if isinstance(effect, TaskRunsArrived)]


def test_while_a_monitor_watches_the_heartbeats_count_the_tasks_in_flight_per_function():
    core = connected()
    ((request, _),) = storage_requests(run(core, 0.0, PutObject(0, FUNCTION, b"f", "module.square")), PUT_KIND)
    run(core, 0.0, put_ack(request), submit(1, 2, 3))
    assert heartbeats(run(core, 1.0))[0].functions == []  # nobody watches
    run(core, 1.1, Scheduler(ClientHeartbeatEcho(record_tasks=True)))
    (beat,) = heartbeats(run(core, 2.0))
    assert beat.functions == [Counter("module.square", 3)]
    run(core, 2.1, Scheduler(ClientHeartbeatEcho(record_tasks=False)))
    assert heartbeats(run(core, 3.0))[0].functions == []
