"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""

from scaler.compat.earlier import component_getattr

__getattr__ = component_getattr(__name__, {"SchedulerConfig": "SchedulerConfig"})
