"""A worker manager's decisions, without I/O: `ManagerCore.handle(event, now) -> effects`.

The scheduler decides, the manager acts. The manager says Hello as a worker manager, then every heartbeat
interval what it can start (workers per group, its minimum and maximum of groups, its workers' capabilities)
and the groups it has. The scheduler answers each heartbeat with a `WorkerManagerCommand`: how many groups it
should have starting or running (``desiredGroups``: the ones the scheduler drains count, the ones it names to
stop do not) and which groups to stop now (``stopGroups``: drained, none of their workers holds a task). The
manager stops exactly the groups named, then starts groups while it has fewer than desired (at most its
maximum in all, retiring and stopping ones included), and never stops a group on a count alone: so a group
stops only once drained.

A group that runs for `ManagerSettings.retire_after_seconds` (a Slurm job near its time limit) is reported
``retiring``: the scheduler drains it and names it to stop, and meanwhile asks for a group in its place if
the work needs one. A group that is not running `start_timeout_seconds` after its start (a job Slurm never
starts) is stopped; a group that ends on its own (a job Slurm killed, a process that died) is logged and
forgotten (the scheduler queues its workers' tasks again). After a start that failed or a group that ended
on its own, no group starts for a delay that doubles up to `MAX_RETRY_SECONDS` while failures go on.

Leaving (a stop signal): every group is reported retiring, so the scheduler drains them; each is stopped
when named, or all of them after `leave_timeout_seconds`; once none is left the manager says
DisconnectRequest and exits. A second signal stops them at once. A lost scheduler (its connection closed,
its silence, a Refusal after its HelloAck) stops every group at once: exit 1. A refused Hello, or an address
that is not a scheduler: exit 78.

Its conversation with the scheduler is `manager_session.SESSION`; a group's life is `GROUP_LIFECYCLE`.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

from scaler.protocol import connection_events
from scaler.protocol import messages as m
from scaler.protocol.connection_events import closed_in_handshake, role_name
from scaler.protocol.ids import show, show_group
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.version import PROTOCOL_VERSION, show_version
from scaler.worker_manager.manager_events import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REFUSED,
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
from scaler.worker_manager.manager_session import (
    CONNECTED,
    LEAVING,
    SESSION,
    SessionAction,
    SessionEvent,
    SessionState,
)

logger = logging.getLogger(__name__)

MAX_RETRY_SECONDS = 30.0
STABLE_SECONDS = 10.0  # a group that ran this long ends the back-off
STOP_AGAIN_SECONDS = 10.0  # a group still stopping is asked to stop again this often
TICK_SECONDS = 0.5  # its deadlines (silence, heartbeats, start timeouts, retiring, leaving) are looked at this often


@dataclass(frozen=True)
class ManagerSettings:
    scheduler_address: str
    kind: str  # what runs its groups: "native", "slurm"
    workers_per_group: int
    max_groups: int
    min_groups: int = 0
    capabilities: List[m.Capability] = field(default_factory=list)
    heartbeat_interval_seconds: float = 1.0
    timeout_seconds: float = 60.0  # no HelloAck, or the scheduler silent, this long: leave
    retire_after_seconds: float = 0.0  # a group running this long asks to be drained (0: never)
    start_timeout_seconds: float = 0.0  # a group not running this long after its start is stopped (0: never)
    leave_timeout_seconds: float = 30.0  # leaving: groups are stopped, drained or not, after this long


class GroupState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    RETIRING = "retiring"  # asks the scheduler to drain it
    STOPPING = "stopping"
    GONE = "gone"


class GroupEvent(enum.Enum):
    RUNS = "runs"  # the backend says it runs
    START_FAILED = "start_failed"
    LATE = "late"  # not running after the start timeout
    RETIRE = "retire"  # it ran its time, or the manager leaves
    STOP = "stop"  # named by the scheduler, or the manager must stop now
    ENDED = "ended"  # the backend says it ended


class GroupAction(enum.Enum):
    STOP = "stop"  # ask the backend to stop it
    NOTE_RUNNING = "note_running"
    BACK_OFF = "back_off"  # no new group for a while
    TELL_ENDED = "tell_ended"  # it ended on its own: say so
    TELL_STOPPED = "tell_stopped"
    FORGET = "forget"


_S, _E, _A = GroupState, GroupEvent, GroupAction
_GONE = Transition(_S.GONE, (_A.FORGET,))
_ENDED_ON_ITS_OWN = Transition(_S.GONE, (_A.TELL_ENDED, _A.BACK_OFF, _A.FORGET))
GROUP_LIFECYCLE: Lifecycle[GroupState, GroupEvent] = Lifecycle(
    "worker group",
    states=GroupState,
    terminal={_S.GONE},
    table={
        (_S.STARTING, _E.RUNS): Transition(_S.RUNNING, (_A.NOTE_RUNNING,)),
        (_S.STARTING, _E.START_FAILED): Transition(_S.GONE, (_A.BACK_OFF, _A.FORGET)),
        (_S.STARTING, _E.LATE): Transition(_S.STOPPING, (_A.STOP, _A.BACK_OFF)),
        (_S.STARTING, _E.RETIRE): Transition(_S.STOPPING, (_A.STOP,)),  # not running yet: nothing to drain
        (_S.STARTING, _E.STOP): Transition(_S.STOPPING, (_A.STOP,)),
        (_S.STARTING, _E.ENDED): _ENDED_ON_ITS_OWN,
        (_S.RUNNING, _E.RUNS): Transition(_S.RUNNING),
        (_S.RUNNING, _E.RETIRE): Transition(_S.RETIRING),
        (_S.RUNNING, _E.STOP): Transition(_S.STOPPING, (_A.STOP,)),
        (_S.RUNNING, _E.ENDED): _ENDED_ON_ITS_OWN,
        (_S.RETIRING, _E.RUNS): Transition(_S.RETIRING),
        (_S.RETIRING, _E.RETIRE): Transition(_S.RETIRING),
        (_S.RETIRING, _E.STOP): Transition(_S.STOPPING, (_A.STOP,)),
        (_S.RETIRING, _E.ENDED): _ENDED_ON_ITS_OWN,
        (_S.STOPPING, _E.RUNS): Transition(_S.STOPPING),
        (_S.STOPPING, _E.START_FAILED): _GONE,
        (_S.STOPPING, _E.LATE): Transition(_S.STOPPING),
        (_S.STOPPING, _E.RETIRE): Transition(_S.STOPPING),
        (_S.STOPPING, _E.STOP): Transition(_S.STOPPING),
        (_S.STOPPING, _E.ENDED): Transition(_S.GONE, (_A.TELL_STOPPED, _A.FORGET)),
    },
    always_possible=(_E.RETIRE, _E.STOP, _E.ENDED),
    show=show_group,
)

_CONNECTION_EVENTS = {
    connection_events.UP: SessionEvent.CONNECTION_UP,
    connection_events.DOWN: SessionEvent.CONNECTION_DOWN,
    connection_events.REFUSED: SessionEvent.CLOSED_IN_HANDSHAKE,
}
_REPORTED = {
    _S.STARTING: m.WorkerGroupState.STARTING,
    _S.RUNNING: m.WorkerGroupState.RUNNING,
    _S.RETIRING: m.WorkerGroupState.RETIRING,
    _S.STOPPING: m.WorkerGroupState.STOPPING,
}


class _Group:
    __slots__ = ("group_id", "state", "created", "running_since", "detail", "story", "reason", "stop_sent")

    def __init__(self, group_id: bytes, now: float) -> None:
        self.group_id = group_id
        self.state = GroupState.STARTING
        self.created = now
        self.running_since = math.inf
        self.detail = "starting"
        self.story = 0  # its last events (`Lifecycle.advance`)
        self.reason = ""  # why it ended, for TELL_ENDED
        self.stop_sent = math.inf  # when it was last asked to stop


class ManagerCore:
    def __init__(self, settings: ManagerSettings, manager_id: bytes, pid: int, hostname: str) -> None:
        self.settings = settings
        self.manager_id = manager_id
        self._name = f"Worker manager {show(manager_id)}"
        self._hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER_MANAGER, pid, hostname)
        self._groups: Dict[bytes, _Group] = {}
        self._serial = itertools.count(1)
        self.state = SessionState.CONNECTING  # the conversation with the scheduler (manager_session.SESSION)
        self.story = 0
        self._hello_deadline = math.inf
        self._last_heard = 0.0
        self._next_heartbeat = math.inf
        self._desired = 0
        self._retry_at = 0.0
        self._retry_delay = 0.0
        self._leave_deadline = math.inf  # leaving: when every group is stopped, drained or not
        self._now = 0.0
        self._next_tick = math.inf  # the Tick it asks for (`next_wakeup`)
        self._out: List[Any] = []
        self._handlers: Dict[type, Callable[[Any], None]] = {
            Begin: self._on_begin,
            FromScheduler: self._on_scheduler_message,
            ConnectionChanged: self._on_connection,
            HandshakeFailed: self._on_handshake_failed,
            Tick: self._on_tick,
            GroupStarted: self._on_group_started,
            GroupStartFailed: self._on_group_start_failed,
            GroupRunning: self._on_group_running,
            GroupEnded: self._on_group_ended,
            StopRequested: self._on_stop_requested,
        }
        carry_out: Dict[GroupAction, Callable[[_Group], None]] = {
            _A.STOP: self._stop,
            _A.NOTE_RUNNING: self._note_running,
            _A.BACK_OFF: self._back_off,
            _A.TELL_ENDED: self._tell_ended,
            _A.TELL_STOPPED: self._tell_stopped,
            _A.FORGET: self._forget,
        }
        self._plans = GROUP_LIFECYCLE.plans(carry_out.__getitem__)
        A = SessionAction
        session_actions: Dict[SessionAction, Callable[[Any], None]] = {
            A.JOIN: self._join,
            A.HELLO_AGAIN: self._hello_again,
            A.OBEY: self._obey,
            A.DROP_COMMAND: self._drop_command,
            A.DRAIN_ALL: self._drain_all,
            A.STOP_ALL: self._stop_all,
            A.STOP_LATE: self._stop_late,
            A.SAY_GOODBYE: self._say_goodbye,
            A.END_OK: self._end_ok,
            A.END_NOT_A_SCHEDULER: self._end_not_a_scheduler,
            A.END_REFUSED: self._end_refused,
            A.END_KEYS_REFUSED: self._end_keys_refused,
            A.END_CLOSED_IN_HANDSHAKE: self._end_closed_in_handshake,
            A.END_UNANSWERED: self._end_unanswered,
            A.LOSE: self._lose,
        }
        self._session_plans = SESSION.plans(session_actions.__getitem__)

    def handle(self, event: Any, now: float) -> List[Any]:
        self._now = now
        out: List[Any] = []
        self._out = out
        if self.state is not SessionState.ENDED:
            self._handlers[type(event)](event)
            if self.state in LEAVING and not self._groups:
                self._session(SessionEvent.EMPTIED)
        return out

    @property
    def next_wakeup(self) -> float:
        """When the core next wants a `Tick` (monotonic seconds, as ``now``): every `TICK_SECONDS` from `Begin`."""
        return self._next_tick

    @property
    def group_states(self) -> Dict[bytes, GroupState]:
        return {group_id: group.state for group_id, group in self._groups.items()}

    # ----------------------------------------------------------------- the scheduler

    def _on_begin(self, event: Begin) -> None:
        self._next_tick = self._now + TICK_SECONDS
        self._hello_deadline = self._now + self.settings.timeout_seconds
        self._out.append(Send(self._hello))

    def _on_scheduler_message(self, event: FromScheduler) -> None:
        message = event.message
        self._last_heard = self._now
        kind = type(message)
        if kind is m.HelloAck:
            scheduler = message.role == m.PeerRole.SCHEDULER
            self._session(SessionEvent.HELLO_ACK if scheduler else SessionEvent.NOT_A_SCHEDULER, message)
        elif kind is m.Refusal:
            self._session(SessionEvent.REFUSED, message)
        elif kind is m.WorkerManagerCommand:
            self._session(SessionEvent.COMMAND, message)
        elif kind is not m.DisconnectResponse:
            logger.warning(f"{self._name}: dropped {kind.__name__} from the scheduler")

    def _session(self, event: SessionEvent, detail: Any = None) -> None:
        SESSION.advance(self._session_plans, self, event, self.manager_id, (detail,))

    # ----------------------------------------------------------------- the session's actions (SESSION)

    def _join(self, ack: m.HelloAck) -> None:
        self._hello_deadline = math.inf
        address = self.settings.scheduler_address
        logger.info(f"{self._name}: connected to scheduler {address} (protocol {show_version(ack.version)})")
        self._heartbeat()

    def _hello_again(self, detail: Any) -> None:
        self._out.append(Send(self._hello))

    def _drop_command(self, command: m.WorkerManagerCommand) -> None:
        logger.warning(f"{self._name}: dropped WorkerManagerCommand from the scheduler")

    def _end_not_a_scheduler(self, ack: m.HelloAck) -> None:
        self._end(EXIT_REFUSED, f"{self.settings.scheduler_address} is {role_name(ack.role)}, not a scheduler")

    def _end_refused(self, refusal: m.Refusal) -> None:
        version = show_version(refusal.version)
        self._end(EXIT_REFUSED, f"refused by the scheduler (protocol {version}): {refusal.reason}")

    def _end_keys_refused(self, failed: HandshakeFailed) -> None:
        self._end(EXIT_REFUSED, failed.reason)

    def _end_closed_in_handshake(self, detail: Any) -> None:
        self._end(EXIT_REFUSED, closed_in_handshake(self.settings.scheduler_address, "a scheduler"))

    def _end_unanswered(self, detail: Any) -> None:
        settings = self.settings
        self._end(EXIT_FAILURE, f"no answer from the scheduler at {settings.scheduler_address} within "
                                f"{settings.timeout_seconds:g}s")  # fmt: skip

    def _lose(self, detail: Any) -> None:
        """The scheduler is lost (``detail``: a Refusal, or why): every group stopped at once, exit 1."""
        if isinstance(detail, m.Refusal):
            detail = f"the scheduler no longer knows this manager: {detail.reason}"
        self._stop_all()
        self._end(EXIT_FAILURE, detail)

    def _say_goodbye(self, detail: Any) -> None:
        self._out.append(Send(m.DisconnectRequest("worker manager leaving")))

    def _end_ok(self, detail: Any) -> None:
        self._end(EXIT_OK, "every group stopped")

    def _obey(self, command: m.WorkerManagerCommand) -> None:
        for group_id in command.stop_groups:
            group = self._groups.get(group_id)
            if group is not None:
                self._step(group, _E.STOP)
        self._desired = command.desired_groups
        self._start_groups()

    def _start_groups(self) -> None:
        """Start groups while fewer are starting or running than desired, within the maximum in all."""
        if self.state is not SessionState.READY or self._now < self._retry_at:
            return
        settings = self.settings
        counted = sum(g.state in (_S.STARTING, _S.RUNNING) for g in self._groups.values())
        wanted = min(self._desired, settings.max_groups) - counted
        for _ in range(min(wanted, settings.max_groups - len(self._groups))):
            group_id = self.manager_id + b"/%d" % next(self._serial)
            self._groups[group_id] = _Group(group_id, self._now)
            workers = settings.workers_per_group
            logger.info(f"{self._name}: starting group {show_group(group_id)} of {workers} worker(s)")
            self._out.append(StartGroup(group_id, settings.workers_per_group))

    def _heartbeat(self) -> None:
        settings = self.settings
        per_group = settings.workers_per_group
        groups = [
            m.WorkerGroup(g.group_id, _REPORTED[g.state], per_group, g.detail) for g in self._groups.values()
        ]
        running = sum(g.state in (_S.RUNNING, _S.RETIRING) for g in self._groups.values())
        self._out.append(Send(m.WorkerManagerHeartbeat(
            settings.max_groups * per_group, running * per_group, per_group, settings.min_groups,
            settings.max_groups, list(settings.capabilities), groups, settings.kind,
        )))  # fmt: skip
        self._next_heartbeat = self._now + settings.heartbeat_interval_seconds

    def _on_connection(self, event: ConnectionChanged) -> None:
        why = f"lost the connection to scheduler {self.settings.scheduler_address}"
        self._session(_CONNECTION_EVENTS[event.change], why)

    def _on_handshake_failed(self, event: HandshakeFailed) -> None:
        self._session(SessionEvent.KEYS_REFUSED, event)

    # ----------------------------------------------------------------- time

    def _on_tick(self, event: Tick) -> None:
        now, settings = self._now, self.settings
        self._next_tick = now + TICK_SECONDS
        if now >= self._hello_deadline:
            self._session(SessionEvent.UNANSWERED)
            return
        if self.state in CONNECTED and now - self._last_heard > settings.timeout_seconds:
            why = f"the scheduler at {settings.scheduler_address} was silent for {settings.timeout_seconds:g}s"
            self._session(SessionEvent.SILENT, why)
            return
        for group in list(self._groups.values()):
            if group.state is _S.STARTING and 0 < settings.start_timeout_seconds <= now - group.created:
                group.reason = f"not running {settings.start_timeout_seconds:g}s after its start"
                logger.warning(f"{self._name}: group {show_group(group.group_id)} {group.reason}: stopping it")
                self._step(group, _E.LATE)
            elif group.state is _S.RUNNING and 0 < settings.retire_after_seconds <= now - group.running_since:
                logger.info(f"{self._name}: group {show_group(group.group_id)} ran its time: it retires")
                self._step(group, _E.RETIRE)
            if group.state is _S.RUNNING and now - group.running_since >= STABLE_SECONDS:
                self._retry_delay = 0.0
            if group.state is _S.STOPPING and now - group.stop_sent >= STOP_AGAIN_SECONDS:
                self._stop(group)  # the backend could not stop it, or its end has not been seen
        if self.state in LEAVING and now >= self._leave_deadline:
            self._leave_deadline = math.inf
            self._session(SessionEvent.LEAVE_EXPIRED)
        self._start_groups()
        if self.state in CONNECTED and now >= self._next_heartbeat:
            self._heartbeat()

    # ----------------------------------------------------------------- groups

    def _on_group_started(self, event: GroupStarted) -> None:
        group = self._groups.get(event.group_id)
        if group is not None:
            group.detail = event.detail
            logger.info(f"{self._name}: group {show_group(group.group_id)}: {event.detail}")

    def _on_group_start_failed(self, event: GroupStartFailed) -> None:
        self._step_id(event.group_id, _E.START_FAILED, event.reason)

    def _on_group_running(self, event: GroupRunning) -> None:
        self._step_id(event.group_id, _E.RUNS)

    def _on_group_ended(self, event: GroupEnded) -> None:
        self._step_id(event.group_id, _E.ENDED, event.reason)

    def _step_id(self, group_id: bytes, event: GroupEvent, reason: str = "") -> None:
        group = self._groups.get(group_id)
        if group is None:
            return  # forgotten already (a late word of the backend)
        if reason:
            group.reason = reason
            if event is _E.START_FAILED:
                logger.error(f"{self._name}: group {show_group(group_id)} could not start: {reason}")
        self._step(group, event)

    def _step(self, group: _Group, event: GroupEvent) -> None:
        GROUP_LIFECYCLE.advance(self._plans, group, event, group.group_id, (group,))

    def _tell_ended(self, group: _Group) -> None:
        logger.warning(f"{self._name}: group {show_group(group.group_id)} ended: {group.reason}")

    def _tell_stopped(self, group: _Group) -> None:
        logger.info(f"{self._name}: group {show_group(group.group_id)} stopped")

    def _forget(self, group: _Group) -> None:
        del self._groups[group.group_id]

    def _stop(self, group: _Group) -> None:
        group.stop_sent = self._now
        self._out.append(StopGroup(group.group_id))

    def _note_running(self, group: _Group) -> None:
        group.running_since = self._now

    def _back_off(self, group: _Group) -> None:
        self._retry_delay = min(MAX_RETRY_SECONDS, max(1.0, self._retry_delay * 2))
        self._retry_at = self._now + self._retry_delay
        logger.warning(f"{self._name}: no new group for {self._retry_delay:g}s")

    def _stop_all(self, detail: Any = None) -> None:
        for group in list(self._groups.values()):
            self._step(group, _E.STOP)

    def _stop_late(self, detail: Any) -> None:
        logger.warning(f"{self._name}: groups not drained in time: stopping them now")
        self._stop_all()

    # ----------------------------------------------------------------- leaving

    def _on_stop_requested(self, event: StopRequested) -> None:
        if self.state is SessionState.READY:
            logger.info(f"{self._name}: {event.reason}: draining every group before it stops")
        else:
            logger.info(f"{self._name}: {event.reason}: stopping every group now")
        self._session(SessionEvent.STOP)

    def _drain_all(self, detail: Any) -> None:
        self._leave_deadline = self._now + self.settings.leave_timeout_seconds
        for group in list(self._groups.values()):
            self._step(group, _E.RETIRE)
        self._heartbeat()

    def _end(self, code: int, why: str) -> None:
        (logger.info if code == EXIT_OK else logger.error)(f"{self._name}: {why}")
        self._out.append(Exit(code, why))
