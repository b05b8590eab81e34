"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""

from scaler.protocol.messages import Profiling as ProfileResult

__all__ = ["ProfileResult"]
