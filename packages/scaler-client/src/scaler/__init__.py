"""Scaler: a distributed computation engine for Python.

This package's ``__init__`` ships with scaler-client. The other distributions
(scaler-protocol, scaler-scheduler, scaler-storage, scaler-worker, ...) each
add one subpackage; extending ``__path__`` lets them join this package whether
they are installed as wheels or in editable mode.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

from scaler.client import (  # noqa: E402
    Client,
    DefaultSerializer,
    GraphCycleError,
    GraphError,
    GraphKeyError,
    ObjectReference,
    RemoteTraceback,
    ScalerExecutor,
    ScalerFuture,
    Serializer,
    __version__,
    progress,
)
from scaler.protocol.errors import (  # noqa: E402
    DisconnectedError,
    MemoryLimitError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
    RemoteTaskError,
    ScalerError,
    SecurityError,
    ShutdownRefusedError,
    TaskCancelledError,
    TaskRejectedError,
    TaskTimeoutError,
    WorkerDiedError,
)
from scaler.protocol.security import SecurityConfig  # noqa: E402

_COMBO_MISSING = (
    "SchedulerClusterCombo needs the scheduler and worker components: "
    "pip install scaler (or scaler-scheduler scaler-worker scaler-storage)"
)


def __getattr__(name: str):
    # Resolved on first use only: the client alone must not import the scheduler or the worker.
    if name == "SchedulerClusterCombo":
        try:
            from scaler.cluster.combo import SchedulerClusterCombo
        except ImportError as error:
            raise ImportError(_COMBO_MISSING, name="scaler.cluster.combo") from error
        return SchedulerClusterCombo
    raise AttributeError(f"module 'scaler' has no attribute {name!r}")


__all__ = [
    "Client",
    "DefaultSerializer",
    "DisconnectedError",
    "GraphCycleError",
    "GraphError",
    "GraphKeyError",
    "MemoryLimitError",
    "ObjectNotFoundError",
    "ObjectReference",
    "ObjectStorageRefusedError",
    "ProtocolError",
    "RemoteTaskError",
    "RemoteTraceback",
    "ScalerError",
    "ShutdownRefusedError",
    "ScalerExecutor",
    "ScalerFuture",
    "SchedulerClusterCombo",
    "SecurityConfig",
    "SecurityError",
    "Serializer",
    "TaskCancelledError",
    "TaskRejectedError",
    "TaskTimeoutError",
    "WorkerDiedError",
    "__version__",
    "progress",
]
