"""Scaler's scheduler: routes tasks from clients to workers."""

from scaler.scheduler._version import __version__

__all__ = ["__version__"]
