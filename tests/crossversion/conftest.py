"""Fixtures of the cross-version tests; the helpers are in peers.py."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from peers import peer_bin  # noqa: E402


@pytest.fixture(scope="session")
def peers_are_built():
    for name in ("previous", "next-major"):
        python = os.path.join(peer_bin(name), "python")
        assert os.path.exists(python), f"{python} is missing: run tests/crossversion/build_peers.py"
    return True
