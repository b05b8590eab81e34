"""Worker groups as local processes: each group is a ``scaler_cluster`` child of the manager, stopped with
SIGTERM (its workers leave cleanly), and ends with the manager however the manager ends. Start groups from a
thread that lives as long as they do: the kernel's parent-death signal follows the thread that started a
child."""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import time
from typing import Dict, List, Set, Tuple

from scaler.cluster.cluster import exit_cause
from scaler.protocol.ids import show_group
from scaler.protocol.process_control import start_child
from scaler.worker import WorkerConfig
from scaler.worker.memory_limit import NO_MEMORY_LIMIT
from scaler.worker_manager.group_backend import ENDED, RUNNING, GroupBackendError, cluster_command

logger = logging.getLogger(__name__)


def sharing_this_host(config: WorkerConfig, max_workers: int) -> WorkerConfig:
    """``config`` for groups that all run on this host, ``max_workers`` workers at most in all (0: no bound): its
    memory limit made each worker's size, a share of the host's memory (``auto``, ``80%``) divided among all the
    workers the groups may run, not among one group's. Without a bound there is nothing to divide by: each
    group's ``scaler_cluster`` divides the share among its own workers."""
    if max_workers <= 0:
        return config
    return dataclasses.replace(config, memory_limit=config.memory_limit_bytes(max_workers) or NO_MEMORY_LIMIT)


class NativeGroups:
    kind = "native"
    poll_seconds = 0.5

    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self._processes: Dict[bytes, subprocess.Popen] = {}
        self._unreported: Set[bytes] = set()  # started, not yet reported running

    def start(self, group_id: bytes, workers: int) -> str:
        try:
            process = start_child(cluster_command(self._config, group_id, workers), stdin=subprocess.DEVNULL)
        except OSError as error:
            raise GroupBackendError(f"cannot start scaler_cluster: {error}") from None
        self._processes[group_id] = process
        self._unreported.add(group_id)
        return f"pid {process.pid}"

    def stop(self, group_id: bytes) -> None:
        process = self._processes.get(group_id)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)

    def poll(self) -> List[Tuple[bytes, str, str]]:
        changes = []
        for group_id, process in list(self._processes.items()):
            if group_id in self._unreported:
                self._unreported.discard(group_id)
                changes.append((group_id, RUNNING, ""))
            if process.poll() is not None:
                del self._processes[group_id]
                why = f"scaler_cluster (pid {process.pid}) {exit_cause(process.returncode)}"
                changes.append((group_id, ENDED, why))
        return changes

    def close(self, timeout: float) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for group_id, process in self._processes.items():
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(f"group {show_group(group_id)} (pid {process.pid}) did not stop in time: killing it")
                process.kill()
                process.wait()
        self._processes.clear()
