"""Scaler's object storage server: holds task data (functions, large arguments, results) by object ID."""

from scaler.storage._version import __version__

__all__ = ["__version__"]
