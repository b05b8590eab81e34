"""Scaler's wire protocol: Cap'n Proto schemas, message classes, codec, IDs."""

from scaler.protocol._version import __version__

__all__ = ["__version__"]
