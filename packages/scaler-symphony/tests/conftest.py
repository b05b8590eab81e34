from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def fake_grid() -> Iterator:
    """The fake Symphony importable as ``soamapi`` in this process, with a fresh grid: the application ScalerApp,
    whose service (threads of this process) is the Scaler service."""
    import soamapi_fake

    if soamapi_fake.shim_path() not in sys.path:
        sys.path.insert(0, soamapi_fake.shim_path())
    grid = soamapi_fake.FakeGrid([soamapi_fake.Application("ScalerApp", "scaler.symphony.service:ScalerService")])
    soamapi_fake.install(grid)
    try:
        yield grid
    finally:
        soamapi_fake.install(None)
        assert grid.callback_errors == [], "a session callback raised"
