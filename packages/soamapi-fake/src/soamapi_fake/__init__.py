"""A fake IBM Spectrum Symphony for tests: an importable ``soamapi`` whose grid runs in the test's process.

Tests of code that uses ``soamapi`` (scaler-symphony's worker and service) run against this fake; it is never
installed for users and never shadows a real Symphony: the module named ``soamapi`` lives in a directory of its
own (`shim_path`), which a test puts on ``sys.path`` or in ``PYTHONPATH`` of the processes it starts. The grid
is configured from `CONFIG_VARIABLE` (JSON) or installed in-process (`install`); see `grid` for what it does.
"""

from __future__ import annotations

import os

from soamapi_fake.fake_grid import CONFIG_VARIABLE, Application, FakeGrid, grid, install
from soamapi_fake.instances import current_task

__all__ = ["CONFIG_VARIABLE", "Application", "FakeGrid", "current_task", "grid", "install", "shim_path"]


def shim_path() -> str:
    """The directory holding the modules ``soamapi`` and ``soamapiversion`` (this fake's API under those names)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
