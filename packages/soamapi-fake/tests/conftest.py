from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest
import soamapi_fake

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # echo_service, for services on threads
if soamapi_fake.shim_path() not in sys.path:
    sys.path.insert(0, soamapi_fake.shim_path())


@pytest.fixture(params=["thread", "process"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def grid(mode, tmp_path) -> Iterator[soamapi_fake.FakeGrid]:
    """A fresh grid with the application Echo (the echo service, on threads or in processes), initialized."""
    import soamapi

    service = (
        "echo_service:EchoService" if mode == "thread" else [sys.executable, os.path.join(HERE, "echo_service.py")]
    )
    application = soamapi_fake.Application("Echo", service, mode=mode, task_retry_limit=1)
    grid = soamapi_fake.FakeGrid([application], record_path=str(tmp_path / "grid.jsonl"))
    soamapi_fake.install(grid)
    soamapi.initialize()
    try:
        yield grid
    finally:
        soamapi_fake.install(None)
