"""A worker manager's core, driven directly: what it tells the scheduler, which groups it starts and stops."""

from __future__ import annotations

from typing import Any, List

from scaler.protocol import connection_events
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker_manager.manager_core import GroupState, ManagerCore, ManagerSettings
from scaler.worker_manager.manager_events import (
    Begin,
    ConnectionChanged,
    Exit,
    FromScheduler,
    GroupEnded,
    GroupRunning,
    GroupStarted,
    GroupStartFailed,
    HandshakeFailed,
    Send,
    StartGroup,
    StopGroup,
    StopRequested,
    Tick,
)
from scaler.worker_manager.manager_session import SessionState

MANAGER = b"M|host|1|aa"
ACK = m.HelloAck(PROTOCOL_VERSION, "", 1.0, 60.0, m.PeerRole.SCHEDULER)


def settings(**changes: Any) -> ManagerSettings:
    values = dict(scheduler_address="tcp://127.0.0.1:2345", kind="native", workers_per_group=2, max_groups=3,
                  capabilities=[m.Capability("gpu", 1)], timeout_seconds=1000.0)  # fmt: skip
    values.update(changes)
    return ManagerSettings(**values)


def of(effects: List[Any], kind: type) -> List[Any]:
    return [effect for effect in effects if type(effect) is kind]


def sent(effects: List[Any], kind: type) -> List[Any]:
    return [effect.message for effect in of(effects, Send) if type(effect.message) is kind]


def connected(**changes: Any) -> ManagerCore:
    core = ManagerCore(settings(**changes), MANAGER, 1, "host")
    (hello,) = sent(core.handle(Begin(), 0.0), m.Hello)
    assert hello.role == m.PeerRole.WORKER_MANAGER and hello.version == PROTOCOL_VERSION
    (beat,) = sent(core.handle(FromScheduler(ACK), 0.1), m.WorkerManagerHeartbeat)
    limits = core.settings.max_groups
    assert (beat.workers_per_group, beat.min_groups, beat.max_groups, beat.max_workers) == (2, 0, limits, 2 * limits)
    assert beat.capabilities == [m.Capability("gpu", 1)] and beat.groups == [] and beat.kind == "native"
    return core


def command(core: ManagerCore, now: float, desired: int, stop=()) -> List[Any]:
    return core.handle(FromScheduler(m.WorkerManagerCommand(desired_groups=desired, stop_groups=list(stop))), now)


def test_it_starts_groups_up_to_the_desired_count_within_its_maximum_and_reports_them():
    core = connected()
    starts = of(command(core, 1.0, 2), StartGroup)
    assert [s.workers for s in starts] == [2, 2] and starts[0].group_id == MANAGER + b"/1"
    assert of(command(core, 1.1, 2), StartGroup) == []  # declarative: it has them
    core.handle(GroupStarted(MANAGER + b"/1", "pid 42"), 1.2)
    core.handle(GroupRunning(MANAGER + b"/1"), 1.3)
    assert len(of(command(core, 1.4, 10), StartGroup)) == 1  # 3 at most
    (beat,) = sent(core.handle(Tick(), 2.0), m.WorkerManagerHeartbeat)
    assert [(g.state, g.detail) for g in beat.groups][:2] == [
        (m.WorkerGroupState.RUNNING, "pid 42"),
        (m.WorkerGroupState.STARTING, "starting"),
    ]
    assert beat.running_workers == 2


def test_it_stops_only_the_groups_the_scheduler_names_and_forgets_them_once_ended():
    core = connected()
    command(core, 1.0, 2)
    assert of(command(core, 1.5, 0), StopGroup) == []  # fewer desired: it waits to be told which
    (stop,) = of(command(core, 2.0, 1, stop=[MANAGER + b"/2"]), StopGroup)
    assert stop.group_id == MANAGER + b"/2"
    assert core.group_states[MANAGER + b"/2"] is GroupState.STOPPING
    core.handle(GroupEnded(MANAGER + b"/2", "exited with code 0"), 2.5)
    assert list(core.group_states) == [MANAGER + b"/1"]


