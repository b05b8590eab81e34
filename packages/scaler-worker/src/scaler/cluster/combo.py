"""`SchedulerClusterCombo`: an object storage server, a scheduler and a cluster of workers on this machine."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
from typing import Any, List, Mapping, Optional, Sequence, Union

from scaler.cluster.starting import (
    ClusterStartError,
    dashboard_link,
    dashboard_place,
    start_program,
    wait_for_hello,
    wait_for_page,
    web_monitor_arguments,
)
from scaler.protocol.addresses import (
    address_in_use,
    check_address,
    default_monitor_address,
    default_storage_address,
    free_tcp_port,
)
from scaler.protocol.command_line import parse_size
from scaler.protocol.keygen import ClusterKeys, write_cluster_keys
from scaler.protocol.process_control import stop_child
from scaler.protocol.security import NO_SECURITY, SecurityConfig
from scaler.worker.memory_limit import DEFAULT_MEMORY_LIMIT, memory_limit_bytes
from scaler.worker.worker_config import format_capabilities, parse_capabilities
from scaler.worker.worker_setup import preload_problem

logger = logging.getLogger(__name__)

_missing = [
    distribution
    for module, distribution in (("scaler.scheduler", "scaler-scheduler"), ("scaler.storage", "scaler-storage"))
    if importlib.util.find_spec(module) is None
]
if _missing:
    raise ImportError(
        f"SchedulerClusterCombo needs {' and '.join(_missing)}: "
        f"pip install {' '.join(_missing)} (or pip install scaler)"
    )

_STOP_TIMEOUT_SECONDS = 10.0


class SchedulerClusterCombo:
    """Start an object storage server, a scheduler and ``n_workers`` workers as child processes.

    The children are the command-line programs (``python -m ...``), so the
    caller's script is never imported again in them and needs no
    ``if __name__ == "__main__"`` guard. ``address=None`` picks a free local
    port; an address in use (the scheduler's, its storage server's or its
    monitor's) raises `ClusterStartError` naming it. `shutdown` stops everything
    and is idempotent; it also runs at interpreter exit, and the children die
    with this process if it is killed. The children run in a session of their
    own: Ctrl-C in a terminal (or a notebook's interrupt) raises
    `KeyboardInterrupt` in this process only, and the cluster goes on serving.

    ``protected`` (the default, as in the earlier engine) makes the scheduler refuse a client's
    `Client.shutdown`: the cluster belongs to this object. ``per_worker_task_queue_size`` is the
    earlier engine's name of ``per_worker_queue_size`` (docs/compatibility.md).
    ``security=True`` runs the cluster with keys: fresh ones, written to a
    private temporary directory (mode 0700, removed by `shutdown`); every
    process is given the paths of its own. Clients then connect with
    ``Client(address, security=combo.security)``, monitors with
    ``combo.monitor_security``. The quotas of each client: ``max_client_memory``, the bytes its objects may take
    in the storage server (its ``--max-client-memory``; default: half of its memory), and ``max_client_tasks``,
    the tasks it may have queued at the scheduler (its ``--max-client-tasks``; default: 100,000).

    A task runs only on a worker that offers the capabilities it needs (``submit_verbose(capabilities=...)``;
    the workers': ``per_worker_capabilities``); one that no worker offers waits for one with a warning, or, with
    ``missing_capabilities="fail"``, fails with `TaskRejectedError` (docs/scheduling.md).

    ``dashboard_address`` (``"HOST:PORT"``, ``":PORT"`` or a port; 0: a free one) starts the web monitor
    (``scaler_ui``, from scaler-monitor) there too: its page is ``combo.dashboard_link``, which the scheduler also
    tells clients (``Client.dashboard_link``). Without it (the default) no web monitor runs.

    Memory (docs/memory.md): ``memory_limit`` bounds each worker's tasks (``"auto"``: this host's memory
    divided among the workers; a size in bytes or text, ``"2GiB"``; a share of the host for all the workers,
    ``"80%"``; or ``"none"``); ``max_object_size`` is the largest object (argument, result) the storage server
    takes (default 1 GiB) and ``storage_memory_limit`` the memory it holds objects in (default: half the host's),
    past which it spills them to ``spill_directory`` (default: the temporary directory; ``"none"``: it refuses them).

    ``preload`` (a module name or a script's path) runs in each worker's processor as it starts, before its
    first task, as each worker's ``--preload`` (docs/interfaces.md, "Coming from Dask").

    Logging: every process it starts logs at ``logging_level`` (default ``"WARNING"``: a combo that works prints
    nothing; ``"INFO"`` shows each process's start, its peers and its end) to ``logging_paths`` (default this
    process's stdout), or as ``logging_config_file`` says.
    """

    def __init__(
        self,
        n_workers: int = max(1, (os.cpu_count() or 2) - 1),
        address: Optional[str] = None,
        event_loop: str = "auto",
        object_storage_address: Optional[str] = None,
        monitor_address: Optional[str] = None,
        protected: bool = True,
        allocate_policy: str = "even",
        missing_capabilities: str = "wait",
        max_task_deaths: int = 3,
        per_worker_capabilities: Union[str, Mapping[str, int]] = "",
        per_worker_queue_size: int = 1000,
        heartbeat_interval_seconds: float = 1.0,
        client_timeout_seconds: float = 60.0,
        worker_timeout_seconds: float = 60.0,
        logging_level: str = "WARNING",
        logging_paths: Sequence[str] = ("/dev/stdout",),
        logging_config_file: Optional[str] = None,
        per_worker_task_queue_size: Optional[int] = None,
        security: bool = False,
        max_client_memory: Optional[int] = None,
        max_client_tasks: Optional[int] = None,
        memory_limit: Union[int, str] = DEFAULT_MEMORY_LIMIT,
        max_object_size: Union[int, str, None] = None,
        storage_memory_limit: Union[int, str, None] = None,
        spill_directory: Optional[str] = None,
        dashboard_address: Union[str, int, None] = None,
        preload: str = "",
    ) -> None:
        if per_worker_task_queue_size is not None:
            per_worker_queue_size = per_worker_task_queue_size
        capabilities = format_capabilities(parse_capabilities(per_worker_capabilities))
        memory_limit_bytes(memory_limit, n_workers)  # ValueError now, naming what is wrong
        if preload and preload_problem(preload):
            raise ValueError(preload_problem(preload))
        storage_options: List[str] = []
        for option, size in (("--max-object-size", max_object_size), ("--memory-limit", storage_memory_limit)):
            if size is not None:
                storage_options += [option, str(parse_size(size))]
        if spill_directory is not None:
            storage_options += ["--spill-directory", spill_directory]
        self._address = check_address(address) if address else _free_local_address()
        self._storage_address = check_address(object_storage_address or default_storage_address(self._address))
        monitor = check_address(monitor_address or default_monitor_address(self._address))
        dashboard = dashboard_place(dashboard_address) if dashboard_address is not None else None
        self.dashboard_link = dashboard_link(*dashboard) if dashboard is not None else None
        places = [("scheduler", self._address), ("object storage server", self._storage_address)]
        places.append(("scheduler's monitor", monitor))
        if dashboard is not None:
            places.append(("web monitor", f"tcp://{dashboard[0]}:{dashboard[1]}"))
        for what, place in places:
            if address_in_use(place):
                raise ClusterStartError(
                    f"cannot start the {what} at {place}: the address is in use (another cluster runs there?); "
                    "choose another address, or address=None for a free one"
                )
        self._processes: List[subprocess.Popen] = []
        self._stopped = False
        self._keys: Optional[ClusterKeys] = None
        logs = ["--logging-level", logging_level, "--logging-paths", *logging_paths]
        if logging_config_file:
            logs += ["--logging-config-file", logging_config_file]
        common = ["--event-loop", event_loop, *logs]
        atexit.register(self.shutdown)
        try:
            if security:
                self._keys = write_cluster_keys(tempfile.mkdtemp(prefix="scaler-keys-"))
            server, probe = self._security("server"), self._security("monitor")
            quota = ["--max-client-memory", str(max_client_memory)] if max_client_memory is not None else []
            self._start(
                "scaler.storage", self._storage_address, *common, *server.to_arguments(), *quota, *storage_options
            )
            wait_for_hello(self._storage_address, self._processes[-1], "object storage server", probe)
            self._start(
                "scaler.scheduler.cli", self._address, *common, *server.to_arguments(),
                "--object-storage-address", self._storage_address,
                "--heartbeat-interval-seconds", str(heartbeat_interval_seconds),
                "--client-timeout-seconds", str(client_timeout_seconds),
                "--worker-timeout-seconds", str(worker_timeout_seconds),
                "--allocate-policy", allocate_policy,
                "--missing-capabilities", missing_capabilities,
                "--max-task-deaths", str(max_task_deaths),
                *(["--monitor-address", monitor_address] if monitor_address else []),
                *(["--protected"] if protected else []),
                *(["--max-client-tasks", str(max_client_tasks)] if max_client_tasks is not None else []),
                *(["--dashboard-link", self.dashboard_link] if self.dashboard_link else []),
            )  # fmt: skip
            wait_for_hello(self._address, self._processes[-1], "scheduler", probe)
            if dashboard is not None and self.dashboard_link:
                self._start(*web_monitor_arguments(monitor, *dashboard, *logs, *probe.to_arguments()))
                wait_for_page(self.dashboard_link, self._processes[-1])
            self._start(
                "scaler.cluster.cluster_main", self._address, *common, *self._security("worker").to_arguments(),
                "--num-of-workers", str(n_workers),
                "--per-worker-queue-size", str(per_worker_queue_size),
                "--heartbeat-interval-seconds", str(heartbeat_interval_seconds),
                "--worker-timeout-seconds", str(worker_timeout_seconds),
                "--memory-limit", str(memory_limit),
                *(["--per-worker-capabilities", capabilities] if capabilities else []),
                *(["--preload", preload] if preload else []),
            )  # fmt: skip
        except BaseException:
            self.shutdown()
            raise

    def get_address(self) -> str:
        return self._address

    @property
    def security(self) -> SecurityConfig:
        """What a `Client` of this cluster needs: its client key pair and the server's public key (nothing
        without ``security=True``)."""
        return self._security("client")

    @property
    def monitor_security(self) -> SecurityConfig:
        """What ``scaler_top`` and ``scaler_ui`` need: a monitor key pair and the server's public key."""
        return self._security("monitor")

    def _security(self, role: str) -> SecurityConfig:
        return NO_SECURITY if self._keys is None else getattr(self._keys, role)

    def shutdown(self) -> None:
        """Stop the cluster, the scheduler and the storage server (in that order); safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.shutdown)
        for process in reversed(self._processes):
            stop_child(process, _STOP_TIMEOUT_SECONDS)
        if self._keys is not None:
            shutil.rmtree(self._keys.directory, ignore_errors=True)

    def __enter__(self) -> SchedulerClusterCombo:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def _start(self, module: str, *arguments: str) -> None:
        # a session of its own: the terminal's Ctrl-C and a notebook's interrupt reach this process alone, whose
        # user gets KeyboardInterrupt with the cluster intact (starting.start_program)
        self._processes.append(start_program(module, *arguments))


def _free_local_address() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port(count=3)}"  # the scheduler, storage and monitor ports
