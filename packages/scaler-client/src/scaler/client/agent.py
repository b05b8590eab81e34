"""The client's agent thread: the only code that touches the scheduler and storage sockets.

User threads hand it commands through a deque and wake it through an inproc
socket (only when it is not already awake). Its loop polls the scheduler
DEALER, the storage DEALER and the wake-up socket, feeds what arrives to the
sans-I/O `ClientState`, and performs the effects: sends, then future
resolutions. Sockets close with linger 0; every wait is bounded.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Sequence, Tuple

import zmq

from scaler.client.client_state import ClientState, Effects, GraphSubmission, Outcome, Submission
from scaler.protocol import codec
from scaler.protocol.errors import DisconnectedError, ProtocolError

logger = logging.getLogger(__name__)

_MAX_MESSAGES_PER_SOCKET = 1000  # per loop turn, so one busy peer cannot starve the others


class ClientAgent:
    def __init__(
        self,
        client_id: bytes,
        address: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        disconnect_wait_seconds: float,
        on_objects_failed: Callable[[List[bytes]], None] = lambda object_ids: None,
    ) -> None:
        self._client_id = client_id
        self._address = address
        self._on_objects_failed = on_objects_failed
        self._state = ClientState(
            client_id,
            address,
            timeout_seconds,
            heartbeat_interval_seconds,
            time.monotonic(),
            disconnect_wait_seconds=disconnect_wait_seconds,
            usage=_ProcessUsage(),
        )
        self._commands: Deque[Tuple[Callable[..., None], Tuple[Any, ...]]] = collections.deque()
        self._lock = threading.Lock()  # guards _wake_pending, _closed_error and the wake-up sender
        self._wake_pending = False
        self._closed_error: Optional[Exception] = None
        self._context = zmq.Context()
        self._wake_address = f"inproc://scaler-client-wake-{os.urandom(8).hex()}"
        self._wake_sender = self._context.socket(zmq.PAIR)  # user side: used only under _lock
        self._wake_sender.setsockopt(zmq.LINGER, 0)
        self._wake_sender.connect(self._wake_address)
        self._thread = threading.Thread(target=self._run, name="ScalerClientAgent", daemon=True)

    # --- user-thread API --------------------------------------------------------------------------------

    def start(self) -> concurrent.futures.Future:
        """Start the thread; the returned future resolves with the HelloAck (or the handshake's error)."""
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.append((ClientState.start, (ready,)))
        self._thread.start()
        return ready

    def submit(self, submissions: Sequence[Submission]) -> None:
        self._send(ClientState.submit, submissions)

    def submit_graph(self, submission: GraphSubmission) -> None:
        self._send(ClientState.submit_graph, submission)

    def put_object(self, object_id: bytes, data: Any, wait: bool = True) -> Optional[concurrent.futures.Future]:
        """Put an object (a payload: a frame, or a list of frames); with ``wait`` the returned future resolves once
        storage acknowledged it."""
        if wait:
            return self._ask(ClientState.put_object, object_id, data)
        self._send(ClientState.put_object, object_id, data, None)
        return None

    def release(self, object_ids: Sequence[bytes]) -> None:
        self._send(ClientState.release, object_ids)

    def cancel(self, task_ids: Sequence[bytes]) -> None:
        self._send(ClientState.cancel, task_ids)

    def clear(self) -> concurrent.futures.Future:
        return self._ask(ClientState.clear)

    def shutdown(self) -> concurrent.futures.Future:
        return self._ask(ClientState.shutdown)

    def disconnect(self) -> concurrent.futures.Future:
        """Ask for a graceful disconnect; resolves when done (at once when already closed)."""
        try:
            return self._ask(ClientState.disconnect)
        except DisconnectedError:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(None)
            return done

    def abort(self, error: Exception) -> None:
        try:
            self._send(ClientState.abort, error)
        except DisconnectedError:
            pass

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed_error is not None

    def in_agent_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _ask(self, command: Callable[..., None], *args: Any) -> concurrent.futures.Future:
        reply: concurrent.futures.Future = concurrent.futures.Future()
        self._send(command, *args, reply)
        return reply

    def _send(self, command: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._closed_error is not None:
                raise DisconnectedError(str(self._closed_error))
            self._commands.append((command, args))
            if not self._wake_pending:
                try:
                    self._wake_sender.send(b"", zmq.NOBLOCK)
                    self._wake_pending = True
                except zmq.Again:  # not bound yet: the agent drains the queue once it has bound
                    pass

    # --- agent thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        state = self._state
        scheduler = self._context.socket(zmq.DEALER)
        storage: Optional[zmq.Socket] = None
        wake = self._context.socket(zmq.PAIR)
        for sock in (scheduler, wake):
            sock.setsockopt(zmq.LINGER, 0)
        scheduler.setsockopt(zmq.IDENTITY, self._client_id)
        scheduler.setsockopt(zmq.SNDHWM, 0)
        scheduler.setsockopt(zmq.RCVHWM, 0)
        poller = zmq.Poller()
        try:
            wake.bind(self._wake_address)
            scheduler.connect(self._address)
            poller.register(scheduler, zmq.POLLIN)
            poller.register(wake, zmq.POLLIN)
            self._drain_commands(time.monotonic())
            while True:
                wait = state.tick(time.monotonic())
                storage = self._perform(state.take_effects(time.monotonic()), scheduler, storage, poller)
                if state.stopped:
                    break
                events = dict(poller.poll(max(1, int(min(wait, 1.0) * 1000))))
                now = time.monotonic()
                if wake in events:
                    while _recv_nowait(wake) is not None:
                        pass
                    with self._lock:
                        self._wake_pending = False
                    self._drain_commands(now)
                if scheduler in events:
                    self._receive(scheduler, state.on_scheduler_message, "scheduler", now)
                if storage is not None and storage in events:
                    self._receive(storage, state.on_storage_message, "object storage server", now, copy=False)
                storage = self._perform(state.take_effects(now), scheduler, storage, poller)
        except Exception as error:  # a bug here must still resolve every future
            logger.exception("Client: agent thread failed")
            state.abort(DisconnectedError(f"the client's agent thread failed: {type(error).__name__}: {error}"), 0.0)
        finally:
            self._close(scheduler, storage, wake)

    def _drain_commands(self, now: float) -> None:
        commands = self._commands
        while commands:
            command, args = commands.popleft()
            try:
                command(self._state, *args, now)
            except Exception:
                logger.exception(f"Client: command {command.__name__} failed")

    def _receive(
        self,
        sock: zmq.Socket,
        handle: Callable[[Any, List[Any], float], None],
        peer: str,
        now: float,
        copy: bool = True,
    ) -> None:
        for _ in range(_MAX_MESSAGES_PER_SOCKET):
            frames = _recv_nowait(sock, copy)
            if frames is None:
                return
            try:
                message, blobs = codec.decode(frames)
            except ProtocolError as error:
                logger.warning(f"Client: dropped malformed message from {peer}: {error}")
                continue
            if not copy:
                blobs = codec.received_blobs(blobs)  # large results are deserialized from where they arrived
            try:
                handle(message, blobs, now)
            except Exception:
                logger.exception(f"Client: handling {type(message).__name__} from {peer} failed; dropped it")

    def _perform(
        self, effects: Effects, scheduler: zmq.Socket, storage: Optional[zmq.Socket], poller: zmq.Poller
    ) -> Optional[zmq.Socket]:
        if effects.connect_storage is not None and storage is None:
            storage = self._context.socket(zmq.DEALER)
            storage.setsockopt(zmq.LINGER, 0)
            storage.setsockopt(zmq.IDENTITY, self._client_id)
            storage.setsockopt(zmq.SNDHWM, 0)
            storage.setsockopt(zmq.RCVHWM, 0)
            storage.connect(effects.connect_storage)
            poller.register(storage, zmq.POLLIN)
        for message in effects.to_scheduler:
            scheduler.send_multipart(codec.encode(message), copy=False)
        if storage is not None:
            for message, blobs in effects.to_storage:
                storage.send_multipart(codec.encode(message, blobs), copy=False)
        if effects.failed_objects:
            self._on_objects_failed(effects.failed_objects)
        for target, outcome, value in effects.resolutions:
            try:
                _apply(target, outcome, value)
            except Exception:
                logger.exception("Client: resolving a future failed")
        return storage

    def _close(self, scheduler: zmq.Socket, storage: Optional[zmq.Socket], wake: zmq.Socket) -> None:
        state = self._state
        error = state.error or DisconnectedError("the client is disconnected")
        with self._lock:
            self._closed_error = error
            self._wake_sender.close(linger=0)
        # Commands queued before the door closed: the stopped state answers each with the error.
        self._drain_commands(time.monotonic())
        effects = state.take_effects(time.monotonic())
        for target, outcome, value in effects.resolutions:
            try:
                _apply(target, outcome, value)
            except Exception:
                logger.exception("Client: resolving a future failed")
        for sock in (scheduler, storage, wake):
            if sock is not None:
                sock.close(linger=0)
        self._context.term()


def _apply(target: Any, outcome: Outcome, value: Any) -> None:
    if outcome is Outcome.TASK_RESULT:
        target._set_task_result(value)
    elif outcome is Outcome.TASK_ERROR:
        target._set_error(value)
    elif outcome is Outcome.TASK_CANCELLED:
        target._set_cancelled()
    elif outcome is Outcome.CANCEL_REFUSED:
        target._set_cancel_refused()
    elif not target.done():
        if outcome is Outcome.REPLY_VALUE:
            target.set_result(value)
        else:
            target.set_exception(value)


def _recv_nowait(sock: zmq.Socket, copy: bool = True) -> Optional[List[Any]]:
    try:
        return sock.recv_multipart(zmq.NOBLOCK, copy=copy)
    except zmq.Again:
        return None


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
