"""A worker manager's asyncio/ZeroMQ shell around `ManagerCore`.

It owns the DEALER socket to the scheduler (the worker's `ZmqConnect`, with the manager's own keys: its identity
is the manager ID), an alarm set for the core's `next_wakeup` (`scaler.protocol.alarm`), and the backend that
runs the groups (`group_backend.GroupBackend`), which it calls on one thread of its own so that a slow Slurm
command never stalls the loop; it turns what happens into events for the core and carries out the effects. It
decides nothing. SIGTERM and SIGINT ask the core to leave (a second one: at once)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional

from scaler.protocol import codec, connection_events
from scaler.protocol.alarm import Alarm
from scaler.protocol.core_events import from_scheduler
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.ids import show, show_group
from scaler.protocol.security import NO_KEYS, Keys
from scaler.protocol.socket_reader import decoder
from scaler.worker.peer_connection import PeerConnection, ZmqConnect
from scaler.worker_manager.group_backend import ENDED, RUNNING, GroupBackend, GroupBackendError
from scaler.worker_manager.manager_core import ManagerCore, ManagerSettings
from scaler.worker_manager.manager_events import (
    EXIT_FAILURE,
    Begin,
    ConnectionChanged,
    Exit,
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

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_SECONDS = 15.0  # for the groups left at the end to stop
_DISCONNECT_LINGER_SECONDS = 1.0


def new_manager_id() -> bytes:
    return f"M|{socket.gethostname()}|{os.getpid()}|{os.urandom(6).hex()}".encode()


class ManagerAgent:
    def __init__(self, settings: ManagerSettings, backend: GroupBackend, keys: Keys = NO_KEYS) -> None:
        self.manager_id = new_manager_id()
        self._core = ManagerCore(settings, self.manager_id, os.getpid(), socket.gethostname())
        self._settings = settings
        self._backend = backend
        self._keys = keys
        self._backend_thread = ThreadPoolExecutor(1, thread_name_prefix="scaler-manager-backend")
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._exit: Optional[asyncio.Future] = None
        self._scheduler: Optional[PeerConnection] = None
        self._polling = False
        self._next_poll = 0.0
        self._alarm = Alarm(self._ring)  # for the core's next_wakeup
        self._effects: Dict[type, Callable[[Any], None]] = {
            Send: self._send,
            StartGroup: self._start_group,
            StopGroup: self._stop_group_effect,
            Exit: self._on_exit,
        }

    async def run(self) -> int:
        """Serve until the manager leaves; return its exit code (see `manager_events`)."""
        loop = self._loop = asyncio.get_running_loop()
        self._exit = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._deliver, StopRequested(f"received {signal.Signals(sig).name}"))
        connect = ZmqConnect(keys=self._keys)
        background: List[asyncio.Task] = []
        try:
            try:
                self._scheduler = connect(self._settings.scheduler_address, self.manager_id, False)
            except DisconnectedError as error:
                logger.error(f"Worker manager {show(self.manager_id)}: {error}")
                return EXIT_FAILURE
            self._deliver(Begin())
            for coroutine in (self._receive(), self._watch()):
                background.append(asyncio.ensure_future(coroutine))
            return await self._exit
        finally:
            self._alarm.cancel()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await loop.run_in_executor(self._backend_thread, self._backend.close, CLOSE_TIMEOUT_SECONDS)
            self._backend_thread.shutdown(wait=False)
            if self._scheduler is not None:
                self._scheduler.close(_DISCONNECT_LINGER_SECONDS)
            connect.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    # ----------------------------------------------------------------- events in, effects out

    def _deliver(self, event: Any) -> None:
        """``event`` to the core and its effects carried out; never raises, so that the reader, the watch and
        the clock that deliver never stop (an effect that fails is logged and dropped)."""
        name = f"Worker manager {show(self.manager_id)}"
        try:
            effects = self._core.handle(event, time.monotonic())
        except Exception:  # one bad event must not stop the manager
            logger.exception(f"{name}: failed to handle {type(event).__name__}")
            return
        for effect in effects:
            try:
                self._effects[type(effect)](effect)
            except Exception:  # noqa: BLE001 - this effect alone is lost
                logger.exception(f"{name}: failed to carry out {type(effect).__name__}")
        self._alarm.at(self._core.next_wakeup)

    def _deliver_from_thread(self, event: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop closed meanwhile
            pass

    async def _receive(self) -> None:
        assert self._scheduler is not None
        to_event = decoder(from_scheduler, f"Worker manager {show(self.manager_id)}", "the scheduler")
        while True:
            event = to_event(await self._scheduler.receive())
            if event is not None:
                self._deliver(event)

    async def _watch(self) -> None:
        assert self._scheduler is not None
        while True:
            change = await self._scheduler.change()
            if change == connection_events.REFUSED and self._scheduler.refusal is not None:
                self._deliver(HandshakeFailed(self._scheduler.refusal, False))
            else:
                self._deliver(ConnectionChanged(False, change))

    def _ring(self) -> None:
        """The core's next_wakeup came: its Tick; and the backend is polled, at its own pace."""
        self._deliver(Tick())
        now = time.monotonic()
        if not self._polling and now >= self._next_poll:
            self._polling = True
            self._next_poll = now + self._backend.poll_seconds
            self._in_backend(self._poll)

    # ----------------------------------------------------------------- effects

    def _send(self, effect: Send) -> None:
        if self._scheduler is not None:
            self._scheduler.send(codec.encode(effect.message))

    def _start_group(self, effect: StartGroup) -> None:
        self._in_backend(self._start, effect.group_id, effect.workers)

    def _stop_group_effect(self, effect: StopGroup) -> None:
        self._in_backend(self._stop_group, effect.group_id)

    def _on_exit(self, effect: Exit) -> None:
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(effect.code)

    # ----------------------------------------------------------------- on the backend's thread

    def _in_backend(self, call: Callable[..., None], *arguments: Any) -> None:
        self._backend_thread.submit(self._guarded, call, *arguments)

    def _guarded(self, call: Callable[..., None], *arguments: Any) -> None:
        try:
            call(*arguments)
        except Exception:  # noqa: BLE001 - a bug of a backend: logged, the manager goes on
            logger.exception(f"Worker manager {show(self.manager_id)}: the group backend failed")

    def _start(self, group_id: bytes, workers: int) -> None:
        try:
            detail = self._backend.start(group_id, workers)
        except GroupBackendError as error:
            self._deliver_from_thread(GroupStartFailed(group_id, str(error)))
            return
        self._deliver_from_thread(GroupStarted(group_id, detail))

    def _stop_group(self, group_id: bytes) -> None:
        try:
            self._backend.stop(group_id)
        except GroupBackendError as error:  # it stays stopping: a group that ends is noticed by the poll
            name = f"Worker manager {show(self.manager_id)}"
            logger.error(f"{name}: could not stop group {show_group(group_id)}: {error}")

    def _poll(self) -> None:
        try:
            for group_id, status, reason in self._backend.poll():
                event = GroupRunning(group_id) if status == RUNNING else GroupEnded(group_id, reason)
                assert status in (RUNNING, ENDED)
                self._deliver_from_thread(event)
        finally:
            self._polling = False


def run_manager(settings: ManagerSettings, backend: GroupBackend, keys: Keys, event_loop: str = "auto") -> int:
    """Run a worker manager until it leaves; return its exit code. Blocks."""
    from scaler.protocol.command_line import run_event_loop

    return run_event_loop(ManagerAgent(settings, backend, keys).run, event_loop)
