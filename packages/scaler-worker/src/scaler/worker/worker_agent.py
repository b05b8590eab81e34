"""The worker agent: the asyncio shell around `WorkerCore`.

It reads what arrives (the scheduler's and the storage server's messages, decoded here: a message that does
not decode is logged and dropped, `scaler.protocol.socket_reader`; what the task runner's host delivers; its
alarm; stop signals), hands each to `WorkerCore.handle`, and carries out the effects in order: send, connect
to storage, measure the CPU and memory for a heartbeat, exit, and the runner's own effects (through its
`RunnerHost`); then sets its alarm for the core's `next_wakeup` (`scaler.protocol.alarm`, the one wake-up
rule). It decides nothing itself. A failure while handling one event is logged and that event dropped.

By default the tasks run in a local processor (`local_processor`: `ProcessorRunner` + `ProcessorHost`) and
the peers are reached through ZeroMQ DEALER sockets (`ZmqConnect`); a program that embeds a worker may pass
its own (`WorkerAgent(config, connect=..., runner=...)`) and run it in its own event loop (``await
agent.run()``; ``handle_signals=False`` leaves its signals alone; `stop` ends it). `run_worker` runs one
in an event loop of its own, as ``scaler_worker`` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from scaler.protocol import codec, connection_events, delegation
from scaler.protocol import messages as m
from scaler.protocol.alarm import Alarm
from scaler.protocol.core_events import from_scheduler
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.ids import IDGenerator, new_worker_id, show
from scaler.protocol.security import peer_keys
from scaler.protocol.socket_reader import decoder
from scaler.worker.peer_connection import Connect, PeerConnection, ZmqConnect
from scaler.worker.processor_host import ProcessorHost
from scaler.worker.processor_protocol import TINY_TASKS_PIPELINE_DEPTH
from scaler.worker.processor_runner import ProcessorRunner
from scaler.worker.resource_usage import ProcessUsage
from scaler.worker.task_runner import RunnerHost, TaskRunner
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_core import WorkerCore
from scaler.worker.worker_events import (
    Broken,
    CallDone,
    CarryOutCall,
    ConnectionChanged,
    ConnectStorage,
    Exit,
    FromStorage,
    HandshakeFailed,
    MeasureUsage,
    SendToScheduler,
    SendToStorage,
    Start,
    StopRequested,
    Tick,
    UsageMeasured,
    WorkerIdentity,
)
from scaler.worker.worker_setup import (
    RecentLogs,
    processor_environment,
    run_function,
    save_upload,
    uploads_directory,
)

logger = logging.getLogger(__name__)

_DISCONNECT_LINGER_SECONDS = 1.0  # for the DisconnectRequest of a leaving worker to go

# (the worker's configuration, its ID as text, the key by which the Clients made in its tasks prove their task
# to the scheduler) -> the two halves of where its tasks run
RunnerFactory = Callable[[WorkerConfig, str, bytes], Tuple[TaskRunner, RunnerHost]]


def local_processor(config: WorkerConfig, worker_id: str, delegation_key: bytes) -> Tuple[TaskRunner, RunnerHost]:
    """Tasks run in a local processor subprocess (the default); their Clients use the worker's task key, and
    stand for the clients of the tasks they are made in; the processor is held to the worker's memory limit."""
    memory_limit = config.memory_limit_bytes()
    environment = {
        **config.security.task_environment(),
        **processor_environment(uploads_directory(worker_id), config.preload),
    }
    return (
        ProcessorRunner(memory_limit=memory_limit, tiny_tasks_depth=TINY_TASKS_PIPELINE_DEPTH),
        ProcessorHost(config.scheduler_address, worker_id, environment, delegation_key, memory_limit),
    )


