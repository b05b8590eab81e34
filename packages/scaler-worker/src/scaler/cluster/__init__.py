"""Scaler cluster: keeps N worker processes alive on one host (``scaler_cluster``)."""

from scaler.worker._version import __version__

__all__ = ["__version__"]
