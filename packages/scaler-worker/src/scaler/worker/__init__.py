"""Scaler worker: an agent process that talks to the scheduler and the object storage server, and a
processor subprocess that runs the tasks' user code.

The public surface (what `scaler.cluster` and programs that embed a worker use):

- `WorkerConfig` and its defaults, `parse_capabilities`, `add_worker_arguments` (the command-line options
  of a worker), the exit codes of a worker process;
- `run_worker(config)`: one worker in an event loop of its own, until it leaves (blocks);
- `WorkerAgent(config, connect=..., runner=..., handle_signals=...)`: one worker in the caller's event loop.

Names resolve on first use, so that a processor, which imports this package, stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from scaler.worker._version import __version__

if TYPE_CHECKING:
    from scaler.worker.worker_agent import WorkerAgent, run_worker
    from scaler.worker.worker_config import (
        DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        DEFAULT_INLINE_THRESHOLD_BYTES,
        DEFAULT_QUEUE_CAPACITY,
        DEFAULT_WORKER_TIMEOUT_SECONDS,
        CapabilitiesSpec,
        CapabilityError,
        WorkerConfig,
        add_worker_arguments,
        parse_capabilities,
    )
    from scaler.worker.worker_events import EXIT_FAILURE, EXIT_OK, EXIT_REFUSED

_PUBLIC = {
    "WorkerConfig": "scaler.worker.worker_config",
    "CapabilitiesSpec": "scaler.worker.worker_config",
    "CapabilityError": "scaler.worker.worker_config",
    "parse_capabilities": "scaler.worker.worker_config",
    "add_worker_arguments": "scaler.worker.worker_config",
    "DEFAULT_QUEUE_CAPACITY": "scaler.worker.worker_config",
    "DEFAULT_HEARTBEAT_INTERVAL_SECONDS": "scaler.worker.worker_config",
    "DEFAULT_WORKER_TIMEOUT_SECONDS": "scaler.worker.worker_config",
    "DEFAULT_INLINE_THRESHOLD_BYTES": "scaler.worker.worker_config",
    "EXIT_OK": "scaler.worker.worker_events",
    "EXIT_FAILURE": "scaler.worker.worker_events",
    "EXIT_REFUSED": "scaler.worker.worker_events",
    "WorkerAgent": "scaler.worker.worker_agent",
    "run_worker": "scaler.worker.worker_agent",
}

__all__ = [
    "__version__",
    "WorkerConfig",
    "CapabilitiesSpec",
    "CapabilityError",
    "parse_capabilities",
    "add_worker_arguments",
    "DEFAULT_QUEUE_CAPACITY",
    "DEFAULT_HEARTBEAT_INTERVAL_SECONDS",
    "DEFAULT_WORKER_TIMEOUT_SECONDS",
    "DEFAULT_INLINE_THRESHOLD_BYTES",
    "EXIT_OK",
    "EXIT_FAILURE",
    "EXIT_REFUSED",
    "WorkerAgent",
    "run_worker",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'scaler.worker' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
