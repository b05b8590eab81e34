"""What runs a worker manager's groups: `GroupBackend`, with two implementations, local processes
(`native_groups.NativeGroups`) and Slurm jobs (`slurm_groups.SlurmGroups`).

Every group runs ``scaler_cluster`` (`scaler.cluster`) with the manager's worker options and the group's ID
(``--worker-group-id``), which its workers say in their Hello. The manager's shell calls a backend from one
thread of its own, one call at a time, never from its event loop: a call may block (a Slurm command) for at
most the backend's command timeout.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import List, Protocol, Tuple

from scaler.protocol.errors import ScalerError
from scaler.worker import WorkerConfig

RUNNING = "running"
ENDED = "ended"


class GroupBackendError(ScalerError):
    """A group could not be started (or stopped): the error says why, in the words of what refused."""


class GroupBackend(Protocol):
    kind: str  # "native", "slurm": what its manager says it is
    poll_seconds: float  # how often `poll` is called

    def start(self, group_id: bytes, workers: int) -> str:
        """Start a group of ``workers`` workers; return where it runs, for people ("pid 42", "slurm job 7").
        Raise `GroupBackendError` when it cannot."""

    def stop(self, group_id: bytes) -> None:
        """Stop the group (it ends later: `poll` says when). Raise `GroupBackendError` when it cannot."""

    def poll(self) -> List[Tuple[bytes, str, str]]:
        """What changed since the last poll: ``(group, RUNNING, "")`` once a group runs, ``(group, ENDED, why)``
        once it ended (then it is forgotten)."""

    def close(self, timeout: float) -> None:
        """Stop every group left and wait for them, at most about ``timeout`` seconds."""


def cluster_command(config: WorkerConfig, group_id: bytes, workers: int, python: str = sys.executable) -> List[str]:
    """The command line that runs one group: ``scaler_cluster`` of ``workers`` workers tagged with the group."""
    tagged = dataclasses.replace(config, group_id=group_id.decode())
    return [python, "-m", "scaler.cluster.cluster_main", "-n", str(workers), *tagged.to_arguments()]
