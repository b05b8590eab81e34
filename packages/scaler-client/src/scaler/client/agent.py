"""The client's agent thread: the only code that touches the scheduler and storage sockets.

User threads hand it events (`client_events.py`) through a deque and wake it through an inproc socket
(only when it is not already awake). Its loop polls the scheduler DEALER, the storage DEALER, the socket
monitor of each (`scaler.protocol.connection_events`: their connections' changes; a handshake refused
over keys becomes a `HandshakeFailed` event) and the wake-up socket,
feeds what arrives to the sans-I/O `ClientCore`, one event per command, received message or connection
change, then a `Tick`, and performs each returned effect: sends, and the ends of tasks and commands, named
by ID. The agent keeps the futures those IDs name (the core holds none). When the core says so
(`RenewConnection`: the scheduler's connection was lost), the scheduler socket is closed and a new one
connects, so that nothing queued on the lost one reaches the scheduler before the next Hello. Sockets close
with linger 0; every wait is bounded.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

import zmq

from scaler.client.client_core import ClientCore
from scaler.client.client_events import (
    TICK,
    Abort,
    CancelRefused,
    Connect,
    ConnectionChanged,
    ConnectStorage,
    Disconnect,
    Event,
    FromStorage,
    HandshakeFailed,
    Heartbeat,
    ObjectsFailed,
    RenewConnection,
    Reply,
    ReplyError,
    ResolveInputs,
    Stopped,
    TaskCancelled,
    TaskFailed,
    TaskPrinted,
    TaskResults,
    TaskRunsArrived,
    ToScheduler,
    ToStorage,
)
from scaler.client.future import ScalerFuture
from scaler.client.task_inputs import inputs_ended
from scaler.client.task_output import OutputPrinter
from scaler.protocol import codec, connection_events
from scaler.protocol.connection_events import ConnectionWatch
from scaler.protocol.core_events import from_scheduler
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.messages import ClientHeartbeat, Version
from scaler.protocol.security import NO_KEYS, Keys, new_socket
from scaler.protocol.socket_reader import SocketReader, decoder

logger = logging.getLogger(__name__)

_MAX_MESSAGES_PER_SOCKET = 1000  # per loop turn, so one busy peer cannot starve the others
_PEERS = {False: "scheduler", True: "object storage server"}


class ClientAgent:
    def __init__(
        self,
        client_id: bytes,
        address: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        disconnect_wait_seconds: float,
        on_objects_failed: Callable[[Optional[List[bytes]]], None] = lambda object_ids: None,
        keys: Keys = NO_KEYS,
        made_in: Tuple[bytes, bytes] = (b"", b""),
        reconnect_seconds: float = 0.0,
    ) -> None:
        self._client_id = client_id
        self._address = address
        self._keys = keys
        self._on_objects_failed = on_objects_failed
        self._core = ClientCore(
            client_id, address, timeout_seconds, heartbeat_interval_seconds, os.getpid(), socket.gethostname(),
            disconnect_wait_seconds=disconnect_wait_seconds, made_in=made_in, reconnect_seconds=reconnect_seconds,
        )  # fmt: skip
        self._events: Deque[Event] = collections.deque()
        self._futures: Dict[bytes, ScalerFuture] = {}  # task ID -> its future, until the core ends the task
        self._replies: Dict[int, concurrent.futures.Future] = {}  # command ID -> its caller's future
        self._command_ids = itertools.count(1)
        self._lock = threading.Lock()  # guards _wake_pending, _closed_error and the wake-up sender
        self._wake_pending = False
        self._closed_error: Optional[Exception] = None
        self._stopped: Optional[Stopped] = None
        self._leaving = False  # the user disconnects: what its tasks still wait for is given up, they end cancelled
        self._usage = _ProcessUsage()
        self._context = zmq.Context()
        self._wake_address = f"inproc://scaler-client-wake-{os.urandom(8).hex()}"
        self._wake_sender = self._context.socket(zmq.PAIR)  # user side: used only under _lock
        self._wake_sender.setsockopt(zmq.LINGER, 0)
        self._wake_sender.connect(self._wake_address)
        self._scheduler = new_socket(self._context, zmq.DEALER, keys)
        self._storage: Optional[zmq.Socket] = None
        self._storage_address = ""
        self.scheduler_version = Version(0, 0)  # once connected, the scheduler's protocol version
        self.heartbeat_seconds = 1.0  # once connected, the heartbeat interval the scheduler gives its peers
        self._task_streams: Tuple[Any, ...] = ()  # the open ones (task_stream.py), replaced whole under _lock
        self._watches: Dict[Any, Tuple[ConnectionWatch, bool]] = {}  # monitor socket -> (its watch, storage?)
        self._poller = zmq.Poller()
        self._readers: List[SocketReader] = []  # of the scheduler's socket, then the storage server's
        self._monitors: List[SocketReader] = []  # of their socket monitors
        self._perform: Dict[type, Callable[[Any], Any]] = {
            ToScheduler: self._send_to_scheduler,
            ToStorage: self._send_to_storage,
            ConnectStorage: self._connect_storage,
            RenewConnection: self._renew_connection,
            Heartbeat: self._send_heartbeat,
            TaskRunsArrived: self._give_runs,
            TaskResults: self._give_results,
            TaskPrinted: self._print,
            TaskFailed: self._fail_future,
            TaskCancelled: self._cancel_future,
            CancelRefused: self._tell_cancel_refused,
            ResolveInputs: self._resolve_inputs,
            Reply: self._give_reply,
            ReplyError: self._give_reply_error,
            ObjectsFailed: self._objects_failed,
            Stopped: self._on_stopped,
        }
        self._printer = OutputPrinter()
        self._thread = threading.Thread(target=self._run, name="ScalerClientAgent", daemon=True)

    # --- user-thread API --------------------------------------------------------------------------------

    def connect(self, timeout_seconds: float, bounded_wait: float) -> None:
        """Start the thread and wait for the scheduler's HelloAck: `DisconnectedError` when none comes within
        ``timeout_seconds``, the handshake's error (`ProtocolError`) when the scheduler refuses."""
        ready = self.ask(Connect)
        self._thread.start()
        try:
            ack = ready.result(timeout=timeout_seconds + 5)
            self.scheduler_version = ack.version
            self.heartbeat_seconds = ack.heartbeat_interval_seconds or self.heartbeat_seconds
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError on 3.10
            problem = f"no scheduler answered at {self._address} within {timeout_seconds:g}s"
            self.abort(DisconnectedError(problem))
            raise DisconnectedError(problem) from None
        except BaseException:  # refused, or interrupted while waiting
            self.abort(DisconnectedError("the client stopped before the scheduler answered"))
            self.join(bounded_wait)
            raise

    def send(self, event: Event, futures: Optional[Mapping[bytes, ScalerFuture]] = None) -> None:
        """Queue ``event`` for the agent thread, with the futures of the tasks it submits (by task ID).
        DisconnectedError when the client is closed."""
        with self._lock:
            if self._closed_error is not None:
                raise DisconnectedError(str(self._closed_error))
            if futures:
                self._futures.update(futures)
            self._events.append(event)
            if not self._wake_pending:
                try:
                    self._wake_sender.send(b"", zmq.NOBLOCK)
                    self._wake_pending = True
                except zmq.Again:  # not bound yet: the agent drains the queue once it has bound
                    pass

    def ask(self, command: Callable[..., Event], *args: Any) -> concurrent.futures.Future:
        """Queue ``command(command_id, *args)``; the returned future resolves with the core's reply."""
        reply: concurrent.futures.Future = concurrent.futures.Future()
        command_id = next(self._command_ids)
        self._replies[command_id] = reply
        try:
            self.send(command(command_id, *args))
        except DisconnectedError:
            self._replies.pop(command_id, None)
            raise
        return reply

    def disconnect(self) -> concurrent.futures.Future:
        """Ask for a graceful disconnect; resolves when done (at once when already closed). The futures still
        pending end cancelled."""
        self._leaving = True
        try:
            return self.ask(Disconnect)
        except DisconnectedError:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(None)
            return done

    def abort(self, error: Exception) -> None:
        try:
            self.send(Abort(error))
        except DisconnectedError:
            pass

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed_error is not None

    def watch_tasks(self, stream: Any, watching: bool) -> None:
        """Hand ``stream`` (task_stream.py) the runs and the ends of this client's tasks from now on, or no more."""
        with self._lock:
            others = tuple(each for each in self._task_streams if each is not stream)
            self._task_streams = (*others, stream) if watching else others

    def in_agent_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # --- agent thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        """Each turn: take the user's events and what the peers sent, hand each to the core and then a Tick,
        perform every effect in order; wait (bounded) for more. Until the core says it stopped."""
        core, perform, poller = self._core, self._perform, self._poller
        wake = self._context.socket(zmq.PAIR)
        wake.setsockopt(zmq.LINGER, 0)
        turn: List[Event] = []  # this turn's events, in order
        ready: Dict[Any, int] = {}
        woken = SocketReader(wake)
        wake_ups: List[Any] = []
        try:
            wake.bind(self._wake_address)
            self._connect_scheduler()
            poller.register(wake, zmq.POLLIN)
            while True:
                if wake in ready:
                    while woken.read(wake_ups):
                        wake_ups.clear()
                    wake_ups.clear()  # they say nothing but "wake up"
                    with self._lock:
                        self._wake_pending = False
                events = self._events
                while events:
                    turn.append(events.popleft())
                for reader in (*self._readers, *self._monitors):  # messages first, then connection changes
                    if reader.socket in ready:
                        reader.read(turn)
                turn.append(TICK)
                now = time.monotonic()
                for event in turn:
                    try:
                        effects = core.handle(event, now)
                    except Exception:  # a bug: one event is lost, not the client
                        logger.exception(f"Client: handling {type(event).__name__} failed; dropped it")
                        continue
                    for effect in effects:
                        try:
                            perform[type(effect)](effect)
                        except Exception:
                            logger.exception(f"Client: performing {type(effect).__name__} failed")
                turn.clear()
                if self._stopped is not None:
                    break
                ready = dict(poller.poll(max(1, int(min(core.next_wakeup - time.monotonic(), 1.0) * 1000))))
        except Exception as error:  # a bug here must still end every future
            logger.exception("Client: agent thread failed")
            self._events.appendleft(
                Abort(DisconnectedError(f"the client's agent thread failed: {type(error).__name__}: {error}"))
            )
        finally:
            self._close(wake)

    # --- effects -----------------------------------------------------------------------------------------

    def _connect_scheduler(self) -> None:
        self._connect(self._scheduler, self._address, False)

    def _connect(self, sock: zmq.Socket, address: str, to_storage: bool) -> None:
        """Connect a DEALER of this client's identity to ``address``, watched and polled."""
        sock.setsockopt(zmq.IDENTITY, self._client_id)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        self._watch(sock, to_storage)
        sock.connect(address)
        self._poller.register(sock, zmq.POLLIN)
        # large results are read where they arrived; a burst per socket and turn, so one busy peer cannot starve
        # the others
        to_event = decoder(_from_storage if to_storage else from_scheduler, "Client", _PEERS[to_storage])
        reader = SocketReader(sock, to_event, copy=not to_storage, burst=_MAX_MESSAGES_PER_SOCKET)
        self._readers.insert(len(self._readers) if to_storage else 0, reader)  # the scheduler's first

    def _renew_connection(self, effect: RenewConnection) -> None:
        """A new socket to the scheduler (the same identity): what the old one still queued is dropped with it. The
        new one is made first, so that its monitor's address (named after its descriptor) is not the old one's."""
        old, old_watches = self._scheduler, [each for each in self._watches.items() if not each[1][1]]
        self._scheduler = new_socket(self._context, zmq.DEALER, self._keys)
        self._connect_scheduler()
        for monitor, (watch, _) in old_watches:
            self._poller.unregister(monitor)
            watch.close()
            del self._watches[monitor]
        self._poller.unregister(old)
        self._readers = [reader for reader in self._readers if reader.socket is not old]
        gone = {id(monitor) for monitor, _ in old_watches}
        self._monitors = [reader for reader in self._monitors if id(reader.socket) not in gone]
        old.close(linger=0)

    def _send_to_scheduler(self, effect: ToScheduler) -> None:
        self._scheduler.send_multipart(codec.encode(effect.message), copy=False)

    def _send_to_storage(self, effect: ToStorage) -> None:
        if self._storage is not None:
            self._storage.send_multipart(codec.encode(effect.message, effect.blobs), copy=False)

    def _connect_storage(self, effect: ConnectStorage) -> None:
        if self._storage is not None:
            return
        self._storage_address = effect.address
        self._storage = new_socket(self._context, zmq.DEALER, self._keys)
        self._connect(self._storage, effect.address, True)

    def _watch(self, sock: zmq.Socket, to_storage: bool) -> None:
        peer = f"the object storage server at {self._storage_address}" if to_storage else "the scheduler"
        watch = ConnectionWatch(sock, self._keys, peer)
        self._watches[watch.monitor] = (watch, to_storage)
        self._poller.register(watch.monitor, zmq.POLLIN)
        reader = SocketReader(watch.monitor, _ChangeOf(watch, to_storage), name="Client")
        self._monitors.insert(len(self._monitors) if to_storage else 0, reader)

    def _send_heartbeat(self, effect: Heartbeat) -> None:
        cpu, rss = self._usage()
        message = ClientHeartbeat(cpu, rss, effect.pending_tasks, effect.report_tasks, effect.functions)
        self._scheduler.send_multipart(codec.encode(message), copy=False)

    def _give_runs(self, effect: TaskRunsArrived) -> None:
        arrived = time.time()
        for stream in self._task_streams:
            stream.received(effect.runs, arrived)

    def _give_results(self, effect: TaskResults) -> None:
        futures = self._futures
        for result in effect.results:
            try:
                futures.pop(result.task_id)._set_task_result(result)
            except Exception:
                logger.exception("Client: resolving a future failed")
        for stream in self._task_streams:
            stream.ended(effect.results)

    def _fail_future(self, effect: TaskFailed) -> None:
        future = self._end_future(effect.task_id)
        if self._leaving and isinstance(effect.error, DisconnectedError):
            future._set_cancelled()  # as the earlier engine ends them: the user gave the task up
        else:
            future._set_error(_fresh(effect.error))

    def _resolve_inputs(self, effect: ResolveInputs) -> None:
        """Tell the core how the futures of a parked task ended, once all have (their callbacks run here)."""
        futures = list(dict.fromkeys(future for _, _, future in effect.futures))
        left = [len(futures)]

        def one_ended(_: Any) -> None:
            left[0] -= 1
            if left[0] == 0:
                try:
                    self.send(inputs_ended(effect.task_id, effect.futures))
                except DisconnectedError:  # the client stopped: the task ended with it
                    pass

        for future in futures:
            future.add_done_callback(one_ended)

    def _cancel_future(self, effect: TaskCancelled) -> None:
        self._end_future(effect.task_id)._set_cancelled()

    def _print(self, effect: TaskPrinted) -> None:
        self._printer.print(effect.outputs)

    def _give_reply(self, effect: Reply) -> None:
        self._reply(effect.command_id).set_result(effect.value)

    def _give_reply_error(self, effect: ReplyError) -> None:
        self._reply(effect.command_id).set_exception(_fresh(effect.error))

    def _objects_failed(self, effect: ObjectsFailed) -> None:
        self._on_objects_failed(effect.object_ids)

    def _end_future(self, task_id: bytes) -> ScalerFuture:
        return self._futures.pop(task_id)

    def _tell_cancel_refused(self, effect: CancelRefused) -> None:
        future = self._futures.get(effect.task_id)
        if future is not None:
            future._set_cancel_refused()

    def _reply(self, command_id: int) -> concurrent.futures.Future:
        """The future waiting for the reply to this command (the core answers each command once)."""
        return self._replies.pop(command_id)

    def _on_stopped(self, effect: Stopped) -> None:
        self._stopped = effect

    def _stop_error(self) -> Exception:
        stopped = self._stopped
        return (stopped.error if stopped is not None else None) or DisconnectedError("the client is disconnected")

    def _close(self, wake: zmq.Socket) -> None:
        with self._lock:  # no event joins the queue after this
            self._closed_error = self._stop_error()
            self._wake_sender.close(linger=0)
        # Events queued before the door closed (and the Abort of a failed loop): the core ends what waits.
        now = time.monotonic()
        while self._events:
            event = self._events.popleft()
            try:
                for effect in self._core.handle(event, now):
                    self._perform[type(effect)](effect)
            except Exception:
                logger.exception(f"Client: handling {type(event).__name__} while closing failed")
        error = self._stop_error()
        with self._lock:
            self._closed_error = error
        # Whatever still waits (only after a bug) must not hang.
        for future in list(self._futures.values()):
            future._set_error(_fresh(error))
        self._futures.clear()
        for reply in list(self._replies.values()):
            if not reply.done():
                reply.set_exception(_fresh(error))
        self._replies.clear()
        for watch, _ in self._watches.values():
            watch.close()
        for sock in (self._scheduler, self._storage, wake):
            if sock is not None:
                sock.close(linger=0)
        self._context.term()


