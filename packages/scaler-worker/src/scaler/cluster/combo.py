"""`SchedulerClusterCombo`: an object storage server, a scheduler and a cluster of workers on this machine."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import multiprocessing
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import check_address, default_storage_address, free_tcp_port
from scaler.protocol.errors import ScalerError
from scaler.protocol.version import PROTOCOL_VERSION

logger = logging.getLogger(__name__)

_missing = [
    distribution
    for module, distribution in (("scaler.scheduler", "scaler-scheduler"), ("scaler.storage", "scaler-storage"))
    if importlib.util.find_spec(module) is None
]
if _missing:
    raise ImportError(
        f"SchedulerClusterCombo needs {' and '.join(_missing)}: pip install {' '.join(_missing)} (or pip install scaler)"
    )

_START_TIMEOUT_SECONDS = 60.0
_STOP_TIMEOUT_SECONDS = 10.0


class ClusterStartError(ScalerError):
    """A process of the local cluster did not start."""


class SchedulerClusterCombo:
    """Start an object storage server, a scheduler and ``n_workers`` workers as child processes.

    ``address=None`` picks a free local port. `shutdown` stops everything and
    is idempotent; it also runs at interpreter exit, and the children die with
    this process if it is killed.
    """

    def __init__(
        self,
        address: Optional[str] = None,
        n_workers: int = max(1, (os.cpu_count() or 2) - 1),
        event_loop: str = "builtin",
        object_storage_address: Optional[str] = None,
        monitor_address: Optional[str] = None,
        protected: bool = False,
        per_worker_capabilities: str = "",
        per_worker_queue_size: int = 1000,
        heartbeat_interval_seconds: float = 2.0,
        client_timeout_seconds: float = 60.0,
        worker_timeout_seconds: float = 60.0,
        logging_level: str = "INFO",
        logging_paths: Sequence[str] = ("/dev/stdout",),
    ) -> None:
        self._address = check_address(address) if address else _free_local_address()
        self._storage_address = object_storage_address or default_storage_address(self._address)
        self._processes: List[Tuple[str, multiprocessing.process.BaseProcess]] = []
        self._stopped = False
        logs = {"logging_level": logging_level, "logging_paths": tuple(logging_paths)}
        context = multiprocessing.get_context("spawn")
        atexit.register(self.shutdown)
        try:
            self._start(context, "ObjectStorageServer", _run_storage, (self._storage_address, event_loop, logs))
            _wait_for_hello(self._storage_address, self._processes[-1][1], "object storage server")
            scheduler_options = {
                "object_storage_address": self._storage_address,
                "monitor_address": monitor_address,
                "protected": protected,
                "heartbeat_interval_seconds": heartbeat_interval_seconds,
                "client_timeout_seconds": client_timeout_seconds,
                "worker_timeout_seconds": worker_timeout_seconds,
            }
            self._start(context, "Scheduler", _run_scheduler, (self._address, event_loop, logs, scheduler_options))
            _wait_for_hello(self._address, self._processes[-1][1], "scheduler")
            cluster_options = {
                "per_worker_capabilities": per_worker_capabilities,
                "per_worker_queue_size": per_worker_queue_size,
                "heartbeat_interval_seconds": heartbeat_interval_seconds,
                "worker_timeout_seconds": worker_timeout_seconds,
                "event_loop": event_loop,
            }
            self._start(context, "Cluster", _run_cluster, (self._address, n_workers, logs, cluster_options))
        except BaseException:
            self.shutdown()
            raise

    def get_address(self) -> str:
        return self._address

    def shutdown(self) -> None:
        """Stop the cluster, the scheduler and the storage server (in that order); safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.shutdown)
        for _, process in reversed(self._processes):
            if process.is_alive():
                process.terminate()
                process.join(_STOP_TIMEOUT_SECONDS)
            if process.is_alive():
                process.kill()
                process.join(_STOP_TIMEOUT_SECONDS)

    def __enter__(self) -> "SchedulerClusterCombo":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def _start(self, context: Any, name: str, target: Any, args: tuple) -> None:
        process = context.Process(target=target, args=args, name=name)
        process.start()
        self._processes.append((name, process))


def _free_local_address() -> str:
    while True:
        port = free_tcp_port()
        if port + 2 < 65536:
            return f"tcp://127.0.0.1:{port}"


def _wait_for_hello(address: str, process: multiprocessing.process.BaseProcess, what: str) -> None:
    context = zmq.Context.instance()
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(address)
        socket.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.MONITOR, os.getpid(), "", m.WorkerInfo())))
        while time.monotonic() < deadline:
            if not process.is_alive():
                raise ClusterStartError(f"the {what} at {address} exited with code {process.exitcode} while starting")
            if socket.poll(100):
                socket.recv_multipart()  # HelloAck or Refusal: either way it is up
                return
        raise ClusterStartError(f"the {what} at {address} did not answer within {_START_TIMEOUT_SECONDS}s")
    finally:
        socket.close(linger=0)


def _run_storage(address: str, event_loop: str, logs: Dict[str, Any]) -> None:
    from scaler.protocol.runtime import die_with_parent
    from scaler.storage.server import run_object_storage_server

    die_with_parent()
    run_object_storage_server(address, event_loop=event_loop, **logs)


def _run_scheduler(address: str, event_loop: str, logs: Dict[str, Any], options: Dict[str, Any]) -> None:
    from scaler.protocol.runtime import die_with_parent
    from scaler.scheduler.server import run_scheduler

    die_with_parent()
    run_scheduler(address, event_loop=event_loop, **logs, **options)


def _run_cluster(address: str, n_workers: int, logs: Dict[str, Any], options: Dict[str, Any]) -> None:
    from scaler.cluster.cluster import run_cluster
    from scaler.protocol.runtime import die_with_parent

    die_with_parent()
    run_cluster(address, n_workers, **logs, **options)
