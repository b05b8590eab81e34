from __future__ import annotations

import os
import sys

import cloudpickle
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from cluster_processes import Processes, free_address  # noqa: E402


@pytest.fixture(autouse=True)
def _send_test_functions_by_value(request):
    """Workers cannot import test modules: ship their functions by value."""
    cloudpickle.register_pickle_by_value(sys.modules[request.module.__name__])
    yield


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
