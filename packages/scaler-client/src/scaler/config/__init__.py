"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""

from scaler.compat.earlier import SecurityConfig, component_getattr
from scaler.config import defaults

__all__ = ["SchedulerConfig", "SecurityConfig", "WorkerConfig", "defaults"]

__getattr__ = component_getattr(__name__, {"SchedulerConfig": "SchedulerConfig", "WorkerConfig": "WorkerConfig"})
