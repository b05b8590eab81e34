"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""
