"""A supervisor that keeps N worker processes alive on this host.

`run_cluster` starts each worker as ``python -m scaler.worker.worker_main``
(a fresh interpreter: nothing of the caller, not even its ``__main__``, leaks
into the workers or their processors), logs and replaces a worker that ends
unexpectedly, and on SIGTERM or SIGINT stops them all (SIGTERM, a bounded
wait, then SIGKILL). Workers die with the supervisor (PR_SET_PDEATHSIG), and
the supervisor dies with its own parent unless told otherwise, so a killed
parent leaves nothing behind.

Which exits are replaced (see `scaler.worker`): a worker that
left because it was asked to (exit 0) or was refused (exit 78) is not; any
other end is, after a back-off that grows while workers keep failing fast.
When no worker is left to supervise, `run_cluster` returns.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence, Union

from scaler.protocol.command_line import setup_logging
from scaler.protocol.process_control import die_with_parent, start_child
from scaler.protocol.security import NO_SECURITY, SecurityConfig, peer_keys
from scaler.worker import (
    DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
    DEFAULT_INLINE_THRESHOLD_BYTES,
    DEFAULT_QUEUE_CAPACITY,
    DEFAULT_WORKER_TIMEOUT_SECONDS,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REFUSED,
    CapabilitiesSpec,
    WorkerConfig,
    parse_capabilities,
)
from scaler.worker.memory_limit import DEFAULT_MEMORY_LIMIT, NO_MEMORY_LIMIT, memory_limit_bytes

logger = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 10.0
_FAST_FAILURE_SECONDS = 10.0  # a worker that ends sooner than this after its start failed fast
_MAX_RESTART_DELAY_SECONDS = 30.0
_POLL_SECONDS = 1.0  # wake-up interval when signals cannot wake us (not the main thread)


def run_cluster(
    address: str,
    n_workers: int,
    *,
    per_worker_capabilities: CapabilitiesSpec = "",
    per_worker_queue_size: int = DEFAULT_QUEUE_CAPACITY,
    heartbeat_interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
    worker_timeout_seconds: float = DEFAULT_WORKER_TIMEOUT_SECONDS,
    task_inline_threshold: int = DEFAULT_INLINE_THRESHOLD_BYTES,
    event_loop: str = "auto",
    logging_level: str = "INFO",
    logging_paths: Sequence[str] = ("/dev/stdout",),
    logging_config_file: Optional[str] = None,
    die_with_parent_process: bool = True,
    security: SecurityConfig = NO_SECURITY,
    worker_group_id: str = "",
    memory_limit: Union[str, int] = DEFAULT_MEMORY_LIMIT,
    preload: str = "",
) -> int:
    """Keep ``n_workers`` workers of the scheduler at ``address`` alive until SIGTERM or SIGINT. Blocks.

    Returns 0 after a stop signal or when every worker left because it was asked to, 1 when workers were
    refused. Call it from the main thread of its process (it handles the signals); with
    ``die_with_parent_process`` (the default) the process ends when its parent does. ``security``: the workers'
    keys (checked here first: `SecurityError` for files they cannot use); the workers are given the paths of the
    key files, never a key. ``preload``: each worker's ``--preload`` (a module name or a script's path).
    """
    if die_with_parent_process:
        die_with_parent(signal.SIGTERM, os.getppid())
    setup_logging(logging_level, tuple(logging_paths), logging_config_file)
    if n_workers < 1:
        raise ValueError(f"number of workers must be at least 1, not {n_workers}")
    config = WorkerConfig(
        scheduler_address=address,
        capabilities=parse_capabilities(per_worker_capabilities),
        queue_capacity=per_worker_queue_size,
        heartbeat_interval_seconds=heartbeat_interval_seconds,
        worker_timeout_seconds=worker_timeout_seconds,
        task_inline_threshold=task_inline_threshold,
        event_loop=event_loop,
        logging_level=logging_level,
        logging_paths=tuple(logging_paths),
        logging_config_file=logging_config_file,
        security=security,
        group_id=worker_group_id,
        memory_limit=memory_limit_bytes(memory_limit, n_workers) or NO_MEMORY_LIMIT,  # each worker's, in bytes
        preload=preload,
    )
    peer_keys(security)  # the workers would fail alike: say why once, before starting them
    return ClusterSupervisor(config, n_workers).run()


class _WorkerProcess:
    __slots__ = ("index", "process", "started", "restart_at", "failures")

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Optional[subprocess.Popen] = None
        self.started = 0.0
        self.restart_at: Optional[float] = 0.0  # None: not to be restarted
        self.failures = 0  # consecutive fast failures


class ClusterSupervisor:
    def __init__(self, config: WorkerConfig, n_workers: int) -> None:
        self._config = config
        self._workers = [_WorkerProcess(index) for index in range(n_workers)]
        self._stop_signal: Optional[int] = None
        self._refused = False
        self._wakeup_reader: Optional[socket.socket] = None
        self._wakeup_writer: Optional[socket.socket] = None
        self._selector: Optional[selectors.BaseSelector] = None

    def run(self) -> int:
        config = self._config
        logger.info(
            f"ClusterProcess: starting {len(self._workers)} workers, "
            f"heartbeat_interval_seconds={config.heartbeat_interval_seconds:g}, "
            f"worker_timeout_seconds={config.worker_timeout_seconds:g}, "
            f"capabilities={','.join(c.name for c in config.capabilities) or 'none'}, "
            f"queue_size={config.queue_capacity}, scheduler={config.scheduler_address}"
            + (f", group={config.group_id}" if config.group_id else "")
        )
        self._install_signal_handlers()
        try:
            while self._stop_signal is None:
                now = time.monotonic()
                self._reap(now)
                self._start_due(now)
                if not any(worker.process is not None or worker.restart_at is not None for worker in self._workers):
                    break
                self._wait(self._next_wake_up(now))
        finally:
            self._stop_workers()
            self._remove_signal_handlers()
        if self._stop_signal is not None:
            logger.info(f"ClusterProcess: received {signal.Signals(self._stop_signal).name}, stopped all workers")
            return EXIT_OK
        if self._refused:
            logger.error("ClusterProcess: no worker left: they were refused")
            return EXIT_FAILURE
        logger.info("ClusterProcess: no worker left: the scheduler asked them to leave")
        return EXIT_OK

    # ------------------------------------------------------------------------- workers

    def _start_due(self, now: float) -> None:
        for worker in self._workers:
            if worker.process is None and worker.restart_at is not None and worker.restart_at <= now:
                self._start(worker, now)

    def _start(self, worker: _WorkerProcess, now: float) -> None:
        command = [sys.executable, "-m", "scaler.worker.worker_main", *self._config.to_arguments()]
        try:
            worker.process = start_child(command, stdin=subprocess.DEVNULL)
        except OSError as error:
            logger.error(f"Worker[{worker.index}] could not start: {error}")
            self._schedule_restart(worker, now, failed_fast=True)
            return
        worker.started = now
        worker.restart_at = None
        logger.info(f"Worker[{worker.index}] started (pid {worker.process.pid})")

    def _reap(self, now: float) -> None:
        for worker in self._workers:
            process = worker.process
            if process is None or process.poll() is None:
                continue
            worker.process = None
            code = process.returncode
            cause = exit_cause(code)
            if code == EXIT_OK:
                logger.info(
                    f"Worker[{worker.index}] (pid {process.pid}) {cause}: it was asked to leave, not replacing it"
                )
                worker.restart_at = None
            elif code == EXIT_REFUSED:
                logger.error(f"Worker[{worker.index}] (pid {process.pid}) {cause}: it was refused, not replacing it")
                worker.restart_at = None
                self._refused = True
            else:
                failed_fast = now - worker.started < _FAST_FAILURE_SECONDS
                delay = self._schedule_restart(worker, now, failed_fast)
                when = f"in {delay:g} seconds" if delay else "now"
                logger.warning(f"Worker[{worker.index}] (pid {process.pid}) {cause}; replacing it {when}")

    def _schedule_restart(self, worker: _WorkerProcess, now: float, failed_fast: bool) -> float:
        worker.failures = worker.failures + 1 if failed_fast else 0
        delay = 0.0 if worker.failures <= 1 else min(_MAX_RESTART_DELAY_SECONDS, 2.0 ** (worker.failures - 2))
        worker.restart_at = now + delay
        return delay

    def _next_wake_up(self, now: float) -> Optional[float]:
        times = [worker.restart_at for worker in self._workers if worker.process is None and worker.restart_at]
        timeout = max(0.0, min(times) - now) if times else None
        if self._selector is None:
            timeout = _POLL_SECONDS if timeout is None else min(timeout, _POLL_SECONDS)
        return timeout

    def _stop_workers(self) -> None:
        running = [worker for worker in self._workers if worker.process is not None]
        for worker in running:
            _send_signal(worker.process, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for worker in running:
            process = worker.process
            assert process is not None
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(f"Worker[{worker.index}] (pid {process.pid}) did not stop in time, killing it")
                _send_signal(process, signal.SIGKILL)
                process.wait()
            worker.process = None

    # ------------------------------------------------------------------------- signals

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            logger.warning("ClusterProcess: not in the main thread: SIGTERM/SIGINT will not stop the workers")
            return
        self._wakeup_reader, self._wakeup_writer = socket.socketpair()
        self._wakeup_reader.setblocking(False)
        self._wakeup_writer.setblocking(False)
        signal.set_wakeup_fd(self._wakeup_writer.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, _ignore)  # a handler (not SIG_IGN) so a child's end wakes the wait
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wakeup_reader, selectors.EVENT_READ)

    def _remove_signal_handlers(self) -> None:
        if self._selector is None:
            return
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        self._selector.close()
        for sock in (self._wakeup_reader, self._wakeup_writer):
            if sock is not None:
                sock.close()
        self._selector = None

    def _on_stop_signal(self, sig: int, frame: object) -> None:
        if self._stop_signal is None:
            self._stop_signal = sig

    def _wait(self, timeout: Optional[float]) -> None:
        if self._selector is None:
            time.sleep(timeout if timeout is not None else _POLL_SECONDS)
            return
        if self._selector.select(timeout):
            try:
                while self._wakeup_reader is not None and self._wakeup_reader.recv(4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass


def _ignore(sig: int, frame: object) -> None:
    pass


def _send_signal(process: subprocess.Popen, sig: int) -> None:
    try:
        process.send_signal(sig)
    except ProcessLookupError:
        pass


def exit_cause(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