class WorkerAgent:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        connect: Optional[Connect] = None,
        runner: RunnerFactory = local_processor,
        handle_signals: bool = True,
    ) -> None:
        self._config = config
        self._keys = peer_keys(config.security)  # SecurityError now, for key files it cannot use
        worker_id = new_worker_id()
        self._identity = WorkerIdentity(
            worker_id, os.getpid(), socket.gethostname(), IDGenerator(), delegation.new_key()
        )
        self._name = f"Worker {show(worker_id)}"
        if self._keys.secure and not config.security.task_environment():
            logger.warning(f"{self._name}: no task key (--task-key-file): a task that makes a Client is refused")
        task_runner, self._host = runner(config, show(worker_id), self._identity.delegation_key)
        self._core = WorkerCore(config, self._identity, task_runner)
        self._connect = connect
        self._handle_signals = handle_signals
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._exit: Optional[asyncio.Future] = None
        self._background: List[asyncio.Task] = []
        self._scheduler: Optional[PeerConnection] = None
        self._storage: Optional[PeerConnection] = None
        self._alarm = Alarm(self._ring)  # for the core's next_wakeup
        self._usage = ProcessUsage([self._identity.pid])
        self._uploads = uploads_directory(show(worker_id))  # Client.upload_file's files (worker_setup.py)
        self._logs = RecentLogs()  # Client.get_worker_logs, while it runs
        self._calls: Dict[m.WorkerCallKind, Callable[[m.WorkerCall], None]] = {
            m.WorkerCallKind.UPLOAD: self._save_upload,
            m.WorkerCallKind.RUN: self._run_function,
            m.WorkerCallKind.LOGS: self._tell_logs,
        }
        self._effect_handlers: Dict[type, Callable[[Any], None]] = {
            SendToScheduler: self._send_to_scheduler,
            SendToStorage: self._send_to_storage,
            ConnectStorage: self._connect_storage,
            MeasureUsage: self._measure_usage,
            Exit: self._on_exit,
            CarryOutCall: self._carry_out_call,
            **self._host.effect_handlers,
        }

    @property
    def worker_id(self) -> bytes:
        return self._identity.worker_id

    async def run(self) -> int:
        """Serve until the worker leaves; return its exit code (see `worker_events`)."""
        loop = self._loop = asyncio.get_running_loop()
        self._exit = loop.create_future()
        if self._handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, f"received {signal.Signals(sig).name}")
        own_connect = ZmqConnect(keys=self._keys) if self._connect is None else None
        connect = self._connect = self._connect or own_connect
        assert connect is not None
        try:
            os.mkdir(self._uploads, 0o700)  # before its name (the worker's ID) is told anyone: nobody else's
            logging.getLogger().addHandler(self._logs)
            self._host.open(loop, self._deliver)
            try:
                self._scheduler = connect(self._config.scheduler_address, self.worker_id, False)
            except DisconnectedError as error:
                self._deliver(Broken(f"cannot connect to scheduler: {error}"))
            else:
                self._deliver(Start())
                self._in_background(self._receive(self._scheduler, "scheduler"))
                self._in_background(self._watch(self._scheduler, False))
            return await self._exit
        finally:
            await self._shutdown()
            if own_connect is not None:
                own_connect.close()

    def stop(self, reason: str = "asked to stop") -> None:
        """Leave cleanly (call it in the worker's event loop)."""
        self._deliver(StopRequested(reason))

    # ------------------------------------------------------------------------- events in, effects out

    def _deliver(self, event: Any) -> None:
        """``event`` to the core and its effects carried out; never raises, so that no reader or timer that
        delivers stops (an effect that fails is logged and dropped, the next ones are carried out)."""
        try:
            effects = self._core.handle(event, time.monotonic())
        except Exception:
            logger.exception(f"{self._name}: failed to handle {_describe(event)}, dropped it")
            return
        handlers = self._effect_handlers
        for effect in effects:
            try:
                handlers[type(effect)](effect)
            except Exception:  # noqa: BLE001 - this effect alone is lost
                logger.exception(f"{self._name}: failed to carry out {type(effect).__name__}, dropped it")
        self._alarm.at(self._core.next_wakeup)

    async def _receive(self, connection: PeerConnection, peer: str) -> None:
        """Each message the connection reads (`socket_reader`, in bursts), decoded into its event; a malformed one
        is logged and dropped."""
        deliver = self._deliver
        to_event = decoder(from_scheduler if peer == "scheduler" else FromStorage, self._name, peer)
        while True:
            event = to_event(await connection.receive())
            if event is not None:
                deliver(event)

    async def _watch(self, connection: PeerConnection, to_storage: bool) -> None:
        while True:
            change = await connection.change()
            if change == connection_events.REFUSED and connection.refusal is not None:
                self._deliver(HandshakeFailed(connection.refusal, to_storage))
            else:
                self._deliver(ConnectionChanged(to_storage, change))

    def _in_background(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        task.add_done_callback(self._check_background)
        self._background.append(task)

    def _check_background(self, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        logger.error(f"{self._name}: internal error", exc_info=error)
        self._deliver(Broken(f"internal error: {type(error).__name__}: {error}"))

    # ------------------------------------------------------------------------- effects

    def _send_to_scheduler(self, effect: SendToScheduler) -> None:
        self._send(self._scheduler, codec.encode(effect.message), "scheduler")

    def _send_to_storage(self, effect: SendToStorage) -> None:
        self._send(self._storage, codec.encode(effect.message, effect.blobs), "object storage")

    def _send(self, connection: Optional[PeerConnection], frames: List[Any], peer: str) -> None:
        if connection is None:
            logger.warning(f"{self._name}: dropped a message for the {peer}: not connected to it")
            return
        connection.send(frames)

    def _connect_storage(self, effect: ConnectStorage) -> None:
        assert self._loop is not None and self._connect is not None
        try:
            self._storage = self._connect(effect.address, self.worker_id, True)
        except DisconnectedError as error:
            why = f"cannot connect to object storage {effect.address!r}: {error}"
            self._loop.call_soon(self._deliver, Broken(why))
            return
        self._in_background(self._receive(self._storage, "object storage"))
        self._in_background(self._watch(self._storage, True))

    def _measure_usage(self, effect: MeasureUsage) -> None:
        assert self._loop is not None
        agent_cpu, agent_rss = self._usage.sample()
        runner_cpu, runner_rss = self._host.usage()
        self._loop.call_soon(self._deliver, UsageMeasured(agent_cpu, agent_rss, runner_cpu, runner_rss))

    def _ring(self) -> None:
        self._deliver(Tick())

    def _carry_out_call(self, effect: CarryOutCall) -> None:
        self._calls[effect.call.kind](effect.call)

    def _save_upload(self, call: m.WorkerCall) -> None:
        problem = save_upload(self._uploads, call.name, call.payload)
        result = m.WorkerCallResult(call.call_id, call.client_id, b"", problem is None, b"", problem or "")
        self._answer_call(CallDone(result, uploaded=True))

    def _run_function(self, call: m.WorkerCall) -> None:
        """On a thread of its own: it may take its time, and the worker goes on meanwhile."""
        loop = self._loop
        assert loop is not None

        def run() -> None:
            success, payload, error = run_function(self._uploads, call.payload)
            result = m.WorkerCallResult(call.call_id, call.client_id, b"", success, payload, error)
            try:
                loop.call_soon_threadsafe(self._deliver, CallDone(result))
            except RuntimeError:  # the worker has left meanwhile
                pass

        threading.Thread(target=run, name="scaler-worker-run", daemon=True).start()

    def _tell_logs(self, call: m.WorkerCall) -> None:
        import cloudpickle

        lines = cloudpickle.dumps(list(self._logs.lines))
        self._answer_call(CallDone(m.WorkerCallResult(call.call_id, call.client_id, b"", True, lines)))

    def _answer_call(self, done: CallDone) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._deliver, done)

    def _on_exit(self, effect: Exit) -> None:
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(effect.code)

    # ------------------------------------------------------------------------- leaving

    async def _shutdown(self) -> None:
        self._alarm.cancel()
        for task in self._background:
            task.cancel()
        for task in self._background:
            try:
                await task
            except BaseException:
                pass
        self._background.clear()
        await self._host.close()
        shutil.rmtree(self._uploads, ignore_errors=True)
        logging.getLogger().removeHandler(self._logs)
        if self._storage is not None:
            self._storage.close(0)
        if self._scheduler is not None:
            self._scheduler.close(_DISCONNECT_LINGER_SECONDS)
        if self._loop is not None and self._handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.remove_signal_handler(sig)


def _describe(event: Any) -> str:
    message = getattr(event, "message", None)
    if message is None:
        return type(event).__name__
    return f"{type(message).__name__} ({type(event).__name__})"


def run_worker(config: WorkerConfig) -> int:
    """Run one worker agent in an event loop of its own until it leaves; return its exit code. Blocks."""
    from scaler.protocol.command_line import run_event_loop
    from scaler.protocol.process_control import reuse_payload_memory

    reuse_payload_memory()
    agent = WorkerAgent(config)
    return run_event_loop(agent.run, config.event_loop)
