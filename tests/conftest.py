from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from cluster_processes import Processes, free_address  # noqa: E402


@pytest.fixture
def processes(tmp_path):
    group = Processes()
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture
def address() -> str:
    return free_address()
