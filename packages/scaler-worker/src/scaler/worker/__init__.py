"""Scaler worker: an agent process that talks to the scheduler and the object storage server, and a
processor subprocess that runs the tasks' user code."""

from scaler.worker._version import __version__

__all__ = ["__version__"]