def _fresh(error: Exception) -> Exception:
    """A fresh exception of the same type and message: one object raised in many threads grows tracebacks."""
    try:
        return type(error)(*error.args)
    except Exception:
        return error


def _from_storage(message: Any, blobs: List[Any]) -> FromStorage:
    return FromStorage(message, codec.received_blobs(blobs))


class _ChangeOf:
    """A connection's change as its socket monitor reports it, as the core's event (None: nothing to tell)."""

    __slots__ = ("_watch", "_to_storage")

    def __init__(self, watch: ConnectionWatch, to_storage: bool) -> None:
        self._watch = watch
        self._to_storage = to_storage

    def __call__(self, frames: List[Any]) -> Any:
        watch = self._watch
        change = watch.change(frames)
        if change is None:
            return None
        if change == connection_events.REFUSED and watch.refusal is not None:
            return HandshakeFailed(watch.refusal, self._to_storage)
        return ConnectionChanged(self._to_storage, change)


class _ProcessUsage:
    """CPU share since the last heartbeat and resident memory, without psutil (so it works everywhere)."""

    def __init__(self) -> None:
        self._last = (time.monotonic(), time.process_time())

    def __call__(self) -> Tuple[float, int]:
        now, cpu = time.monotonic(), time.process_time()
        last_now, last_cpu = self._last
        self._last = (now, cpu)
        share = (cpu - last_cpu) / (now - last_now) if now > last_now else 0.0
        return share, _resident_bytes()


def _resident_bytes() -> int:
    try:  # Linux; elsewhere the heartbeat says 0
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError, IndexError):
        return 0


def close_unreferenced(agent: ClientAgent) -> None:
    """Its client was garbage collected (or the interpreter exits): leave the scheduler politely."""
    agent.disconnect()
    if not agent.in_agent_thread():
        agent.join(1.0)
