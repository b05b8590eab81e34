"""The worker agent: the asyncio/ZeroMQ shell around `WorkerState`.

It connects a DEALER socket (identity: the worker ID) to the scheduler and,
once the scheduler's HelloAck names it, another to the object storage server;
it heartbeats, starts and watches the processor, and carries out the effects
that `WorkerState` decides. Everything it receives is decoded and handed to
the core through a table keyed by message type; a message that does not
decode, or whose handling fails, is logged with its sender and dropped.

`WorkerAgent.run()` returns the process exit code (see `worker_config`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket as host
import time
from typing import Any, Callable, Dict, List, Optional

import zmq
import zmq.asyncio

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.errors import DisconnectedError, ProtocolError
from scaler.protocol.ids import new_worker_id, show
from scaler.protocol.version import PROTOCOL_VERSION, show_version
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.resource_usage import ResourceUsage
from scaler.worker.worker_config import EXIT_FAILURE, EXIT_OK, EXIT_REFUSED, WorkerConfig
from scaler.worker.worker_state import (
    SendToProcessor,
    SendToScheduler,
    SendToStorage,
    StartProcessor,
    StartTaskTimer,
    WorkerState,
)

logger = logging.getLogger(__name__)

_DISCONNECT_LINGER_MILLISECONDS = 1000
_PROCESSOR_STOP_SECONDS = 2.0
# results wait at most this long, or for this many others, while more tasks are queued here
_RESULT_BATCH_SECONDS = 0.005
_RESULT_BATCH_SIZE = 256


class WorkerAgent:
    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self._worker_id = new_worker_id()
        self._name = f"Worker {show(self._worker_id)}"
        self._state = WorkerState(
            inline_threshold_bytes=config.task_inline_threshold,
            storage_timeout_seconds=config.worker_timeout_seconds,
        )
        self._context: Optional[zmq.asyncio.Context] = None
        self._scheduler: Optional[zmq.asyncio.Socket] = None
        self._storage: Optional[zmq.asyncio.Socket] = None
        self._storage_address = ""
        self._storage_accepted = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._exit: Optional[asyncio.Future] = None
        self._background: List[asyncio.Task] = []
        self._processor: Optional[ProcessorLink] = None
        self._usage = ResourceUsage()
        self._flush_scheduled = False
        self._deferred_flush: Optional[asyncio.TimerHandle] = None
        self._connected = False
        self._last_heard = time.monotonic()
        self._heartbeat_interval = config.heartbeat_interval_seconds
        self._scheduler_handlers: Dict[type, Callable[[Any], None]] = {
            m.HelloAck: self._on_hello_ack,
            m.Refusal: self._on_scheduler_refusal,
            m.WorkerHeartbeatEcho: self._on_heartbeat_echo,
            m.DisconnectRequest: self._on_disconnect_request,
            m.DisconnectResponse: self._on_heartbeat_echo,  # the answer to our own leaving: nothing to do
        }
        self._storage_handlers: Dict[type, Callable[[Any, List[bytes]], None]] = {
            m.ObjectResponse: self._on_object_response,
            m.HelloAck: self._on_storage_hello_ack,
            m.Refusal: self._on_storage_refusal,
        }
        self._effect_handlers: Dict[type, Callable[[Any], None]] = {
            SendToScheduler: self._send_to_scheduler,
            SendToStorage: self._send_to_storage,
            StartProcessor: self._start_processor,
            SendToProcessor: self._send_to_processor,
            StartTaskTimer: self._start_task_timer,
        }

    @property
    def worker_id(self) -> bytes:
        return self._worker_id

    # ------------------------------------------------------------------------- life cycle

    async def run(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._exit = self._loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self._on_stop_signal, sig)
        config = self._config
        logger.info(
            f"{self._name}: connecting to scheduler {config.scheduler_address}, "
            f"capabilities={','.join(c.name for c in config.capabilities) or 'none'}, "
            f"queue_capacity={config.queue_capacity}, "
            f"heartbeat_interval_seconds={config.heartbeat_interval_seconds:g}, "
            f"worker_timeout_seconds={config.worker_timeout_seconds:g}, "
            f"task_inline_threshold={config.task_inline_threshold}"
        )
        self._context = zmq.asyncio.Context()
        try:
            self._scheduler = self._connect(config.scheduler_address, self._worker_id)
            self._send_to_scheduler(SendToScheduler(self._hello()))
            self._perform(self._state.start())
            self._in_background(self._receive(self._scheduler, self._on_scheduler_frames))
            self._in_background(self._wait_for_hello_ack())
            return await self._exit
        finally:
            await self._shutdown()

    def _in_background(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        task.add_done_callback(self._check_background)
        self._background.append(task)

    def _check_background(self, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        logger.error(f"{self._name}: internal error", exc_info=error)
        self._stop(EXIT_FAILURE, f"internal error: {type(error).__name__}: {error}")

    def _stop(self, code: int, why: str, say_goodbye: bool = True) -> None:
        """Make `run` return ``code``; unless the scheduler sent us away, tell it we leave (our tasks go
        elsewhere at once instead of after the worker timeout)."""
        if self._exit is None or self._exit.done():
            return
        log = logger.info if code == EXIT_OK else logger.error
        log(f"{self._name}: {why}, exiting")
        self._flush()
        if say_goodbye and self._connected:
            self._send_to_scheduler(SendToScheduler(m.DisconnectRequest(f"worker {why}")))
        self._exit.set_result(code)

    def _on_stop_signal(self, sig: int) -> None:
        self._stop(EXIT_OK, f"received {signal.Signals(sig).name}")

    async def _shutdown(self) -> None:
        for task in self._background:
            task.cancel()
        for task in self._background:
            try:
                await task
            except BaseException:
                pass
        self._background.clear()
        await self._stop_processor()
        if self._storage is not None:
            self._storage.close(linger=0)
        if self._scheduler is not None:
            self._scheduler.close(linger=_DISCONNECT_LINGER_MILLISECONDS)
        if self._context is not None:
            self._context.term()
        if self._loop is not None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.remove_signal_handler(sig)

    async def _stop_processor(self) -> None:
        link, self._processor = self._processor, None
        if link is None:
            return
        self._unwatch(link)
        link.terminate()
        deadline = time.monotonic() + _PROCESSOR_STOP_SECONDS
        while link.reap() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if link.reap() is None:
            link.kill()
            link.reap(_PROCESSOR_STOP_SECONDS)

    # ------------------------------------------------------------------------- sockets

    def _connect(self, address: str, identity: bytes) -> zmq.asyncio.Socket:
        assert self._context is not None
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.SNDHWM, 0)  # sends never wait on a peer: our own rates bound the queue
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(address)
        return sock

    def _hello(self) -> m.Hello:
        info = m.WorkerInfo(slots=1, queue_capacity=self._config.queue_capacity, capabilities=self._config.capabilities)
        return m.Hello(PROTOCOL_VERSION, m.PeerRole.WORKER, os.getpid(), host.gethostname(), info)

    async def _receive(self, sock: zmq.asyncio.Socket, on_frames: Callable[[List[Any]], None], copy: bool = True):
        while True:
            frames = await sock.recv_multipart(copy=copy)
            on_frames(frames)
            self._schedule_flush()

    def _send(self, sock: Optional[zmq.asyncio.Socket], frames: List[Any], peer: str) -> None:
        if sock is None:
            logger.warning(f"{self._name}: dropped a message for the {peer}: not connected to it")
            return
        sent: Any = sock.send_multipart(frames, copy=False)  # an asyncio Future with zmq.asyncio
        sent.add_done_callback(lambda future: self._check_sent(future, peer))

    def _check_sent(self, future: asyncio.Future, peer: str) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            logger.warning(f"{self._name}: could not send to the {peer}: {error}")

    def _send_to_scheduler(self, effect: SendToScheduler) -> None:
        self._send(self._scheduler, codec.encode(effect.message), "scheduler")

    def _send_to_storage(self, effect: SendToStorage) -> None:
        self._send(self._storage, codec.encode(effect.message, effect.blobs), "object storage")

    # ------------------------------------------------------------------------- the scheduler

    def _on_scheduler_frames(self, frames: List[bytes]) -> None:
        try:
            message, _ = codec.decode(frames)
        except ProtocolError as error:
            logger.warning(f"{self._name}: dropped malformed message from scheduler: {error}")
            return
        self._last_heard = time.monotonic()
        message_type = type(message)
        try:
            handler = self._scheduler_handlers.get(message_type)
            if handler is not None:
                handler(message)
            elif self._state.handles(message_type):
                if not self._connected:
                    logger.warning(f"{self._name}: dropped {message_type.__name__} from scheduler before HelloAck")
                    return
                self._perform(self._state.on_scheduler_message(message))
            else:
                logger.warning(f"{self._name}: dropped unexpected {message_type.__name__} from scheduler")
        except Exception:
            logger.exception(f"{self._name}: failed to handle {message_type.__name__} from scheduler, dropped it")

    async def _wait_for_hello_ack(self) -> None:
        await asyncio.sleep(self._config.worker_timeout_seconds)
        if not self._connected:
            self._stop(
                EXIT_FAILURE,
                f"no answer from scheduler {self._config.scheduler_address} "
                f"within {self._config.worker_timeout_seconds:g} seconds",
            )

    def _on_hello_ack(self, ack: m.HelloAck) -> None:
        if self._connected:
            logger.warning(f"{self._name}: dropped a second HelloAck from scheduler")
            return
        self._connected = True
        if 0 < ack.heartbeat_interval_seconds < self._heartbeat_interval:
            self._heartbeat_interval = ack.heartbeat_interval_seconds
        storage_address = ack.object_storage_address
        if not storage_address:
            storage_address = default_storage_address(self._config.scheduler_address)
            logger.warning(f"{self._name}: scheduler named no object storage server, using {storage_address}")
        self._storage_address = storage_address
        try:
            self._storage = self._connect(storage_address, self._worker_id)
        except zmq.ZMQError as error:
            self._stop(EXIT_FAILURE, f"cannot connect to object storage {storage_address!r}: {error}")
            return
        self._send_to_storage(SendToStorage(self._hello()))
        self._in_background(self._receive(self._storage, self._on_storage_frames, copy=False))
        self._in_background(self._heartbeat())
        logger.info(
            f"{self._name}: connected to scheduler {self._config.scheduler_address} "
            f"(protocol {show_version(ack.version)}), object storage {storage_address}"
        )

    def _on_scheduler_refusal(self, refusal: m.Refusal) -> None:
        if self._connected:  # it accepted us before: it restarted and forgot us; a new worker will say Hello
            self._stop(EXIT_FAILURE, f"scheduler no longer knows us: {refusal.reason}", say_goodbye=False)
            return
        reason = f"refused by scheduler (protocol {show_version(refusal.version)}): {refusal.reason}"
        self._stop(EXIT_REFUSED, reason, say_goodbye=False)

    def _on_heartbeat_echo(self, message: Any) -> None:
        pass  # hearing from the scheduler is all that matters, and _last_heard is already updated

    def _on_disconnect_request(self, request: m.DisconnectRequest) -> None:
        reason = f"scheduler asked us to leave: {request.reason or 'no reason given'}"
        self._stop(EXIT_OK, reason, say_goodbye=False)

    async def _heartbeat(self) -> None:
        while True:
            now = time.monotonic()
            silence = now - self._last_heard
            if silence > self._config.worker_timeout_seconds:
                self._stop(EXIT_FAILURE, f"nothing heard from scheduler for {silence:.0f} seconds")
                return
            agent_cpu, agent_rss = self._usage.agent()
            processor_cpu, processor_rss = self._usage.processors()
            heartbeat = m.WorkerHeartbeat(
                agent_cpu=agent_cpu,
                agent_rss_bytes=agent_rss,
                processor_cpu=processor_cpu,
                processor_rss_bytes=processor_rss,
                queued_tasks=self._state.queued_count,
                running_tasks=self._state.running_count,
                suspended_tasks=self._state.suspended_count,
                functions=self._state.function_stats.report(),
            )
            self._send_to_scheduler(SendToScheduler(heartbeat))
            self._perform(self._state.on_tick(now))
            self._schedule_flush()
            await asyncio.sleep(self._heartbeat_interval)

    # ------------------------------------------------------------------------- the storage server

    def _on_storage_frames(self, frames: List[zmq.Frame]) -> None:
        try:
            message, blobs = codec.decode(frames)
        except ProtocolError as error:
            logger.warning(f"{self._name}: dropped malformed message from object storage: {error}")
            return
        blobs = codec.received_blobs(blobs)  # a large payload crosses the Pipe from the frame it arrived in
        handler = self._storage_handlers.get(type(message))
        if handler is None:
            logger.warning(f"{self._name}: dropped unexpected {type(message).__name__} from object storage")
            return
        try:
            handler(message, blobs)
        except Exception:
            logger.exception(f"{self._name}: failed to handle {type(message).__name__} from object storage, dropped it")

    def _on_object_response(self, response: m.ObjectResponse, blobs: List[bytes]) -> None:
        self._perform(self._state.on_object_response(response, blobs))

    def _on_storage_hello_ack(self, ack: m.HelloAck, blobs: List[bytes]) -> None:
        self._storage_accepted = True
        logger.debug(f"{self._name}: object storage {self._storage_address} accepted us")

    def _on_storage_refusal(self, refusal: m.Refusal, blobs: List[bytes]) -> None:
        if not self._storage_accepted:  # our Hello itself was refused: an incompatible server
            self._stop(EXIT_REFUSED, f"refused by object storage {self._storage_address}: {refusal.reason}")
            return
        # one of our requests was refused (its tasks fail when it times out), or the server restarted and
        # forgot us: saying Hello again costs nothing and covers the second case
        logger.warning(f"{self._name}: object storage {self._storage_address} refused a message: {refusal.reason}")
        self._send_to_storage(SendToStorage(self._hello()))

    # ------------------------------------------------------------------------- processors

    def _start_processor(self, effect: StartProcessor) -> None:
        old, self._processor = self._processor, None
        if old is not None:  # it runs tasks that are over (cancelled, timed out): SIGKILL, user code may ignore less
            self._unwatch(old)
            old.kill()
            self._reap_later(old)
            logger.debug(f"{self._name}: stopped processor {old.processor_id} (pid {old.pid})")
        try:
            link = ProcessorLink.start(effect.processor_id, self._config.scheduler_address, show(self._worker_id))
        except Exception as error:  # out of processes or memory: a fresh worker (from scaler_cluster) may fare better
            self._stop(EXIT_FAILURE, f"cannot start a processor: {type(error).__name__}: {error}")
            return
        self._processor = link
        assert self._loop is not None
        self._loop.add_reader(link.connection.fileno(), self._on_processor_readable, link)
        self._loop.add_reader(link.sentinel, self._on_processor_ended, link)
        if link.pid is not None:
            self._usage.watch_processor(link.pid)
        logger.debug(f"{self._name}: started processor {effect.processor_id} (pid {link.pid})")

    def _unwatch(self, link: ProcessorLink) -> None:
        assert self._loop is not None
        try:
            self._loop.remove_reader(link.connection.fileno())
            self._loop.remove_writer(link.connection.fileno())
        except (OSError, ValueError):  # already closed
            pass
        try:
            self._loop.remove_reader(link.sentinel)
        except (OSError, ValueError):
            pass
        if link.pid is not None:
            self._usage.forget_processor(link.pid)

    def _reap_later(self, link: ProcessorLink) -> None:
        """Release a processor we killed once the kernel says it has ended."""
        assert self._loop is not None
        loop = self._loop
        sentinel = link.sentinel

        def reap() -> None:
            loop.remove_reader(sentinel)
            link.reap()

        loop.add_reader(sentinel, reap)

    def _send_to_processor(self, effect: SendToProcessor) -> None:
        link = self._processor
        if link is None or link.processor_id != effect.processor_id:  # it could not be started: we are stopping
            return
        try:
            if not link.send(effect.message) and self._loop is not None:
                self._loop.add_writer(link.connection.fileno(), self._on_processor_writable, link)
        except DisconnectedError as error:
            logger.warning(f"{self._name}: {error}; waiting for its end to be reported")

    def _on_processor_writable(self, link: ProcessorLink) -> None:
        """The rest of a large message goes once the processor has read the start of it."""
        assert self._loop is not None
        try:
            done = link.flush()
        except DisconnectedError as error:
            logger.warning(f"{self._name}: {error}; waiting for its end to be reported")
            done = True
        if done:
            self._loop.remove_writer(link.connection.fileno())

    def _start_task_timer(self, effect: StartTaskTimer) -> None:
        assert self._loop is not None
        self._loop.call_later(effect.seconds, self._on_task_timer, effect.task_id, effect.run)

    def _on_task_timer(self, task_id: bytes, run: int) -> None:
        self._perform(self._state.on_task_timer(task_id, run))
        self._schedule_flush()

    def _on_processor_readable(self, link: ProcessorLink) -> None:
        # every whole message readable now, handled as one (a large one may take several calls to arrive)
        try:
            messages = link.receive_all()
        except DisconnectedError:
            assert self._loop is not None
            self._loop.remove_reader(link.connection.fileno())  # its sentinel reports the end
            return
        except Exception:  # a message that does not unpickle: a bug, not a reason to stop serving
            logger.exception(f"{self._name}: dropped unreadable message from processor {link.processor_id}")
            return
        if not messages:
            return
        message: Any = messages[0]
        if len(messages) > 1:
            message = [each for one in messages for each in (one if type(one) is list else (one,))]
        try:
            self._perform(self._state.on_processor_message(link.processor_id, message))
        except Exception:
            logger.exception(f"{self._name}: failed to handle {type(message).__name__} from processor, dropped it")
        self._schedule_flush()

    def _on_processor_ended(self, link: ProcessorLink) -> None:
        if self._processor is not link:
            return
        last_messages = link.receive_left()  # results it wrote before it ended count
        self._unwatch(link)
        self._processor = None
        cause = link.reap(_PROCESSOR_STOP_SECONDS) or "processor ended for an unknown reason"
        effects = self._state.on_processor_died(link.processor_id, cause, last_messages)
        logger.warning(f"{self._name}: {cause} (processor {link.processor_id}, pid {link.pid})")
        self._perform(effects)
        self._schedule_flush()

    # ------------------------------------------------------------------------- effects

    def _perform(self, effects: List[Any]) -> None:
        handlers = self._effect_handlers
        for effect in effects:
            handlers[type(effect)](effect)

    def _schedule_flush(self) -> None:
        """Send what the core collected at the end of this loop turn; only results, while more tasks wait
        here, may wait a few milliseconds for company (fewer, larger batches for the scheduler and client)."""
        if self._flush_scheduled or self._loop is None:
            return
        state = self._state
        if not state.has_output:
            return
        if (
            state.has_only_results
            and state.queued_count > 0
            and state.pending_result_count < _RESULT_BATCH_SIZE
            and self._exit is not None
            and not self._exit.done()
        ):
            if self._deferred_flush is None:
                self._deferred_flush = self._loop.call_later(_RESULT_BATCH_SECONDS, self._flush)
            return
        self._flush_scheduled = True
        self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._deferred_flush is not None:
            self._deferred_flush.cancel()
            self._deferred_flush = None
        self._perform(self._state.flush(time.monotonic()))


def run_worker(config: WorkerConfig) -> int:
    """Run one worker agent until it is told to stop; return its exit code. Blocks."""
    from scaler.protocol.command_line import run_event_loop
    from scaler.protocol.process_control import reuse_payload_memory

    reuse_payload_memory()
    agent = WorkerAgent(config)
    return run_event_loop(agent.run, config.event_loop)
