"""Scaler's monitors: they subscribe to a scheduler's monitor address and show its state snapshots."""

from scaler.monitor._version import __version__

__all__ = ["__version__"]
