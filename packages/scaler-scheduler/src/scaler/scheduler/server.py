"""The scheduler's asyncio/ZeroMQ shell around `SchedulerCore`.

It owns the sockets (ROUTER for clients and workers, DEALER to the object
storage server, XPUB for the monitor), decodes frames, feeds the core, and
sends the effects the core returns. Sockets are read with ``add_reader`` on
their ZeroMQ file descriptor and drained in bursts, so a burst of messages
costs one wake-up.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import multiprocessing
import os
import signal
import time
from collections import Counter
from typing import Any, Callable, List, Optional

import psutil
import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import check_address, default_monitor_address, default_storage_address
from scaler.protocol.errors import ProtocolError, ScalerError
from scaler.protocol.ids import show
from scaler.protocol.version import PROTOCOL_VERSION, incompatibility
from scaler.scheduler.graph_tasks import DEFAULT_INLINE_BUDGET
from scaler.scheduler.scheduler_state import STORAGE, SchedulerCore, SchedulerSettings, Send, Shutdown

logger = logging.getLogger(__name__)

_BURST = 256  # messages read per wake-up before yielding to timers and other sockets
_TICK_SECONDS = 0.5
_SNAPSHOT_SECONDS = 1.0
_STORAGE_PROBE_SECONDS = 1.0
_STORAGE_START_SECONDS = 15.0


class SchedulerStartError(ScalerError):
    """The scheduler could not bind its address or reach an object storage server."""


class SchedulerServer:
    def __init__(
        self,
        address: str,
        object_storage_address: Optional[str] = None,
        monitor_address: Optional[str] = None,
        protected: bool = False,
        heartbeat_interval_seconds: float = 2.0,
        client_timeout_seconds: float = 60.0,
        worker_timeout_seconds: float = 60.0,
        allocate_policy: str = "even",
        max_task_deaths: int = 3,
        graph_sorter: str = "auto",
        graph_inline_bytes: int = DEFAULT_INLINE_BUDGET,
        metrics_port: Optional[int] = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        self.address = check_address(address)
        self._storage_address_given = object_storage_address is not None
        self.object_storage_address = check_address(object_storage_address or default_storage_address(address))
        self.monitor_address = check_address(monitor_address or default_monitor_address(address))
        self.core = SchedulerCore(
            SchedulerSettings(
                object_storage_address=self.object_storage_address,
                heartbeat_interval_seconds=heartbeat_interval_seconds,
                client_timeout_seconds=client_timeout_seconds,
                worker_timeout_seconds=worker_timeout_seconds,
                protected=protected,
                allocate_policy=allocate_policy,
                max_task_deaths=max_task_deaths,
                graph_sorter=graph_sorter,
                graph_inline_bytes=graph_inline_bytes,
            )
        )
        self._context = zmq.Context()
        self._router: Any = None
        self._storage: Any = None
        self._monitor: Any = None
        self._storage_process: Optional[multiprocessing.process.BaseProcess] = None
        self._subscribers = 0
        self._metrics_address = (metrics_host, metrics_port) if metrics_port is not None else None
        self._metrics: Any = None  # snapshot_metrics.MetricsServer while --metrics-port serves
        self._function_totals: Any = None  # snapshot_metrics.FunctionTotals, with --metrics-port
        self.latest_snapshot: Optional[Any] = None  # (StateSnapshot, per-function totals) for --metrics-port
        self._received: Counter = Counter()
        self._sent: Counter = Counter()
        self._stop: Optional[asyncio.Event] = None
        self._process = psutil.Process()

    # ----------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self._bind()
            self._serve_metrics()
            await self._connect_storage()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._stop.set)
            self._watch(self._router, self._on_router_frames)
            self._watch(self._storage, self._on_storage_frames)
            self._watch(self._monitor, self._on_monitor_frames)
            timers = [asyncio.ensure_future(self._every(_TICK_SECONDS, self._tick))]
            timers.append(asyncio.ensure_future(self._every(_SNAPSHOT_SECONDS, self._publish_snapshot)))
            logger.info("Scheduler: started")
            await self._stop.wait()
            for timer in timers:
                timer.cancel()
        finally:
            self._close()
            logger.info("Scheduler: stopped")

    def _bind(self) -> None:
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.SNDHWM, 0)
        self._router.setsockopt(zmq.RCVHWM, 0)
        self._router.setsockopt(zmq.LINGER, 0)
        self._bind_socket(self._router, self.address)
        logger.info(f"Scheduler: listen to scheduler address {self.address}")
        self._monitor = self._context.socket(zmq.XPUB)
        self._monitor.setsockopt(zmq.LINGER, 0)
        self._monitor.setsockopt(zmq.SNDHWM, 16)
        self._bind_socket(self._monitor, self.monitor_address)
        logger.info(f"Scheduler: listen to scheduler monitor address {self.monitor_address}")

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

    async def _connect_storage(self) -> None:
        address = self.object_storage_address
        logger.info(f"Scheduler: connect to object storage server {address}")
        if await self._storage_hello(_STORAGE_PROBE_SECONDS):
            return
        if self._storage_address_given:
            if await self._storage_hello(_STORAGE_START_SECONDS):
                return
            raise SchedulerStartError(f"no object storage server answered at {address}")
        logger.info(f"Scheduler: no object storage server at {address}, starting one")
        self._storage_process = start_object_storage_process(address)
        if not await self._storage_hello(_STORAGE_START_SECONDS):
            raise SchedulerStartError(f"the object storage server started at {address} did not answer")

    async def _storage_hello(self, timeout: float) -> bool:
        if self._storage is not None:
            self._storage.close(linger=0)
        self._storage = self._context.socket(zmq.DEALER)
        self._storage.setsockopt(zmq.LINGER, 0)
        self._storage.connect(self.object_storage_address)
        hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.SCHEDULER, os.getpid(), "", m.WorkerInfo())
        self._storage.send_multipart(codec.encode(hello))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._storage.poll(50):
                try:
                    reply, _ = codec.decode(self._storage.recv_multipart())
                except ProtocolError as error:
                    raise SchedulerStartError(f"object storage server sent a bad answer: {error}") from None
                if isinstance(reply, m.HelloAck):
                    reason = incompatibility(reply.version)
                    if reason is None:
                        return True
                    raise SchedulerStartError(f"object storage server: {reason}")
                if isinstance(reply, m.Refusal):
                    raise SchedulerStartError(f"object storage server refused the scheduler: {reply.reason}")
            await asyncio.sleep(0)
        return False

    def _close(self) -> None:
        loop = asyncio.get_event_loop()
        for socket in (self._router, self._storage, self._monitor):
            if socket is not None:
                try:
                    loop.remove_reader(socket.getsockopt(zmq.FD))
                except Exception:  # noqa: BLE001 - the loop may be closing already
                    pass
                socket.close(linger=0)
        self._context.term()
        if self._metrics is not None:
            self._metrics.close()
        if self._storage_process is not None:
            stop_process(self._storage_process)

    # ----------------------------------------------------------------- reading

    def _watch(self, socket: Any, on_frames: Callable[[List[bytes]], None]) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(socket.getsockopt(zmq.FD), self._drain, socket, on_frames)
        loop.call_soon(self._drain, socket, on_frames)

    def _drain(self, socket: Any, on_frames: Callable[[List[bytes]], None]) -> None:
        if socket.closed:
            return
        for _ in range(_BURST):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            on_frames(frames)
        asyncio.get_running_loop().call_soon(self._drain, socket, on_frames)

    def _on_router_frames(self, frames: List[bytes]) -> None:
        source = frames[0]
        try:
            # tasks and results are read only as far as routing needs; encode copies the rest through
            message, _ = codec.decode_routed(frames[1:])
        except ProtocolError as error:
            logger.warning(f"Scheduler: dropped malformed message from {show(source)}: {error}")
            return
        self._received[type(message).__name__] += 1
        try:
            effects = self.core.handle(source, message, time.monotonic())
        except Exception:  # one bad message must not stop the scheduler
            logger.exception(f"Scheduler: failed to handle {type(message).__name__} from {show(source)}")
            return
        self._perform(effects)

    def _on_storage_frames(self, frames: List[bytes]) -> None:
        try:
            message, _ = codec.decode(frames)
        except ProtocolError as error:
            logger.warning(f"Scheduler: dropped malformed message from object storage server: {error}")
            return
        if isinstance(message, m.Refusal):
            logger.error(f"Scheduler: object storage server refused a request: {message.reason}")

    def _on_monitor_frames(self, frames: List[bytes]) -> None:
        event = frames[0]
        if event[:1] == b"\x01":
            self._subscribers += 1
        elif event[:1] == b"\x00":
            self._subscribers = max(0, self._subscribers - 1)

    # ----------------------------------------------------------------- writing

    def _perform(self, effects: List[Any]) -> None:
        for effect in effects:
            if type(effect) is Send:
                self._send(effect.to, effect.message)
            elif type(effect) is Shutdown:
                logger.info(f"Scheduler: shutting down: {effect.reason}")
                # let the last messages leave before the sockets close
                asyncio.get_running_loop().call_later(0.5, self._stop.set)  # type: ignore[union-attr]

    def _send(self, to: bytes, message: Any) -> None:
        self._sent[type(message).__name__] += 1
        frames: Optional[List[Any]]
        try:
            frames = codec.encode(message)
        except ProtocolError as error:  # a task or result that came in malformed and cannot be copied on
            frames = self._encode_what_can_go(to, message, error)
            if frames is None:
                return
        if to == STORAGE:
            self._storage.send_multipart(frames, zmq.NOBLOCK)
        else:
            self._router.send_multipart([to, *frames], zmq.NOBLOCK)

    def _encode_what_can_go(self, to: bytes, message: Any, error: ProtocolError) -> Optional[List[Any]]:
        """Encode the items of a batch that can be copied on; a task that cannot is rejected (answered as if
        its worker had, so that the core ends it and tells its client why), a result that cannot becomes a
        failure naming the problem."""
        logger.warning(f"Scheduler: cannot forward all of a {type(message).__name__} to {show(to)}: {error}")
        batch_type = type(message)
        if batch_type not in (m.TaskBatch, m.TaskResultBatch):
            return None
        items = message.tasks if batch_type is m.TaskBatch else message.results
        good: List[Any] = []
        bad: List[m.TaskResult] = []
        for item in items:
            try:
                codec.encode(batch_type([item]))
                good.append(item)
            except ProtocolError as item_error:
                what = "task" if batch_type is m.TaskBatch else "result"
                why = f"the scheduler could not forward this {what}: {item_error}"
                status = m.TaskStatus.REJECTED if batch_type is m.TaskBatch else m.TaskStatus.FAILED
                bad.append(m.TaskResult(item.task_id, item.attempt, status, m.PayloadKind.NONE, b"", why))
        if batch_type is m.TaskBatch:
            self._perform(self.core.handle(to, m.TaskResultBatch(bad), time.monotonic()))
        else:
            good.extend(bad)
        return codec.encode(batch_type(good)) if good else None

    # ----------------------------------------------------------------- timers

    async def _every(self, seconds: float, action: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                action()
            except Exception:
                logger.exception(f"Scheduler: periodic {action.__name__} failed")

    def _tick(self) -> None:
        self._perform(self.core.tick(time.monotonic()))
        # sending can consume the file descriptor's edge: look for pending input ourselves
        self._drain(self._router, self._on_router_frames)

    def _publish_snapshot(self) -> None:
        """Nothing at all unless a monitor subscribes or --metrics-port serves."""
        if self._subscribers <= 0 and self._metrics is None:
            return
        snapshot = self.core.snapshot(time.monotonic())
        snapshot.scheduler_cpu = self._process.cpu_percent()
        snapshot.scheduler_rss_bytes = self._process.memory_info().rss
        snapshot.messages_sent = [m.Counter(k, v) for k, v in sorted(self._sent.items())]
        snapshot.messages_received = [m.Counter(k, v) for k, v in sorted(self._received.items())]
        if self._metrics is not None:
            self._function_totals.update(snapshot)
            self.latest_snapshot = (snapshot, self._function_totals.totals())
        if self._subscribers <= 0:
            return
        try:
            self._monitor.send_multipart(codec.encode(snapshot), zmq.NOBLOCK)
        except zmq.Again:
            pass


def start_object_storage_process(address: str) -> multiprocessing.process.BaseProcess:
    if importlib.util.find_spec("scaler.storage") is None:
        raise SchedulerStartError(
            f"no object storage server answers at {address} and scaler-storage is not installed to start one: "
            "pip install scaler-storage, or start scaler_object_storage_server and pass --object-storage-address"
        )
    process = multiprocessing.get_context("spawn").Process(
        target=_run_child_storage, args=(address,), name="ObjectStorageServer", daemon=True
    )
    process.start()
    return process


def _run_child_storage(address: str) -> None:
    from scaler.protocol.process_control import die_with_parent
    from scaler.storage.server import run_object_storage_server

    die_with_parent()
    run_object_storage_server(address)


def stop_process(process: multiprocessing.process.BaseProcess, timeout: float = 5.0) -> None:
    if process.is_alive():
        process.terminate()
        process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join(timeout)


def run_scheduler(
    address: str,
    event_loop: str = "auto",
    logging_level: str = "INFO",
    logging_paths: tuple = ("/dev/stdout",),
    **options: Any,
) -> None:
    """Run a scheduler until SIGTERM/SIGINT or an accepted client shutdown (blocking)."""
    from scaler.protocol.command_line import run_event_loop, setup_logging

    setup_logging(logging_level, logging_paths)
    server = SchedulerServer(address, **options)
    run_event_loop(server.run, event_loop)