def test_a_group_that_ran_its_time_retires_and_is_replaced_within_the_maximum_in_all():
    core = connected(retire_after_seconds=5.0, max_groups=2)
    command(core, 1.0, 2)
    for n in (1, 2):
        core.handle(GroupRunning(MANAGER + b"/%d" % n), 1.0)
    (beat,) = sent(core.handle(Tick(), 6.5), m.WorkerManagerHeartbeat)
    assert [g.state for g in beat.groups] == [m.WorkerGroupState.RETIRING] * 2
    assert of(command(core, 6.6, 2), StartGroup) == []  # two retiring ones take the room of two
    of(command(core, 7.0, 2, stop=[MANAGER + b"/1"]), StopGroup)
    core.handle(GroupEnded(MANAGER + b"/1", "stopped"), 7.1)
    assert [s.group_id for s in of(command(core, 7.2, 2), StartGroup)] == [MANAGER + b"/3"]


def test_failures_to_start_back_off_with_a_doubling_delay_and_a_group_never_started_is_stopped():
    core = connected(start_timeout_seconds=30.0)
    (start,) = of(command(core, 1.0, 1), StartGroup)
    core.handle(GroupStartFailed(start.group_id, "sbatch failed (exit 1): invalid partition"), 1.1)
    assert core.group_states == {}
    assert of(command(core, 1.5, 1), StartGroup) == []  # 1 s of delay
    (start,) = of(core.handle(Tick(), 2.2), StartGroup)
    core.handle(GroupStartFailed(start.group_id, "again"), 2.3)
    assert of(core.handle(Tick(), 3.5), StartGroup) == []  # 2 s now
    (start,) = of(core.handle(Tick(), 4.4), StartGroup)
    (stop,) = of(core.handle(Tick(), 34.5), StopGroup)  # pending 30 s: given up
    assert stop.group_id == start.group_id and core.group_states[start.group_id] is GroupState.STOPPING
    core.handle(GroupEnded(start.group_id, "slurm job 7 cancelled"), 35.0)
    assert of(core.handle(Tick(), 36.0), StartGroup) == []  # 4 s now
    assert len(of(core.handle(Tick(), 39.0), StartGroup)) == 1


def test_a_group_that_ends_on_its_own_is_forgotten_and_replaced_after_a_delay():
    core = connected()
    (start,) = of(command(core, 1.0, 1), StartGroup)
    core.handle(GroupRunning(start.group_id), 1.5)
    core.handle(GroupEnded(start.group_id, "slurm job 9 node_fail"), 20.0)
    assert core.group_states == {}
    assert of(command(core, 20.5, 1), StartGroup) == []
    assert len(of(core.handle(Tick(), 21.1), StartGroup)) == 1


def test_refusals_wrong_peers_silence_and_a_lost_connection_end_it_with_a_clear_exit():
    core = ManagerCore(settings(), MANAGER, 1, "host")
    core.handle(Begin(), 0.0)
    (exit,) = of(core.handle(FromScheduler(m.Refusal(PROTOCOL_VERSION, "role WORKER_MANAGER cannot connect here")),
                             0.1), Exit)  # fmt: skip
    assert exit.code == 78 and "cannot connect here" in exit.reason
    core = ManagerCore(settings(), MANAGER, 1, "host")
    core.handle(Begin(), 0.0)
    storage = m.HelloAck(PROTOCOL_VERSION, "", 0.0, 0.0, m.PeerRole.OBJECT_STORAGE)
    (exit,) = of(core.handle(FromScheduler(storage), 0.1), Exit)
    assert exit.code == 78 and "is an object storage server, not a scheduler" in exit.reason
    core = ManagerCore(settings(timeout_seconds=10.0), MANAGER, 1, "host")
    core.handle(Begin(), 0.0)
    assert of(core.handle(Tick(), 9.9), Exit) == []
    (exit,) = of(core.handle(Tick(), 10.0), Exit)
    assert exit.code == 1 and "no answer from the scheduler at tcp://127.0.0.1:2345 within 10s" in exit.reason
    core = connected()
    command(core, 1.0, 2)
    effects = core.handle(ConnectionChanged(False, connection_events.DOWN), 2.0)
    assert len(of(effects, StopGroup)) == 2 and of(effects, Exit)[0].code == 1
    core = connected(timeout_seconds=10.0)
    (exit,) = of(core.handle(Tick(), 10.5), Exit)
    assert exit.code == 1 and "silent for 10s" in exit.reason


