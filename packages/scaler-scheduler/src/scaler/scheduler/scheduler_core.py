"""The scheduler's decisions, without I/O: `SchedulerCore.handle(event, now) -> effects`.

The shell in `server.py` reads its sockets, turns what it reads into events (`scheduler_events.py`), calls
`handle`, and carries out the effects it returns, in order; so no decision is ever interrupted by an
``await``, and the whole core is tested without sockets. The core holds no socket and reads no clock.

It is made of:

- the peers (`peers.py`): Hello, heartbeats, timeouts, disconnects, shutdown requests, here (a peer is
  silent only when the shell had read everything its peers sent meanwhile: the scheduler's own busy moment
  never times a peer out); and who may be what: a peer says Hello only as a role its key is authorized as
  (`security.Credential`; any role without security), and its messages must then come with that key; whose
  objects a client's tasks read (its scope: its own, or for a Client made inside a task that proves it,
  `scaler.protocol.delegation`, those its task's client reads), of which the storage server is told before
  the client's HelloAck (`StorageLink.admit`);
- the tasks (`task_routing.py`): records, queue, dispatch, balancing, expiry, every change of a task's
  state through the table of `task_lifecycle.py`; large messages a slice at a time, each peer's messages in
  order (`message_slices.py`);
- peers that come back (`reconnections.py`): a client whose connection closed is kept for the wait it said
  (its tasks cancelled, its objects kept), what it would be sent kept for it; workers saying Hello again name
  the tasks they hold (after a restart, this scheduler takes them as theirs); a Client made in a task waits
  for a worker to hold that task;
- graphs (`graph_tasks.py`): the results and cancel confirms of graph nodes go through the graph layer
  before they reach a client;
- the object storage server (`storage_link.py`): the Hello conversation at start and after a reconnect,
  and the requests the scheduler sends it;
- the worker managers (`worker_managers.py`, deciding with `scaling_policy.py`; the OpenGRIS webhook is one
  of them: `webhook_manager.py`): how many worker groups each should run, and which to drain and stop;
- the monitor (`monitor_snapshot.py`): a snapshot each second while someone is subscribed, with the task
  runs the workers record meanwhile (`task_stream.py`, which also serves clients' performance reports) and
  what happened (`monitor_events.py`, where what the core logs of its peers is noted too).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

from scaler.protocol import messages as m
from scaler.protocol.ids import show, show_group
from scaler.protocol.peer_connections import PeerConnections
from scaler.protocol.security import Credential, RefusalLog
from scaler.protocol.version import PROTOCOL_VERSION, TASK_OUTPUT_VERSION, incompatibility, knows
from scaler.scheduler.graph_routes import GraphRoutes
from scaler.scheduler.graph_tasks import GraphTasks
from scaler.scheduler.hello_checks import awaits_holder, credential_problem, role_problem, scope_of
from scaler.scheduler.message_slices import MessageSlices
from scaler.scheduler.missing_capabilities import MissingCapabilities
from scaler.scheduler.monitor_snapshot import Monitoring
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client, Silence, Worker
from scaler.scheduler.reconnections import Reconnections
from scaler.scheduler.scaling_policy import ScalingPolicy
from scaler.scheduler.scheduler_events import (
    AuthorizedKeysRead,
    Burst,
    CannotForward,
    ConnectionClosed,
    Continue,
    FromPeer,
    FromStorage,
    MonitorSubscription,
    MoreToDo,
    PeerConnection,
    Send,
    Shutdown,
    Start,
    StorageConnected,
    StorageLost,
    StorageRefused,
    Tick,
    describe,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.storage_link import StorageLink
from scaler.scheduler.task_inputs import TaskInputs
from scaler.scheduler.task_routing import TaskRouting
from scaler.scheduler.webhook_manager import WebhookAnswer
from scaler.scheduler.worker_calls import WorkerCalls
from scaler.scheduler.worker_managers import Manager, WorkerManagers

TICK_SECONDS = 0.5  # timeouts, queue expiry and balancing are looked at this often
BUSY_SECONDS = 1.0  # after a burst that left messages waiting, the scheduler counts as busy this long

logger = logging.getLogger(__name__)

_PeerHandler = Callable[[bytes, Any, float, Outbox], None]


class SchedulerCore:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self._workers: Dict[bytes, Worker] = {}
        self._clients: Dict[bytes, Client] = {}
        self._silent_workers = Silence(settings.worker_timeout_seconds)
        self._silent_clients = Silence(settings.client_timeout_seconds)
        sorter = {"auto": None, "graphblas": True, "python": False}[settings.graph_sorter]
        self._graphs = GraphTasks(sorter, settings.graph_inline_bytes)
        self._routing = TaskRouting(
            self._workers, self._clients, settings.max_task_deaths, settings.max_client_tasks, self._graphs.nodes,
            claim_seconds=settings.client_timeout_seconds,
        )  # fmt: skip
        self._storage = StorageLink(
            settings.object_storage_address, settings.object_storage_address_given, settings.pid, self._readmit
        )
        self._managers = WorkerManagers(
            self._workers, self._routing, ScalingPolicy(settings.scaling), self._send_away,
            settings.adapter_webhook_url,
        )  # fmt: skip
        self._missing = MissingCapabilities(settings.missing_capabilities, self._routing, self._managers.offers)
        self._connections = PeerConnections()  # a peer whose connection closes is gone
        self._monitoring = Monitoring(
            self._workers, self._clients, self._routing, self._storage, self._managers,
            settings.snapshot_every_second, settings.max_client_tasks,
        )  # fmt: skip
        self._events, self._stream = self._monitoring.events, self._monitoring.stream
        self._returns = Reconnections(
            self._clients, self._routing, self._events, settings.client_timeout_seconds, self._delete_objects
        )
        self._refusals = RefusalLog()  # refusals of keys are logged rate-limited
        self._calls = WorkerCalls(self._workers)  # Client.upload_file, run, restart
        self._next_tick = 0.0
        self._busy_until = float("-inf")  # while busy, each worker is sent tasks in full runs (TaskRouting.dispatch)
        self._caught_up_at = float("-inf")  # when the shell last had read all its peers had sent
        self._inputs = TaskInputs(self._routing.holds)
        self._graph_routes = GraphRoutes(self._graphs, self._routing, self._storage, self._inputs)
        self._slices = MessageSlices(self._routing, self._graphs, self._handlers_of, self._graph_routes.apply)
        self._handlers: Dict[type, Callable[[Any, float, Outbox], None]] = {
            Start: self._on_start,
            FromStorage: self._on_storage_message,
            StorageConnected: self._on_storage_connected,
            StorageLost: self._on_storage_lost,
            StorageRefused: self._on_storage_refused,
            CannotForward: self._on_cannot_forward,
            PeerConnection: self._on_peer_connection,
            ConnectionClosed: self._on_connection_closed,
            MonitorSubscription: self._on_monitor_subscription,
            AuthorizedKeysRead: self._on_keys_read,
            Tick: self._on_tick,
            Continue: self._on_continue,
            WebhookAnswer: self._managers.on_webhook_answer,
        }
        routing, take = self._routing, self._slices.take
        self._client_handlers: Dict[type, _PeerHandler] = {
            m.ClientHeartbeat: self._on_client_heartbeat,
            m.TaskBatch: take,
            m.TaskCancel: self._graph_routes.on_cancel_request,
            m.GraphTask: take,
            m.ObjectInstruction: self._on_object_instruction,
            m.ClientShutdownRequest: self._on_shutdown_request,
            m.DisconnectRequest: self._on_client_disconnect,
            m.SchedulerInfoRequest: self._on_info_request,
            m.WorkerCall: self._calls.on_call,
        }
        self._worker_handlers: Dict[type, _PeerHandler] = {
            m.WorkerHeartbeat: self._on_worker_heartbeat,
            m.TaskResultBatch: take,
            m.TaskCancelConfirm: routing.on_cancel_confirm,
            m.BalanceResponse: routing.on_balance_response,
            m.WaitingTasks: routing.on_waiting_tasks,
            m.DisconnectRequest: self._on_worker_disconnect,
            m.TaskOutputBatch: routing.on_task_output,
            m.WorkerCallResult: self._calls.on_result,
        }
        self._manager_handlers: Dict[type, _PeerHandler] = {
            m.WorkerManagerHeartbeat: self._managers.on_heartbeat,
            m.DisconnectRequest: self._managers.on_disconnect,
        }

    # ----------------------------------------------------------------- the entry point

    def handle(self, event: Any, now: float) -> List[Any]:
        """Decide what ``event`` means at time ``now`` (seconds, monotonic); return the effects, in order."""
        out = Outbox()
        self._events.now = now
        if type(event) is Burst:
            if event.more:
                self._busy_until = now + BUSY_SECONDS
            else:  # the shell read until nothing was left
                self._caught_up_at = now
            for each in event.events:
                try:
                    self._handle(each, now, out)
                except Exception:  # one bad message must not cost the others of its burst their effects
                    logger.exception(f"Scheduler: failed to handle {describe(each)}")
        else:
            if type(event) is FromPeer:  # read alone: nothing else waited
                self._caught_up_at = now
            self._handle(event, now, out)
        returns = self._returns
        if returns.hellos_may_be_ready:
            for source, hello, credential in returns.ready_hellos(now):
                self._on_hello(source, hello, credential, now, out, deferred=True)
        self._routing.dispatch(out, now < self._busy_until, now)
        if self._slices:
            out.sends.append(MoreToDo())
        return returns.divert(out.effects()) if returns.any_away else out.effects()

    def _handle(self, event: Any, now: float, out: Outbox) -> None:
        if type(event) is FromPeer:  # the hot path, inline: a client's or worker's message to its handler
            source, message = event.source, event.message
            peer: Any = self._clients.get(source)
            handlers = self._client_handlers
            if peer is None:
                peer = self._workers.get(source)
                handlers = self._worker_handlers
                if peer is None:
                    peer = self._managers.get(source)
                    handlers = self._manager_handlers
            handler = handlers.get(type(message))
            if handler is not None and peer is not None:
                if event.credential is peer.credential or self._same_credential(peer, event.credential, now, out):
                    peer.last_seen = now  # heard now, even if its message waits behind an earlier one
                    if self._slices.waits(source):
                        self._slices.put(source, message)
                    else:
                        handler(source, message, now, out)
            elif type(message) is m.Hello:
                self._on_hello(source, message, event.credential, now, out)
            elif peer is None:
                refusal = m.Refusal(PROTOCOL_VERSION, f"send Hello first (got {type(message).__name__})")
                out.sends.append(Send(source, refusal))
            else:
                role = peer.role.name.lower()
                logger.warning(
                    f"Scheduler: dropped {type(message).__name__} from {role} {show(source)}: not a {role} message"
                )
        else:
            self._handlers[type(event)](event, now, out)
        if self._graph_routes.active:
            self._graph_routes.through(out, now)

    @property
    def next_wakeup(self) -> float:
        """When the core wants the next `Tick` (monotonic seconds)."""
        deadline = self._storage.deadline
        return self._next_tick if deadline is None else min(self._next_tick, deadline)

    # ----------------------------------------------------------------- observation (tests, monitor)

    @property
    def task_count(self) -> int:
        return self._routing.task_count

    @property
    def state_counts(self) -> Counter:
        """How many tasks entered each state and have not left it (terminal states: ever)."""
        return self._routing.state_counts

    @property
    def dropped_results(self) -> int:
        return self._routing.dropped_results

    @property
    def graphs(self) -> GraphTasks:
        return self._graphs

    @property
    def worker_ids(self) -> List[bytes]:
        return list(self._workers)

    @property
    def client_ids(self) -> List[bytes]:
        return list(self._clients)

    # ----------------------------------------------------------------- the shell's events

    def _on_start(self, event: Start, now: float, out: Outbox) -> None:
        logger.info(f"Scheduler: connect to object storage server {self._storage.address}")
        self._next_tick = now + TICK_SECONDS
        self._storage.start(now, out)

    def _on_storage_message(self, event: FromStorage, now: float, out: Outbox) -> None:
        self._storage.on_message(event.message, now, out)
        if self._storage.ready:
            self._returns.serving(now)

    def _on_storage_connected(self, event: StorageConnected, now: float, out: Outbox) -> None:
        self._storage.on_connection(True, now, out)

    def _on_storage_lost(self, event: StorageLost, now: float, out: Outbox) -> None:
        self._storage.on_connection(False, now, out)

    def _on_storage_refused(self, event: StorageRefused, now: float, out: Outbox) -> None:
        self._storage.on_refused(event.reason, now, out)

    def _on_cannot_forward(self, event: CannotForward, now: float, out: Outbox) -> None:
        logger.warning(
            f"Scheduler: cannot forward {len(event.items)} item(s) of a {event.message_type.__name__} to "
            f"{show(event.to)}: {event.reasons[0] if event.reasons else ''}"
        )
        self._routing.cannot_forward(event.to, event.message_type, event.items, event.reasons, out)

    def _on_peer_connection(self, event: PeerConnection, now: float, out: Outbox) -> None:
        self._connections.on_hello(event.source, event.connection)

    def _on_connection_closed(self, event: ConnectionClosed, now: float, out: Outbox) -> None:
        gone = self._connections.on_closed(event.connection)
        if gone is not None:
            self._connection_gone(gone, now, out)

    def _connection_gone(self, peer_id: bytes, now: float, out: Outbox) -> None:
        """The connection on which ``peer_id`` said Hello closed: it is gone (it does not come back on a new
        one)."""
        worker = self._workers.get(peer_id)
        if worker is not None:
            self._events.warning("worker died", peer_id, f"worker {show(peer_id)} disconnected (its connection closed)")
            self._remove_worker(worker, out)
            return
        client = self._clients.get(peer_id)
        if client is not None:
            if self._returns.client_gone(client, now):  # it said it comes back: kept meanwhile, its tasks stopped
                self._connections.forget(peer_id)
                self._graph_routes.forget_client(peer_id)
                self._routing.withdraw(client, out)
                return
            self._events.warning("client left", peer_id, f"client {show(peer_id)} disconnected (its connection closed)")
            self._remove_client(client, out, forget=True)
        self._managers.remove(peer_id, "its connection closed")

    def _on_monitor_subscription(self, event: MonitorSubscription, now: float, out: Outbox) -> None:
        self._monitoring.on_subscription(event.change, out)

    def _on_tick(self, event: Tick, now: float, out: Outbox) -> None:
        """Forget silent peers, reject tasks past their timeout, balance queued tasks onto idle workers.

        A peer is silent when it sent nothing for its timeout up to the last time the shell had read everything
        (`_caught_up_at`): while the scheduler is behind (busy, or flooded), what a peer sent may wait unread,
        and its silence is not judged until the shell has caught up."""
        self._next_tick = now + TICK_SECONDS
        self._storage.on_tick(now, out)
        if event.caught_up:
            self._caught_up_at = now
        heard_until = self._caught_up_at
        for worker in self._silent_workers.silent(self._workers, heard_until):
            self._events.warning("worker timed out", worker.worker_id, f"worker {show(worker.worker_id)} timed out")
            self._remove_worker(worker, out)
        for client in self._silent_clients.silent(self._clients, heard_until):
            if client.away_until:  # its connection closed: it is waited for as long as it said
                continue
            self._events.warning("client timed out", client.client_id, f"client {show(client.client_id)} timed out")
            self._remove_client(client, out, forget=True)
        for client in self._returns.on_tick(now, out):
            self._remove_client(client, out, forget=True)
        self._routing.expire(now, out)
        self._missing.on_tick(now, out)
        self._routing.dispatch(out, now < self._busy_until, now)
        self._routing.balance(out)
        self._managers.on_tick(now, self.settings.worker_timeout_seconds, out)
        self._monitoring.on_tick(now, out)

    def _on_continue(self, event: Continue, now: float, out: Outbox) -> None:
        self._slices.take_turns(now, out)

    # ----------------------------------------------------------------- peers

    def _handlers_of(self, peer_id: bytes) -> Optional[Dict[type, _PeerHandler]]:
        """The handlers of a connected client's or worker's messages (the peers whose messages may wait)."""
        if peer_id in self._clients:
            return self._client_handlers
        return self._worker_handlers if peer_id in self._workers else None

    def _on_hello(
        self, source: bytes, hello: m.Hello, credential: Credential, now: float, out: Outbox, deferred: bool = False
    ) -> None:
        reason = incompatibility(hello.version)
        if reason is not None:
            self._events.warning("refused", source, f"refused {show(source)}: {reason}")
        else:  # a role that does not connect here (a monitor's probe, say) is answered without a log line
            reason = role_problem(hello)
        if reason is not None:
            out.sends.append(Send(source, m.Refusal(PROTOCOL_VERSION, reason)))
            return
        known = self._clients.get(source) or self._workers.get(source) or self._managers.get(source)
        reason = credential_problem(source, hello.role, credential, known)
        if reason is not None:
            self._refuse(source, credential, reason, now, out)
            return
        if hello.role == m.PeerRole.WORKER:
            old = self._workers.get(source)
            if old is not None:
                self._routing.remove_worker(old, out)
                self._managers.on_worker_left(old)
                self._calls.worker_gone(source, out)  # what it was asked is lost with its session
                self._slices.forget(source)  # what its earlier session sent
            worker = Worker(source, hello, now, credential)
            self._routing.add_worker(worker)
            self._silent_workers.watch(source, now)
            self._managers.on_worker_joined(worker, out)
            capabilities = ",".join(c.name for c in hello.worker_info.capabilities) or "none"
            group = f", group {show_group(worker.group_id)}" if worker.group_id else ""
            joined = f"worker {show(source)} connected, capabilities={capabilities}{group}"
            self._events.info("worker joined", source, joined)
            if hello.worker_info.held_tasks:  # it lost its scheduler (maybe this one, before a restart)
                self._returns.peer_resumes()
                self._routing.adopt(worker, hello.worker_info.held_tasks, now, out)
            timeout = self.settings.worker_timeout_seconds
        elif hello.role == m.PeerRole.WORKER_MANAGER:
            self._managers.on_hello(source, credential, now)
            timeout = self.settings.worker_timeout_seconds
        else:
            ack = self._hello_ack(source, self.settings.client_timeout_seconds)
            client = self._clients.get(source)
            if client is not None:
                client.last_seen = now
                client.reconnect = hello.reconnect_seconds
                self._returns.client_back(client)
                self._silent_clients.watch(source, now)
                self._storage.acknowledge(source, ack, out)
                return
            if hello.resuming:
                self._returns.peer_resumes()
            if not deferred and hello.made_in and awaits_holder(hello, self._routing):
                self._returns.defer(hello.made_in, (source, hello, credential), now)
                return
            scope = scope_of(source, hello, self._routing, self._workers)
            client = Client(
                source, now, credential, knows(hello.version, TASK_OUTPUT_VERSION), scope, hello.reconnect_seconds
            )
            self._clients[source] = client
            self._silent_clients.watch(source, now)
            stands_for = f", for the tasks of {show(scope)}" if scope != source else ""
            self._events.info("client joined", source, f"client {show(source)} connected{stands_for}")
            self._storage.admit(source, scope, ack, out)  # its HelloAck leaves once storage admitted it
            return
        out.sends.append(self._hello_ack(source, timeout))
        if hello.role == m.PeerRole.WORKER:
            self._monitoring.on_worker_hello(source, out)
            self._calls.worker_joined(self._workers[source], out)

    def _hello_ack(self, source: bytes, timeout: float) -> Send:
        ack = m.HelloAck(
            PROTOCOL_VERSION,
            self.settings.object_storage_address,
            self.settings.heartbeat_interval_seconds,
            timeout,
            m.PeerRole.SCHEDULER,
            max_message_size=self.settings.max_message_size,
            client_quota=self.settings.max_client_tasks,
        )
        return Send(source, ack)

    def _delete_objects(self, owner: bytes, object_ids: List[bytes], out: Outbox) -> None:
        self._storage.send(m.ObjectRequest(0, m.ObjectRequestKind.DELETE, owner, object_ids), out)

    def _readmit(self, out: Outbox) -> None:
        """The storage server answers again (maybe a new one): it is told of every client again."""
        for client in self._clients.values():
            self._storage.admit(client.client_id, client.scope, None, out)

    def _same_credential(self, peer: Any, credential: Credential, now: float, out: Outbox) -> bool:
        """Whether a known peer's message may come with ``credential`` (not the one it said Hello with): the
        same key, still authorized as its role (the authorized keys were read again). Else the message is
        refused, and a peer whose key was revoked is forgotten."""
        if credential.key == peer.credential.key and peer.role in credential.roles:
            peer.credential = credential
            return True
        if credential.key != peer.credential.key:
            source = _peer_id(peer)
            self._refuse(source, credential, f"{show(source)} said Hello with another key", now, out)
        else:
            self._revoke(peer, credential, now, out)
        return False

    def _on_keys_read(self, event: AuthorizedKeysRead, now: float, out: Outbox) -> None:
        """The authorized keys changed: each peer whose key no longer holds its role is revoked now, not at its
        next message (a peer that sends none would keep its session)."""
        credentials = event.credentials
        peers: List[Any] = [*self._clients.values(), *self._workers.values(), *self._managers.connected()]
        for peer in peers:
            key = peer.credential.key
            credential = credentials.get(key) or Credential(key, frozenset())
            if peer.role in credential.roles:
                peer.credential = credential
            else:
                self._revoke(peer, credential, now, out)

    def _revoke(self, peer: Any, credential: Credential, now: float, out: Outbox) -> None:
        """``peer``'s key is no longer authorized as its role: it is told so, and forgotten (its tasks withdrawn
        or queued again)."""
        source = _peer_id(peer)
        reason = f"{credential.name()} is no longer authorized as a {peer.role.name.lower()}"
        self._refuse(source, credential, reason, now, out)
        if type(peer) is Client:
            self._remove_client(peer, out, forget=True)
        elif type(peer) is Manager:
            self._managers.remove(source, "its key was revoked")
        else:
            self._remove_worker(peer, out)

    def _refuse(self, source: bytes, credential: Credential, reason: str, now: float, out: Outbox) -> None:
        suppressed = self._refusals.should_log(credential.key, now)
        if suppressed is not None:
            more = f" ({suppressed} more refusals of this key since its last line)" if suppressed else ""
            self._events.warning("refused", source, f"refused {show(source)}: {reason}{more}")
        out.sends.append(Send(source, m.Refusal(PROTOCOL_VERSION, reason)))

    def _on_client_heartbeat(self, source: bytes, message: m.ClientHeartbeat, now: float, out: Outbox) -> None:
        client = self._clients[source]
        client.heartbeat = message
        if not client.resent:  # its first since its Hello: it sent again all it waits for
            self._returns.client_resent(client, self._graphs.nodes, out)
        self._monitoring.on_client_heartbeat(source, message, now, out)

    def _on_worker_heartbeat(self, source: bytes, message: m.WorkerHeartbeat, now: float, out: Outbox) -> None:
        """Kept for monitors; what the worker says it holds is checked against what it was sent."""
        worker = self._workers[source]
        ask = worker.reconciles and self._routing.reconcile(worker, message, out)
        message.held_task_ids = []  # monitors need not see them
        if message.memory_killed:
            self._events.memory_kills(source, message)
            message.memory_killed = []  # told once, as events
        self._stream.on_worker_heartbeat(source, message, now)
        worker.heartbeat = message
        out.sends.append(Send(source, m.WorkerHeartbeatEcho(send_task_ids=ask, record_tasks=self._stream.recording)))

    def _on_info_request(self, source: bytes, message: m.SchedulerInfoRequest, now: float, out: Outbox) -> None:
        """What this scheduler serves, for ``source`` (`Client.scheduler_info`): its state as monitors see it, of
        the clients only ``source``."""
        settings = self.settings
        info = m.SchedulerInfo(self._monitoring.snapshot_for(source, now), settings.monitor_address,
                               settings.dashboard_link)  # fmt: skip
        out.sends.append(Send(source, info))

    def _on_client_disconnect(self, source: bytes, message: m.DisconnectRequest, now: float, out: Outbox) -> None:
        self._events.info("client left", source, f"client {show(source)} disconnected")
        self._remove_client(self._clients[source], out, forget=True)
        out.sends.append(Send(source, m.DisconnectResponse()))

    def _on_worker_disconnect(self, source: bytes, message: m.DisconnectRequest, now: float, out: Outbox) -> None:
        why = message.reason or "no reason given"
        self._events.info("worker left", source, f"worker {show(source)} disconnected: {why}")
        self._remove_worker(self._workers[source], out)
        out.sends.append(Send(source, m.DisconnectResponse()))

    def _send_away(self, worker: Worker, why: str, out: Outbox) -> None:
        """Ask ``worker``, which holds no task, to leave, and forget it now: its connection's close is no news."""
        self._events.info("worker sent away", worker.worker_id, f"worker {show(worker.worker_id)} sent away: {why}")
        out.sends.append(Send(worker.worker_id, m.DisconnectRequest(why)))
        self._remove_worker(worker, out)

    def _remove_worker(self, worker: Worker, out: Outbox) -> None:
        self._connections.forget(worker.worker_id)
        self._stream.forget_worker(worker.worker_id)
        self._slices.forget(worker.worker_id)
        self._routing.remove_worker(worker, out)
        self._managers.on_worker_left(worker)
        self._calls.worker_gone(worker.worker_id, out)

    def _on_shutdown_request(self, source: bytes, message: Any, now: float, out: Outbox) -> None:
        if self.settings.protected:
            reason = "the scheduler is protected (--protected): it refuses shutdown requests from clients"
            logger.warning(f"Scheduler: refused shutdown request from client {show(source)}")
            out.sends.append(Send(source, m.ClientShutdownResponse(False, reason)))
            return
        logger.info(f"Scheduler: shutdown requested by client {show(source)}")
        out.sends.append(Send(source, m.ClientShutdownResponse(True, "")))
        for worker_id in self._workers:
            out.sends.append(Send(worker_id, m.DisconnectRequest("scheduler shutting down")))
        for client_id in self._clients:  # they need not wait for it to come back
            if client_id != source:
                out.sends.append(Send(client_id, m.DisconnectRequest("the scheduler was shut down by a client")))
        out.sends.append(Shutdown(f"requested by client {show(source)}"))

    def _on_object_instruction(self, source: bytes, message: m.ObjectInstruction, now: float, out: Outbox) -> None:
        if message.kind == m.ObjectInstructionKind.CLEAR:
            self._remove_client(self._clients[source], out, forget=False)
        elif message.kind == m.ObjectInstructionKind.DELETE:
            self._storage.send(m.ObjectRequest(0, m.ObjectRequestKind.DELETE, source, message.object_ids), out)

    def _remove_client(self, client: Client, out: Outbox, forget: bool) -> None:
        """The client left (``forget``) or cleared: its graphs and tasks are dropped, its objects cleared."""
        if forget:
            del self._clients[client.client_id]
            self._returns.forget(client.client_id)
            self._connections.forget(client.client_id)
            self._storage.forget(client.client_id)
            self._monitoring.forget_client(client.client_id, out)
            self._slices.forget(client.client_id)
            self._calls.client_gone(client.client_id)
        self._graph_routes.forget_client(client.client_id)
        self._routing.withdraw(client, out)
        self._storage.send(m.ObjectRequest(0, m.ObjectRequestKind.CLEAR_OWNER, client.client_id, []), out)
        if not forget:  # the clear ended its admission too: it stays, so it is admitted again
            self._storage.admit(client.client_id, client.scope, None, out)


def _peer_id(peer: Any) -> bytes:
    kind = type(peer)
    return peer.client_id if kind is Client else peer.manager_id if kind is Manager else peer.worker_id
