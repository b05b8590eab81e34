"""The scheduler's asyncio/ZeroMQ shell around `SchedulerCore`.

It owns the sockets (ROUTER for clients and workers, DEALER to the object storage server, a ZeroMQ socket monitor of
each, XPUB for the monitor), turns what it reads into events, calls `SchedulerCore.handle`, and carries out the
effects it returns; it decides nothing. Sockets are read with ``add_reader`` on their ZeroMQ file descriptor and
drained in bursts (`scaler.protocol.socket_reader`, as every shell reads), so a burst of messages costs one wake-up;
the messages of clients and workers read in one burst reach the core together (`Burst`), so what they make leaves
together. With keys, every socket is CurveZMQ (`security.new_socket`), the ZAP handler (`scaler.protocol.zap`)
admits authorized keys only (monitor keys only on the XPUB, `monitor_feed.py`), and each message reaches the core
with its sender's `Credential`; the authorized keys are read again at each tick, and the core told when they changed
(`AuthorizedKeysRead`).

Connections: the ROUTER's monitor reports each connection accepted and closed by its file descriptor, and a
message comes with the descriptor it came on (``zmq.SRCFD``). A descriptor is reused as soon as its connection
closes, and the monitor's report of that close may be read after the next connection's Hello: so the shell
gives each accepted connection an ID of its own (`connection_events.AcceptedConnections`), tells the core the
ID a Hello came on (`PeerConnection`) and each ID that closed (`ConnectionClosed`), and the core decides who is
gone.

Nothing a peer sends stops a reader, the timer or the loop: an error while reading or decoding one message
drops that message, an error of the core drops that event, an error carrying out one effect drops that effect,
each logged with what it was; the ZeroMQ monitors' queues never fill (`connection_events.monitor_socket`). No
send raises into a reader or waits on a peer (docs/architecture.md has the table): to clients, workers and the
storage server ZeroMQ queues what a slow peer has not read yet (``SNDHWM`` 0: what it asked for, or what a
client's leaving or a graph's freeing asks of storage), a slow monitor's snapshots are dropped, and a webhook
call is bounded by its timeout, on a thread. A core that has more to do than one slice of a large message asks
to be handed `Continue` after the sockets are read once more (`MoreToDo`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import subprocess
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence

import psutil
import zmq

from scaler.protocol import codec, connection_events, routed
from scaler.protocol import messages as m
from scaler.protocol.addresses import check_address, default_monitor_address, default_storage_address
from scaler.protocol.alarm import Alarm
from scaler.protocol.connection_events import AcceptedConnections, ConnectionWatch
from scaler.protocol.errors import ProtocolError, ScalerError
from scaler.protocol.ids import show
from scaler.protocol.message_limits import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MIN_MAX_MESSAGE_SIZE,
    show_size,
)
from scaler.protocol.process_control import stop_child
from scaler.protocol.security import (
    MONITOR_DOMAIN,
    NO_SECURITY,
    OPEN,
    SCHEDULER_DOMAIN,
    SecurityConfig,
    check_exposure,
    check_http_exposure,
    new_socket,
    server_keys,
)
from scaler.protocol.socket_reader import LoopReader, SocketReader, decoder
from scaler.scheduler.graph_tasks import DEFAULT_INLINE_BUDGET
from scaler.scheduler.monitor_feed import MonitorFeed
from scaler.scheduler.scaling_policy import DEFAULT_SCALING, ScalingSettings
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    STORAGE,
    AuthorizedKeysRead,
    Burst,
    CannotForward,
    ConnectionClosed,
    Continue,
    FromPeer,
    FromStorage,
    MoreToDo,
    PeerConnection,
    Publish,
    Send,
    Shutdown,
    Start,
    StartFailed,
    StartServing,
    StartStorage,
    StorageConnected,
    StorageLost,
    StorageRefused,
    Tick,
    describe,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.storage_process import StorageStartError, start_object_storage_process
from scaler.scheduler.task_routing import DEFAULT_MAX_CLIENT_TASKS
from scaler.scheduler.webhook_calls import WebhookCaller, check_webhook_url
from scaler.scheduler.webhook_manager import CallWebhook

logger = logging.getLogger(__name__)

_SHUTDOWN_GRACE_SECONDS = 0.5  # for the last messages to leave before the sockets close
_STOP_TIMEOUT_SECONDS = 5.0  # for the storage server it started to end
DEFAULT_WEBHOOK_TIMEOUT_SECONDS = 10.0
ToEvent = Callable[[List[Any]], Any]  # a message's frames -> its event(s), or None


class SchedulerStartError(ScalerError):
    """The scheduler could not bind its address or reach an object storage server."""


class SchedulerServer:
    def __init__(
        self,
        address: str,
        object_storage_address: Optional[str] = None,
        monitor_address: Optional[str] = None,
        protected: bool = False,
        heartbeat_interval_seconds: float = 1.0,
        client_timeout_seconds: float = 60.0,
        worker_timeout_seconds: float = 60.0,
        allocate_policy: str = "even",
        missing_capabilities: str = "wait",
        max_task_deaths: int = 3,
        graph_sorter: str = "auto",
        graph_inline_bytes: int = DEFAULT_INLINE_BUDGET,
        metrics_port: Optional[int] = None,
        metrics_host: str = "127.0.0.1",
        security: SecurityConfig = NO_SECURITY,
        scaling: ScalingSettings = DEFAULT_SCALING,
        adapter_webhook_url: str = "",
        adapter_webhook_timeout_seconds: float = DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_client_tasks: int = DEFAULT_MAX_CLIENT_TASKS,
        storage_arguments: Sequence[str] = (),
        dashboard_link: str = "",
    ) -> None:
        self.address = check_address(address)
        self._storage_arguments = tuple(storage_arguments)  # options of the storage server it starts, if it does
        if max_message_size < MIN_MAX_MESSAGE_SIZE:
            raise SchedulerStartError(
                f"--max-message-size of {show_size(max_message_size)} is below the least the protocol needs, "
                f"{show_size(MIN_MAX_MESSAGE_SIZE)}"
            )
        if max_client_tasks < 1:
            raise SchedulerStartError(f"--max-client-tasks must be at least 1, not {max_client_tasks}")
        if adapter_webhook_url:
            try:
                check_webhook_url(adapter_webhook_url)
            except ValueError as error:
                raise SchedulerStartError(f"--adapter-webhook-url: {error}") from None
        self.object_storage_address = check_address(object_storage_address or default_storage_address(address))
        self.monitor_address = check_address(monitor_address or default_monitor_address(address))
        check_exposure("the scheduler", (self.address, self.monitor_address), security)
        if metrics_port is not None:
            check_http_exposure("the scheduler", "its Prometheus metrics", metrics_host, security.insecure)
        self._security = security
        self._keys = server_keys(security)
        self._zap: Any = None
        self.core = SchedulerCore(
            SchedulerSettings(
                object_storage_address=self.object_storage_address,
                object_storage_address_given=object_storage_address is not None,
                pid=os.getpid(),
                heartbeat_interval_seconds=heartbeat_interval_seconds,
                client_timeout_seconds=client_timeout_seconds,
                worker_timeout_seconds=worker_timeout_seconds,
                protected=protected,
                allocate_policy=allocate_policy,
                missing_capabilities=missing_capabilities,
                max_task_deaths=max_task_deaths,
                graph_sorter=graph_sorter,
                graph_inline_bytes=graph_inline_bytes,
                snapshot_every_second=metrics_port is not None,
                scaling=scaling,
                adapter_webhook_url=adapter_webhook_url,
                max_message_size=max_message_size,
                max_client_tasks=max_client_tasks,
                monitor_address=self.monitor_address,
                dashboard_link=dashboard_link,
            )
        )
        self._webhook_url = adapter_webhook_url
        self._webhook_timeout = adapter_webhook_timeout_seconds
        self._webhook: Optional[WebhookCaller] = None  # makes the webhook's calls, on threads of its own
        self._context = zmq.Context()  # one I/O thread: `AcceptedConnections` counts on the order it reports in
        self._router: Any = None
        self._connections: Optional[AcceptedConnections] = None  # the ROUTER's connections, from its monitor
        self._storage: Any = None
        self._storage_connection: Any = None  # the monitor socket of the DEALER to storage
        self._storage_watch: Optional[ConnectionWatch] = None
        self._monitor: Any = None  # the MonitorFeed
        self._watched: List[LoopReader] = []  # every socket it reads
        self._router_reader: Optional[LoopReader] = None  # the ROUTER's, once serving
        self._serving = False  # the ROUTER is read (from StartServing on)
        self._storage_process: Optional[subprocess.Popen] = None
        self._metrics_address = (metrics_host, metrics_port) if metrics_port is not None else None
        self._metrics: Any = None  # snapshot_metrics.MetricsServer while --metrics-port serves
        self._function_totals: Any = None  # snapshot_metrics.FunctionTotals, with --metrics-port
        self.latest_snapshot: Optional[Any] = None  # (StateSnapshot, per-function totals) for --metrics-port
        self._received: Counter = Counter()
        self._sent: Counter = Counter()
        self._stop: Optional[asyncio.Event] = None
        self._failure: Optional[str] = None
        self._process = psutil.Process()
        self._performers: Dict[type, Callable[[Any], None]] = {
            StartStorage: self._start_storage,
            StartServing: self._start_serving,
            StartFailed: self._start_failed,
            Publish: self._publish,
            Shutdown: self._shutdown,
            CallWebhook: self._call_webhook,
            MoreToDo: self._more_to_do,
        }
        self._continuing = False  # a Continue is on its way to the core
        self._alarm = Alarm(self._ring)  # for the core's next_wakeup, read after each Tick

    # ----------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self._open_sockets()
            self._serve_metrics()
            if self._webhook_url:
                self._webhook = WebhookCaller(
                    self._webhook_url, self._webhook_timeout, lambda answer: self._feed_from_thread(loop, answer)
                )
                logger.info(f"Scheduler: worker adapter webhook at {self._webhook_url}")
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._stop.set)
            self._watch(self._storage, decoder(FromStorage, "Scheduler", "object storage server"))
            self._watch(self._storage_connection, self._storage_connection_event)
            assert self._connections is not None  # made with the ROUTER
            self._watch(self._connections.monitor, self._router_connection_event)
            self._feed(Start())
            self._alarm.at(self.core.next_wakeup)
            await self._stop.wait()
            self._alarm.cancel()
            if self._failure is not None:
                raise SchedulerStartError(self._failure)
        finally:
            self._close()
            logger.info("Scheduler: stopped")

    def _open_sockets(self) -> None:
        keys = self._keys
        if keys.secure:
            from scaler.protocol.zap import ZapHandler

            self._zap = ZapHandler(self._context, keys, "Scheduler", (SCHEDULER_DOMAIN, MONITOR_DOMAIN))
            self._zap.start()
            directory = keys.authorized.directory if keys.authorized is not None else ""
            logger.info(f"Scheduler: CurveZMQ on every socket; authorized keys in {directory}")
        limit = self.core.settings.max_message_size
        self._router = new_socket(self._context, zmq.ROUTER, keys, SCHEDULER_DOMAIN, limit)
        self._router.setsockopt(zmq.SNDHWM, 0)  # a slow peer's messages wait in ZeroMQ, in its own pipe
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        self._connections = AcceptedConnections(self._router)
        self._bind_socket(self._router, self.address)
        logger.info(
            f"Scheduler: listen to scheduler address {self.address}, messages up to {show_size(limit)}, "
            f"{self.core.settings.max_client_tasks:,} tasks a client"
        )
        self._monitor = MonitorFeed(self._context, keys, self.monitor_address)
        self._bind_socket(self._monitor.socket, self.monitor_address)
        logger.info(f"Scheduler: listen to scheduler monitor address {self.monitor_address}")
        self._storage = new_socket(self._context, zmq.DEALER, keys)
        self._storage.setsockopt(zmq.SNDHWM, 0)  # a slow server's requests wait in ZeroMQ (the module's docstring)
        self._storage_watch = ConnectionWatch(
            self._storage, self._keys, f"the object storage server at {self.object_storage_address}"
        )
        self._storage_connection = self._storage_watch.monitor
        self._storage.connect(self.object_storage_address)

    def _serve_metrics(self) -> None:
        """Prometheus metrics on ``--metrics-port``, read by prometheus_client's own thread from the snapshot the
        event loop last stored (`latest_snapshot`, replaced whole each second: the thread never reads the core)."""
        if self._metrics_address is None:
            return
        try:
            from scaler.protocol import snapshot_metrics
        except ImportError:
            raise SchedulerStartError(
                "--metrics-port needs prometheus_client: pip install 'scaler-scheduler[metrics]'"
            ) from None
        host, port = self._metrics_address
        self._function_totals = snapshot_metrics.FunctionTotals()
        registry = snapshot_metrics.snapshot_registry(
            snapshot_metrics.SnapshotCollector(lambda: self.latest_snapshot), with_process=True
        )
        try:
            self._metrics = snapshot_metrics.MetricsServer(host, port, registry)
        except OSError as error:
            raise SchedulerStartError(f"cannot serve metrics at {host}:{port}: {error}") from None
        logger.info(f"Scheduler: serve Prometheus metrics at http://{host}:{self._metrics.port}/metrics")

    @staticmethod
    def _bind_socket(socket: Any, address: str) -> None:
        try:
            socket.bind(address)
        except zmq.ZMQError as error:
            raise SchedulerStartError(f"cannot listen at {address}: {error}") from None

    def _close(self) -> None:
        for reader in self._watched:
            reader.stop()
        if self._storage_watch is not None:
            self._storage_watch.close()
        if self._connections is not None:
            self._connections.close()
        monitor = self._monitor.socket if self._monitor is not None else None
        for socket in (self._router, self._storage, monitor):
            if socket is not None:
                socket.close(linger=0)
        if self._zap is not None:
            self._zap.stop()
        self._context.term()
        if self._metrics is not None:
            self._metrics.close()
        if self._webhook is not None:
            self._webhook.close()
        if self._storage_process is not None:
            stop_child(self._storage_process, _STOP_TIMEOUT_SECONDS)

    # ----------------------------------------------------------------- reading

    def _watch(self, socket: Any, to_event: ToEvent, copy: bool = True, together=False) -> LoopReader:
        """Read ``socket`` as it becomes readable (`socket_reader`: a burst at a time, a message that cannot be read
        dropped and logged); ``copy=False``: as frames, which carry ZeroMQ's properties; ``together``: the events
        of a burst go to the core as one `Burst`."""
        reader = self._reader(socket, to_event, copy, together)
        self._watched.append(reader)
        reader.start(asyncio.get_running_loop())
        return reader

    def _reader(self, socket: Any, to_event: ToEvent, copy: bool = True, together=False) -> LoopReader:
        read = SocketReader(socket, to_event, copy=copy, name="Scheduler")
        return LoopReader(read, self._feed_burst if together else self._feed_each)

    def _feed_each(self, events: List[Any], more: bool) -> None:
        for event in events:
            self._feed(event)

    def _feed_burst(self, events: List[Any], more: bool) -> None:
        self._feed(events[0] if len(events) == 1 and not more else Burst(events, more))

    def _router_event(self, frames: List[Any]) -> Any:
        """A client's or worker's message, received as ``zmq.Frame``s (a Hello's connection is in its frame: the
        Hello comes after a `PeerConnection`; with keys, the key ZeroMQ authenticated is the property User-Id of
        each frame)."""
        source = frames[0].bytes
        head = frames[1] if len(frames) > 1 else None
        credential = OPEN
        if self._keys.secure and head is not None:
            credential = self._keys.credential(str(head.get("User-Id")))
        try:
            # tasks and results are read only as far as routing needs; encode copies the rest through. A small
            # frame is copied: keeping it would keep the 8 KiB buffer libzmq received it in (codec.received_blobs)
            received = [head.bytes if head is not None and len(head) < codec.ZERO_COPY_BYTES else head, *frames[2:]]
            message, _ = routed.decode_routed(received if head is not None else [])
        except ProtocolError as error:
            logger.warning(f"Scheduler: dropped malformed message from {show(source)}: {error}")
            return None
        self._received[type(message).__name__] += 1
        if type(message) is m.Hello:
            connection = PeerConnection(source, self._connection_on(head.get(zmq.SRCFD)))  # type: ignore[union-attr]
            return [connection, FromPeer(source, message, credential)]
        return FromPeer(source, message, credential)

    def _router_connection_event(self, frames: List[Any]) -> None:
        """The ROUTER's monitor reported a connection accepted or closed; the core hears of those closed."""
        assert self._connections is not None  # its monitor is what is read
        self._connections.note(frames)
        self._tell_closed()

    def _connection_on(self, descriptor: int) -> int:
        """The ID of the connection a Hello came on (the closes the monitor reported meanwhile reach the core
        after this burst)."""
        assert self._connections is not None  # made with the ROUTER
        connection = self._connections.connection_of(descriptor)
        if self._connections.closed:
            asyncio.get_running_loop().call_soon(self._tell_closed)
        return connection

    def _tell_closed(self) -> None:
        """The connections closed so far reach the core, after what is readable on the ROUTER: what a peer sent
        before it closed (a leaving worker's DisconnectRequest) comes before the news that it is gone."""
        assert self._connections is not None  # made with the ROUTER
        if not self._connections.closed:
            return
        router = self._router_reader
        while self._serving and router is not None and not router.reader.socket.closed and router.reader.readable():
            router.drain()
        for connection in self._connections.take_closed():
            self._feed(ConnectionClosed(connection))

    def _storage_connection_event(self, frames: List[Any]) -> Any:
        watch = self._storage_watch
        assert watch is not None  # made with the storage socket, before its monitor is read
        change = watch.change(frames)
        if change == connection_events.UP:
            return StorageConnected()
        if change == connection_events.REFUSED and watch.refusal is not None:
            return StorageRefused(watch.refusal)
        return None if change is None else StorageLost()

    def _ring(self) -> None:
        """The core's next_wakeup came: its Tick (the keys read again first), and the alarm set for the next."""
        try:
            self._reread_keys()
            self._feed(Tick(caught_up=self._read_all()))
            self._read_all()  # sending can consume a file descriptor's edge: look for pending input ourselves
        except Exception:  # noqa: BLE001 - a bug here must not stop the scheduler's clock
            logger.exception("Scheduler: failed to tick")
        finally:
            self._alarm.at(self.core.next_wakeup)

    def _read_all(self) -> bool:
        """A burst of what waits on each socket; whether nothing is left to read on the ROUTER."""
        for reader in self._watched:
            reader.drain()
        return not self._serving or not self._router.getsockopt(zmq.EVENTS) & zmq.POLLIN

    def _more_to_do(self, effect: MoreToDo) -> None:
        if not self._continuing:
            self._continuing = True
            asyncio.get_running_loop().call_soon(self._continue)

    def _continue(self) -> None:
        """The core goes on with what waits in it once every socket was read (other peers take their turn)."""
        self._continuing = False
        try:
            self._read_all()
        except Exception:  # noqa: BLE001 - the core's work goes on all the same
            logger.exception("Scheduler: failed to read its sockets")
        self._feed(Continue())

    def _reread_keys(self) -> None:
        """The authorized keys, read again at each tick: the core forgets the peers of a key revoked since, and
        a monitor subscription of such a key is closed."""
        try:
            credentials = self._zap.reread() if self._zap is not None else None
            if credentials is None:
                return
            self._feed(AuthorizedKeysRead(credentials))
            revoked = self._zap.revoked_monitors()
            if revoked:
                logger.warning(
                    f"Scheduler: {len(revoked)} key(s) that subscribed to the monitor feed revoked: the feed closes "
                    "every subscription (the others subscribe again by themselves)"
                )
                self._monitor.close_subscriptions()
        except Exception:  # the next tick tries again
            logger.exception("Scheduler: cannot read the authorized keys again")

    # ----------------------------------------------------------------- the core, and its effects

    def _feed(self, event: Any) -> None:
        """``event`` to the core, and its effects carried out. Never raises: the reader, timer or callback that
        calls it goes on whatever one event or one effect does."""
        try:
            effects = self.core.handle(event, time.monotonic())
        except Exception:  # one bad message must not stop the scheduler
            logger.exception(f"Scheduler: failed to handle {describe(event)}")
            return
        for effect in effects:
            try:
                if type(effect) is Send:
                    self._send(effect.to, effect.message)
                else:
                    self._performers[type(effect)](effect)
            except Exception:  # noqa: BLE001 - this effect alone is lost
                what = f"send a {type(effect.message).__name__} to {show(effect.to)}" if type(effect) is Send else ""
                logger.exception(f"Scheduler: failed to {what or f'carry out {type(effect).__name__}'}")

    def _feed_from_thread(self, loop: asyncio.AbstractEventLoop, event: Any) -> None:
        """Hand ``event`` to the core from another thread (a webhook call's answer)."""
        try:
            loop.call_soon_threadsafe(self._feed, event)
        except RuntimeError:  # the loop closed: the scheduler stopped meanwhile
            pass

    def _call_webhook(self, effect: CallWebhook) -> None:
        if self._webhook is not None:
            self._webhook.call(effect)

    def _send(self, to: bytes, message: Any) -> None:
        self._sent[type(message).__name__] += 1
        try:
            frames = codec.encode(message)
        except ProtocolError as error:  # a task or result that came in malformed and cannot be copied on
            logger.warning(f"Scheduler: cannot encode a {type(message).__name__} for {show(to)}: {error}")
            if type(message) in (m.TaskBatch, m.TaskResultBatch):
                self._send_what_can_go(to, message)
            return
        if to == STORAGE:
            self._storage.send_multipart(frames, zmq.NOBLOCK)
        else:
            self._router.send_multipart([to, *frames], zmq.NOBLOCK)

    def _send_what_can_go(self, to: bytes, batch: Any) -> None:
        """Send the items of a batch that can be encoded; the core hears of the others."""
        batch_type = type(batch)
        good: List[Any] = []
        bad: List[Any] = []
        reasons: List[str] = []
        for item in batch.tasks if batch_type is m.TaskBatch else batch.results:
            try:
                codec.encode(batch_type([item]))
                good.append(item)
            except ProtocolError as error:
                bad.append(item)
                reasons.append(str(error))
        if good:
            rest = m.TaskBatch(good, batch.sequence) if batch_type is m.TaskBatch else m.TaskResultBatch(good)
            self._router.send_multipart([to, *codec.encode(rest)], zmq.NOBLOCK)
        if bad:
            self._feed(CannotForward(to, batch_type, bad, reasons))

    def _start_storage(self, effect: StartStorage) -> None:
        # the scheduler's own keys: the server key pair and the authorized keys (paths; never a key)
        security = dataclasses.replace(self._security, server_key_file=None, monitor_clients=False, task_key_file=None)
        try:
            self._storage_process = start_object_storage_process(effect.address, security, self._storage_arguments)
        except StorageStartError as error:
            self._start_failed(StartFailed(str(error)))

    def _start_serving(self, effect: StartServing) -> None:
        self._serving = True
        self._router_reader = self._watch(self._router, self._router_event, copy=False, together=True)
        self._watch(self._monitor.socket, MonitorFeed.subscription)
        logger.info("Scheduler: started")

    def _start_failed(self, effect: StartFailed) -> None:
        self._failure = effect.reason
        self._stop.set()  # type: ignore[union-attr]

    def _publish(self, effect: Publish) -> None:
        snapshot = effect.snapshot
        snapshot.scheduler_cpu = self._process.cpu_percent()
        snapshot.scheduler_rss_bytes = self._process.memory_info().rss
        snapshot.messages_sent = [m.Counter(k, v) for k, v in sorted(self._sent.items())]
        snapshot.messages_received = [m.Counter(k, v) for k, v in sorted(self._received.items())]
        if self._metrics is not None:
            self._function_totals.update(snapshot)
            self.latest_snapshot = (snapshot, self._function_totals.totals())
        if not effect.to_monitors:
            return
        self._monitor.publish(codec.encode(snapshot))

    def _shutdown(self, effect: Shutdown) -> None:
        logger.info(f"Scheduler: shutting down: {effect.reason}")
        asyncio.get_running_loop().call_later(_SHUTDOWN_GRACE_SECONDS, self._stop.set)  # type: ignore[union-attr]

