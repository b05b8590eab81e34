"""Scaler: a distributed computation engine for Python.

This package's ``__init__`` ships with scaler-client. The other distributions
(scaler-protocol, scaler-scheduler, scaler-storage, scaler-worker, ...) each
add one subpackage; extending ``__path__`` lets them join this package whether
they are installed as wheels or in editable mode.

The public names below are imported on first use: every Scaler process imports
this module (``import scaler.worker`` does), and a worker, a processor or the
scheduler needs none of the client (importing it would cost each processor start
a tenth of a second).
"""

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, List

__path__ = pkgutil.extend_path(__path__, __name__)

if TYPE_CHECKING:  # the names as type checkers see them
    from scaler.client import (
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
    from scaler.cluster.combo import SchedulerClusterCombo
    from scaler.protocol.errors import (
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
    from scaler.protocol.security import SecurityConfig

_CLIENT_NAMES = (
    "Client DefaultSerializer GraphCycleError GraphError GraphKeyError ObjectReference RemoteTraceback "
    "ScalerExecutor ScalerFuture Serializer progress __version__"
)
_ERROR_NAMES = (
    "DisconnectedError MemoryLimitError ObjectNotFoundError ObjectStorageRefusedError ProtocolError RemoteTaskError "
    "ScalerError SecurityError ShutdownRefusedError TaskCancelledError TaskRejectedError TaskTimeoutError "
    "WorkerDiedError"
)
_MODULE_OF = {
    **dict.fromkeys(_CLIENT_NAMES.split(), "scaler.client"),
    **dict.fromkeys(_ERROR_NAMES.split(), "scaler.protocol.errors"),
    "SecurityConfig": "scaler.protocol.security",
    "SchedulerClusterCombo": "scaler.cluster.combo",
}

_COMBO_MISSING = (
    "SchedulerClusterCombo needs the scheduler and worker components: "
    "pip install scaler (or scaler-scheduler scaler-worker scaler-storage)"
)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'scaler' has no attribute {name!r}")
    if name == "SchedulerClusterCombo":
        # the client alone must not import the scheduler or the worker: said clearly when they are missing
        try:
            value = importlib.import_module(module).SchedulerClusterCombo
        except ImportError as error:
            raise ImportError(_COMBO_MISSING, name=module) from error
        return value
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> List[str]:
    return sorted({*globals(), *_MODULE_OF})


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
