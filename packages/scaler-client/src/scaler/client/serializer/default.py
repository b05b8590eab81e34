"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""

from scaler.client.serializer import DefaultSerializer

__all__ = ["DefaultSerializer"]
