"""The worker managers the scheduler serves, their worker groups, and the scaling decisions it carries out.

The scheduler decides, managers act. A worker manager (role ``workerManager``) says in each heartbeat what it
can start (workers per group, its minimum and maximum of groups, its workers' capabilities) and the groups
it has; the workers it starts say their group in their Hello (`WorkerInfo.groupId`). Every tick and every
manager heartbeat, `WorkerManagers` hands `scaling_policy.ScalingPolicy` the waiting work and each manager's
active groups, and carries out its decisions: a group to retire is drained first (its workers get no new task
and give back those they have not started: `TaskRouting.drain`), and once none of its workers holds a task
the manager is told to stop it. So scaling down never loses a task, nor runs one twice. Each manager gets a
`WorkerManagerCommand` in answer to each heartbeat, and at once when its command changes: how many groups it
should have (`desiredGroups`: the groups it reports starting or running, those being drained included, those
it is told to stop not), and which to stop now (`stopGroups`). A manager may ask for one of its groups to be
drained by reporting it ``retiring`` (a time limit near).

The OpenGRIS webhook (`webhook_manager.py`) is one more manager behind the same decision: its heartbeat is
made here from what the scheduler started through it, and its commands become HTTP calls.

A group's life at the scheduler is `GROUP_LIFECYCLE`.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Set

from scaler.protocol import messages as m
from scaler.protocol.ids import show, show_group
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.security import OPEN, Credential
from scaler.scheduler.monitor_events import MonitorEvents
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Worker
from scaler.scheduler.scaling_policy import Decision, GroupLoad, ManagerLoad, ScalingPolicy, waiting_work
from scaler.scheduler.scheduler_events import Send
from scaler.scheduler.task_routing import TaskRouting
from scaler.scheduler.webhook_manager import WebhookAnswer, WebhookManager

logger = logging.getLogger(__name__)

_COUNTED = (m.WorkerGroupState.STARTING, m.WorkerGroupState.RUNNING)  # what a manager counts against desired
_STOPPING = m.WorkerGroupState.STOPPING


class GroupState(enum.Enum):
    ACTIVE = "active"  # takes tasks
    DRAINING = "draining"  # its workers take no new task and give back those they have not started
    DRAINED = "drained"  # none of its workers holds a task: its manager is told to stop it
    ORPHANED = "orphaned"  # its manager is gone: its workers take tasks until it idles (nobody else stops it)
    LEAVING = "leaving"  # its manager is gone and it drains: its workers are sent away once none holds a task
    GONE = "gone"  # its manager no longer lists it; or, its manager gone, its workers were sent away or left


class GroupEvent(enum.Enum):
    DRAIN = "drain"  # retired by the policy, reported retiring or stopping by its manager, idle while orphaned;
    # and again at each check of a group that drains
    EMPTIED = "emptied"  # a check found none of its workers holding a task
    WORKER_JOINED = "worker_joined"  # a worker of the group said Hello
    GONE = "gone"  # its manager's heartbeat no longer lists it
    MANAGER_GONE = "manager_gone"  # its manager left or timed out
    LEFT = "left"  # the last of its workers left, its manager gone


class GroupAction(enum.Enum):
    DRAIN_WORKERS = "drain_workers"  # no new task to its workers; they give back what they have not started
    TELL_STOP = "tell_stop"  # name it in its manager's stopGroups from now on
    SEND_AWAY = "send_away"  # its workers (who hold no task) are asked to leave, and forgotten
    FORGET = "forget"


_S, _E, _A = GroupState, GroupEvent, GroupAction
GROUP_LIFECYCLE: Lifecycle[GroupState, GroupEvent] = Lifecycle(
    "worker group",
    states=GroupState,
    terminal={_S.GONE},
    table={
        (_S.ACTIVE, _E.DRAIN): Transition(_S.DRAINING, (_A.DRAIN_WORKERS,)),
        (_S.ACTIVE, _E.WORKER_JOINED): Transition(_S.ACTIVE),
        (_S.ACTIVE, _E.GONE): Transition(_S.GONE, (_A.FORGET,)),
        (_S.ACTIVE, _E.MANAGER_GONE): Transition(_S.ORPHANED),
        (_S.DRAINING, _E.DRAIN): Transition(_S.DRAINING, (_A.DRAIN_WORKERS,)),  # tasks that a balance gave back
        (_S.DRAINING, _E.EMPTIED): Transition(_S.DRAINED, (_A.TELL_STOP,)),
        (_S.DRAINING, _E.WORKER_JOINED): Transition(_S.DRAINING, (_A.DRAIN_WORKERS,)),
        (_S.DRAINING, _E.GONE): Transition(_S.GONE, (_A.FORGET,)),
        (_S.DRAINING, _E.MANAGER_GONE): Transition(_S.LEAVING),
        (_S.DRAINED, _E.DRAIN): Transition(_S.DRAINED),
        (_S.DRAINED, _E.EMPTIED): Transition(_S.DRAINED),
        (_S.DRAINED, _E.WORKER_JOINED): Transition(_S.DRAINED, (_A.DRAIN_WORKERS,)),  # late: it stops anyway
        (_S.DRAINED, _E.GONE): Transition(_S.GONE, (_A.FORGET,)),
        (_S.DRAINED, _E.MANAGER_GONE): Transition(_S.LEAVING),
        (_S.ORPHANED, _E.DRAIN): Transition(_S.LEAVING, (_A.DRAIN_WORKERS,)),
        (_S.ORPHANED, _E.WORKER_JOINED): Transition(_S.ORPHANED),
        (_S.ORPHANED, _E.LEFT): Transition(_S.GONE, (_A.FORGET,)),
        (_S.LEAVING, _E.DRAIN): Transition(_S.LEAVING, (_A.DRAIN_WORKERS,)),
        (_S.LEAVING, _E.EMPTIED): Transition(_S.GONE, (_A.SEND_AWAY, _A.FORGET)),
        (_S.LEAVING, _E.WORKER_JOINED): Transition(_S.LEAVING, (_A.DRAIN_WORKERS,)),
        (_S.LEAVING, _E.LEFT): Transition(_S.GONE, (_A.FORGET,)),
    },
    always_possible=(_E.DRAIN, _E.WORKER_JOINED),
    show=show_group,
)
_ORPHANS = (_S.ORPHANED, _S.LEAVING)  # groups whose manager is gone


class ManagedGroup:
    __slots__ = ("group_id", "manager_id", "state", "reported", "workers_expected", "story")

    def __init__(self, group_id: bytes, manager_id: bytes, reported: m.WorkerGroup) -> None:
        self.group_id = group_id
        self.manager_id = manager_id
        self.state = GroupState.ACTIVE
        self.reported = reported.state  # the manager's word on it
        self.workers_expected = reported.workers
        self.story = 0  # its last events (`Lifecycle.advance`)


class Manager:
    __slots__ = ("manager_id", "credential", "last_seen", "heartbeat", "groups", "decision", "sent", "webhook")
    role = m.PeerRole.WORKER_MANAGER

    def __init__(self, manager_id: bytes, now: float, credential: Credential, webhook: Any = None) -> None:
        self.manager_id = manager_id
        self.credential = credential  # the key it said Hello with: its messages must come with that key
        self.last_seen = now
        self.heartbeat: Optional[m.WorkerManagerHeartbeat] = None  # None: it has not said what it can start
        self.groups: Dict[bytes, ManagedGroup] = {}
        self.decision = Decision(0, [])
        self.sent: Optional[m.WorkerManagerCommand] = None  # the last command it was sent
        self.webhook = webhook  # a webhook_manager.WebhookManager: commands become HTTP calls


class WorkerManagers:
    def __init__(
        self,
        workers: Dict[bytes, Worker],
        routing: TaskRouting,
        policy: ScalingPolicy,
        leave: Callable[[Worker, str, Outbox], None],
        webhook_url: str = "",
    ) -> None:
        self._workers = workers  # shared with the core
        self._leave = leave  # the core asks a worker that holds no task to leave, and forgets it
        self._routing = routing
        self._policy = policy
        self._managers: Dict[bytes, Manager] = {}  # in the order they connected: the first takes work first
        self._groups: Dict[bytes, ManagedGroup] = {}
        self._members: Dict[bytes, Set[bytes]] = {}  # group -> its connected workers (known to a manager or not)
        self._idle_since: Dict[bytes, float] = {}  # group -> since when its workers hold no task
        self.events = MonitorEvents()  # the core's, where a manager's new command is noted for monitors
        carry_out = {
            _A.DRAIN_WORKERS: self._drain_workers,
            _A.SEND_AWAY: self._send_away,
            _A.TELL_STOP: self._tell_stop,
            _A.FORGET: self._forget,
        }
        self._plans = GROUP_LIFECYCLE.plans(carry_out.__getitem__)
        if webhook_url:
            webhook = WebhookManager(webhook_url)
            self.add(Manager(webhook.manager_id, 0.0, OPEN, webhook))

    def get(self, manager_id: bytes) -> Optional[Manager]:
        return self._managers.get(manager_id)

    def connected(self) -> List[Manager]:
        """The managers connected to the scheduler (not the webhook's)."""
        return [manager for manager in self._managers.values() if manager.webhook is None]

    # ----------------------------------------------------------------- managers

    def on_hello(self, source: bytes, credential: Credential, now: float) -> None:
        manager = self._managers.get(source)
        if manager is None:
            self.add(Manager(source, now, credential))
        else:
            manager.last_seen = now

    def on_disconnect(self, source: bytes, message: m.DisconnectRequest, now: float, out: Outbox) -> None:
        self.remove(source, f"it left: {message.reason or 'no reason given'}")
        out.sends.append(Send(source, m.DisconnectResponse()))

    def on_webhook_answer(self, answer: WebhookAnswer, now: float, out: Outbox) -> None:
        for manager in self._managers.values():
            if manager.webhook is not None:
                out.sends.extend(manager.webhook.on_answer(answer, now))

    def add(self, manager: Manager) -> None:
        self._managers[manager.manager_id] = manager
        if manager.webhook is None:
            logger.info(f"Scheduler: worker manager {show(manager.manager_id)} connected")

    def remove(self, manager_id: bytes, why: str) -> None:
        """The manager left, timed out or its connection closed: nobody will stop its groups. Their workers take
        tasks while there is work; a group idle for the idle time (or drained already) is drained, and its
        workers are sent away once none holds a task (a Slurm job then ends)."""
        manager = self._managers.pop(manager_id, None)
        if manager is None:
            return
        logger.warning(
            f"Scheduler: worker manager {show(manager_id)} gone ({why}): its groups' workers will be sent away once "
            f"idle"
        )
        out = Outbox()  # no group of a manager that is gone sends anything as it goes
        for group in list(manager.groups.values()):
            self._step(group, _E.MANAGER_GONE, out)
        self._policy.forget(manager_id)

    def on_heartbeat(self, source: bytes, message: m.WorkerManagerHeartbeat, now: float, out: Outbox) -> None:
        manager = self._managers[source]
        if manager.heartbeat is None:
            logger.info(
                f"Scheduler: worker manager {show(source)} ({message.kind or 'unnamed'}) runs groups of "
                f"{message.workers_per_group} worker(s), {message.min_groups} to {message.max_groups} groups, "
                f"capabilities={','.join(c.name for c in message.capabilities) or 'none'}"
            )
        manager.heartbeat = message
        self._update_groups(manager, message.groups, out)
        self.evaluate(now, out, answer=source)

    def on_tick(self, now: float, timeout: float, out: Outbox) -> None:
        for manager in list(self._managers.values()):
            webhook = manager.webhook
            if webhook is not None:  # its heartbeat is what the scheduler started through it
                manager.last_seen = now
                out.sends.extend(webhook.on_tick(now, self.connected_workers))
                manager.heartbeat = webhook.heartbeat()
                if manager.heartbeat is not None:
                    self._update_groups(manager, manager.heartbeat.groups, out)
            elif now - manager.last_seen > timeout:
                self.remove(manager.manager_id, "timed out")
        self.evaluate(now, out)

    def connected_workers(self, group_id: bytes) -> int:
        return len(self._members.get(group_id, ()))

    # ----------------------------------------------------------------- workers

    def on_worker_joined(self, worker: Worker, out: Outbox) -> None:
        if not worker.group_id:
            return
        self._members.setdefault(worker.group_id, set()).add(worker.worker_id)
        group = self._groups.get(worker.group_id)
        if group is not None:
            self._step(group, _E.WORKER_JOINED, out)

    def on_worker_left(self, worker: Worker) -> None:
        members = self._members.get(worker.group_id)
        if members is not None:
            members.discard(worker.worker_id)
            if not members:
                del self._members[worker.group_id]
                group = self._groups.get(worker.group_id)
                if group is not None and group.state in _ORPHANS:
                    self._step(group, _E.LEFT, Outbox())  # forgetting it sends nothing

    # ----------------------------------------------------------------- the decision

    def evaluate(self, now: float, out: Outbox, answer: bytes = b"") -> None:
        """Decide for every manager that said what it can start; carry out the decisions; check the groups that
        drain, and those whose manager is gone; tell each manager whose command changed, and the manager
        ``answer`` (whose heartbeat came) in any case."""
        managers = [manager for manager in self._managers.values() if manager.heartbeat is not None]
        if managers:
            loads = [self._load(manager, now) for manager in managers]
            waiting = waiting_work(
                self._routing.queued_by_needs(),
                [(w.capabilities, w.load, w.info.slots) for w in self._workers.values() if not w.draining],
            )
            decisions = self._policy.decide(loads, waiting, now)
            for manager in managers:
                manager.decision = decisions[manager.manager_id]
                for group_id in manager.decision.retire:
                    logger.info(f"Scheduler: group {show_group(group_id)} idle: drain it, then stop it")
                    self._step(self._groups[group_id], _E.DRAIN, out)
        idle_seconds = self._policy.settings.idle_seconds
        for group in list(self._groups.values()):
            if group.state is GroupState.ORPHANED:
                since = self._idle_from(group.group_id, now, empty_is_idle=True)
                if since is not None and now - since >= idle_seconds:
                    logger.info(f"Scheduler: group {show_group(group.group_id)} idle: drain it, then send it away")
                    self._step(group, _E.DRAIN, out)
            elif group.state is not GroupState.ACTIVE:
                busy = any(self._workers[w].tasks for w in self._members.get(group.group_id, ()))
                self._step(group, _E.DRAIN if busy else _E.EMPTIED, out)
        for manager in managers:
            self._send_command(manager, out, only_if_changed=manager.manager_id != answer)

    def offers(self, needs: FrozenSet[str]) -> bool:
        """Whether a worker manager can start workers that offer every capability in ``needs``."""
        return any(
            manager.heartbeat is not None and needs <= {c.name for c in manager.heartbeat.capabilities}
            for manager in self._managers.values()
        )

    def _idle_from(self, group_id: bytes, now: float, empty_is_idle: bool) -> Optional[float]:
        """Since when none of the group's workers has held a task, as seen by the checks (None: one holds one
        now, or none is connected and that does not count as idle)."""
        members = self._members.get(group_id, ())
        if (members or empty_is_idle) and not any(self._workers[w].tasks for w in members):
            return self._idle_since.setdefault(group_id, now)
        self._idle_since.pop(group_id, None)
        return None

    def _load(self, manager: Manager, now: float) -> ManagerLoad:
        heartbeat = manager.heartbeat
        assert heartbeat is not None
        groups = []
        for group in manager.groups.values():
            if group.state is not GroupState.ACTIVE or group.reported not in _COUNTED:
                continue
            idle_since = self._idle_from(group.group_id, now, empty_is_idle=False)
            connected = len(self._members.get(group.group_id, ()))
            groups.append(GroupLoad(group.group_id, group.workers_expected, connected, idle_since))
        return ManagerLoad(
            manager.manager_id,
            frozenset(c.name for c in heartbeat.capabilities),
            heartbeat.workers_per_group,
            min(heartbeat.min_groups, heartbeat.max_groups),
            heartbeat.max_groups,
            groups,
        )

    def _send_command(self, manager: Manager, out: Outbox, only_if_changed: bool = False) -> None:
        draining = [g for g in manager.groups.values() if g.state is GroupState.DRAINING and g.reported in _COUNTED]
        drained = [g for g in manager.groups.values() if g.state is GroupState.DRAINED and g.reported is not _STOPPING]
        command = m.WorkerManagerCommand(  # a group it counts that drains still counts, until it is named to stop
            desired_groups=manager.decision.desired_groups + len(draining),
            stop_groups=[g.group_id for g in drained],
        )
        if only_if_changed and command == manager.sent:
            return
        if command != manager.sent:
            stop = f", stop {', '.join(show_group(g) for g in command.stop_groups)}" if command.stop_groups else ""
            text = f"manager {show(manager.manager_id)}: {command.desired_groups} group(s){stop}"
            self.events.add("scaling", manager.manager_id, text)
        manager.sent = command
        if manager.webhook is not None:
            out.sends.extend(manager.webhook.command(command))
        else:
            out.sends.append(Send(manager.manager_id, command))

    # ----------------------------------------------------------------- groups

    def _update_groups(self, manager: Manager, reported: List[m.WorkerGroup], out: Outbox) -> None:
        """The manager's groups as it reports them: new ones recorded, retiring or stopping ones drained,
        those it no longer lists gone."""
        listed = set()
        for item in reported:
            group_id = item.group_id
            listed.add(group_id)
            group = manager.groups.get(group_id)
            if group is None:
                other = self._groups.get(group_id)
                if other is not None:
                    logger.warning(
                        f"Scheduler: dropped group {show_group(group_id)} of {show(manager.manager_id)}: "
                        f"{show(other.manager_id)} has a group of that ID"
                    )
                    continue
                group = manager.groups[group_id] = self._groups[group_id] = ManagedGroup(
                    group_id, manager.manager_id, item
                )
            group.reported = item.state
            group.workers_expected = item.workers
            if item.state not in _COUNTED and group.state is GroupState.ACTIVE:
                self._step(group, _E.DRAIN, out)
        for group in [g for group_id, g in manager.groups.items() if group_id not in listed]:
            self._step(group, _E.GONE, out)

    def _step(self, group: ManagedGroup, event: GroupEvent, out: Outbox) -> None:
        GROUP_LIFECYCLE.advance(self._plans, group, event, group.group_id, (group, out))

    def _drain_workers(self, group: ManagedGroup, out: Outbox) -> None:
        for worker_id in self._members.get(group.group_id, ()):
            self._routing.drain(self._workers[worker_id], out)

    def _send_away(self, group: ManagedGroup, out: Outbox) -> None:
        why = f"group {show_group(group.group_id)} idle, and its manager is gone"
        for worker_id in list(self._members.get(group.group_id, ())):
            self._leave(self._workers[worker_id], why, out)

    def _tell_stop(self, group: ManagedGroup, out: Outbox) -> None:
        logger.info(f"Scheduler: group {show_group(group.group_id)} drained: its manager stops it")

    def _forget(self, group: ManagedGroup, out: Outbox) -> None:
        manager = self._managers.get(group.manager_id)
        if manager is not None:
            manager.groups.pop(group.group_id, None)
        self._groups.pop(group.group_id, None)
        self._idle_since.pop(group.group_id, None)

    # ----------------------------------------------------------------- monitor

    def snapshots(self, now: float) -> List[m.ManagerSnapshot]:
        return [
            m.ManagerSnapshot(
                manager_id=manager.manager_id,
                heartbeat=manager.heartbeat or m.WorkerManagerHeartbeat(),
                desired_groups=manager.sent.desired_groups if manager.sent is not None else 0,
                draining_groups=[g.group_id for g in manager.groups.values() if g.state is not GroupState.ACTIVE],
                last_seen_seconds_ago=now - manager.last_seen,
            )
            for manager in self._managers.values()
        ]
