from typing import Iterator

import pytest

from client_fakes import FakeScheduler, FakeStorage


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