def test_the_session_says_hello_again_once_a_connection_lost_before_the_hello_ack_is_back():
    core = ManagerCore(settings(), MANAGER, 1, "host")
    (hello,) = sent(core.handle(Begin(), 0.0), m.Hello)
    assert sent(core.handle(ConnectionChanged(False, connection_events.UP), 0.1), m.Hello) == []  # said already
    assert core.handle(ConnectionChanged(False, connection_events.DOWN), 0.2) == []  # not lost: not answered yet
    assert sent(core.handle(ConnectionChanged(False, connection_events.UP), 0.3), m.Hello) == [hello]
    assert core.state is SessionState.CONNECTING
    (exit,) = of(core.handle(HandshakeFailed("the scheduler refused this key", False), 0.4), Exit)
    assert exit.code == 78 and exit.reason == "the scheduler refused this key"


def test_a_stop_before_the_hello_ack_leaves_at_once_without_a_goodbye():
    core = ManagerCore(settings(), MANAGER, 1, "host")
    core.handle(Begin(), 0.0)
    effects = core.handle(StopRequested("received SIGTERM"), 0.1)
    assert [exit.code for exit in of(effects, Exit)] == [0] and sent(effects, m.DisconnectRequest) == []
    assert core.state is SessionState.ENDED


def test_on_a_stop_signal_every_group_drains_then_stops_and_it_leaves_saying_so():
    core = connected(leave_timeout_seconds=20.0)
    command(core, 1.0, 2)
    core.handle(GroupRunning(MANAGER + b"/1"), 1.1)
    effects = core.handle(StopRequested("received SIGTERM"), 2.0)
    assert [s.group_id for s in of(effects, StopGroup)] == [MANAGER + b"/2"]  # not running yet: nothing to drain
    (beat,) = sent(effects, m.WorkerManagerHeartbeat)
    assert [g.state for g in beat.groups] == [m.WorkerGroupState.RETIRING, m.WorkerGroupState.STOPPING]
    assert of(command(core, 2.5, 2), StartGroup) == []  # leaving: nothing new
    core.handle(GroupEnded(MANAGER + b"/2", "stopped"), 3.0)
    of(command(core, 4.0, 1, stop=[MANAGER + b"/1"]), StopGroup)
    effects = core.handle(GroupEnded(MANAGER + b"/1", "stopped"), 5.0)
    assert sent(effects, m.DisconnectRequest) and of(effects, Exit)[0].code == 0


def test_groups_not_drained_in_time_are_stopped_and_a_second_signal_stops_them_at_once():
    core = connected(leave_timeout_seconds=20.0)
    command(core, 1.0, 2)
    for n in (1, 2):
        core.handle(GroupRunning(MANAGER + b"/%d" % n), 1.1)
    core.handle(StopRequested("received SIGTERM"), 2.0)
    assert of(core.handle(Tick(), 21.9), StopGroup) == []
    assert len(of(core.handle(Tick(), 22.0), StopGroup)) == 2
    core = connected()
    command(core, 1.0, 2)
    core.handle(GroupRunning(MANAGER + b"/1"), 1.1)
    core.handle(StopRequested("received SIGTERM"), 2.0)
    assert [s.group_id for s in of(core.handle(StopRequested("received SIGINT"), 2.5), StopGroup)] == [MANAGER + b"/1"]
