"""The earlier engine's public names (opengris-scaler 2.x, Citi scaler 1.x), each pointing at ours.

Code written for the earlier engine imports these names from the earlier engine's modules; each of those
modules is here again as a few lines that take their names from our own implementation (or from this
module, for the few names that have no counterpart of ours). `ALIASES` lists every one: the earlier
name, and ours it stands for. docs/compatibility.md says what differs from the earlier engine and why,
and the tests import every entry of `ALIASES` and check that it is ours.

A name that needs a component the client does not install (the scheduler's or the worker's settings)
resolves on first use and says what to install when that component is missing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Dict, Optional

# earlier name -> ours (both "module.attribute")
ALIASES: Dict[str, str] = {
    # scaler-client
    "scaler.client.client.Client": "scaler.client.Client",
    "scaler.client.future.ScalerFuture": "scaler.client.ScalerFuture",
    "scaler.client.object_reference.ObjectReference": "scaler.client.ObjectReference",
    "scaler.client.serializer.mixins.Serializer": "scaler.client.serializer.Serializer",
    "scaler.client.serializer.default.DefaultSerializer": "scaler.client.serializer.DefaultSerializer",
    "scaler.utility.metadata.profile_result.ProfileResult": "scaler.protocol.messages.Profiling",
    "scaler.utility.exceptions.DisconnectedError": "scaler.protocol.errors.DisconnectedError",
    "scaler.utility.exceptions.WorkerDiedError": "scaler.protocol.errors.WorkerDiedError",
    "scaler.utility.exceptions.ProcessorDiedError": "scaler.protocol.errors.WorkerDiedError",
    "scaler.utility.exceptions.TaskExceptionNotSerializableError": "scaler.protocol.errors.RemoteTaskError",
    "scaler.utility.exceptions.MissingObjects": "scaler.protocol.errors.ObjectNotFoundError",
    "scaler.config.SecurityConfig": "scaler.compat.earlier.SecurityConfig",
    "scaler.config.common.security.SecurityConfig": "scaler.compat.earlier.SecurityConfig",
    # scaler-scheduler
    "scaler.config.SchedulerConfig": "scaler.scheduler.scheduler_core.SchedulerSettings",
    "scaler.config.section.scheduler.SchedulerConfig": "scaler.scheduler.scheduler_core.SchedulerSettings",
    # scaler-worker
    "scaler.config.WorkerConfig": "scaler.worker.WorkerConfig",
    "scaler.config.common.worker.WorkerConfig": "scaler.worker.WorkerConfig",
    "scaler.cluster.combo.SchedulerClusterCombo": "scaler.cluster.combo.SchedulerClusterCombo",
    "scaler.worker.agent.processor.processor.Processor": "scaler.worker.agent.processor.processor.Processor",
}

_COMPONENT_NAMES = {
    "SchedulerConfig": ("scaler.scheduler.scheduler_core", "SchedulerSettings", "scaler-scheduler"),
    "WorkerConfig": ("scaler.worker", "WorkerConfig", "scaler-worker"),
}


def component_name(name: str) -> Any:
    """`SchedulerConfig` or `WorkerConfig`: our settings of that component, which the client does not install."""
    module, attribute, distribution = _COMPONENT_NAMES[name]
    try:
        return getattr(importlib.import_module(module), attribute)
    except ImportError as error:
        raise ImportError(
            f"scaler.config.{name} is {distribution}'s: pip install {distribution}", name=module
        ) from error


def component_getattr(module: str, names: Dict[str, str]) -> Any:
    """A module ``__getattr__`` that resolves ``names`` (attribute -> key of `_COMPONENT_NAMES`) on first use."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return component_name(names[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


@dataclass(frozen=True)
class SecurityConfig:
    """The earlier engine's security settings: a TLS certificate chain and its key, both optional.

    Accepted without credentials (plain transport, the earlier default). Scaler secures its transport with
    CurveZMQ keys, not TLS certificates: credentials are refused with an error that says so.
    """

    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None

    def __post_init__(self) -> None:
        if self.tls_cert is not None or self.tls_key is not None:
            raise ValueError(
                "SecurityConfig(tls_cert=..., tls_key=...): Scaler does not use TLS certificates; it secures "
                "its connections with CurveZMQ keys (docs/compatibility.md)"
            )

    def has_credentials(self) -> bool:
        return False
