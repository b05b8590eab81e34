"""A Scaler worker that runs its tasks on IBM Spectrum Symphony."""

from scaler.symphony._version import __version__

__all__ = ["__version__"]
