import os
import sys
from typing import Iterator

import pytest

# pytest runs with --import-mode=importlib, which puts no test directory on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from client_fakes import FakeScheduler, FakeStorage  # noqa: E402


@pytest.fixture
def storage() -> Iterator[FakeStorage]:
    peer = FakeStorage()
    try:
        yield peer
    finally:
        peer.stop()


@pytest.fixture
def scheduler(storage: FakeStorage) -> Iterator[FakeScheduler]:
    peer = FakeScheduler(storage)
    try:
        yield peer
    finally:
        peer.stop()


@pytest.fixture
def executing_scheduler(storage: FakeStorage) -> Iterator[FakeScheduler]:
    peer = FakeScheduler(storage, execute=True)
    try:
        yield peer
    finally:
        peer.stop()
