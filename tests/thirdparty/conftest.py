"""Parfun and Pargraph as their users get them (tox environment ``thirdparty``), on this project's clusters.

The tox environment installs opengris-parfun and pargraph from PyPI without the earlier engine, and downloads
their source distributions, which hold their examples, to SCALER_THIRDPARTY_SDISTS.
"""

from __future__ import annotations

import glob
import os
import tarfile

import pytest
from cluster_processes import Processes, free_address, wait_until, worker_count

from scaler.protocol.addresses import default_monitor_address

SDISTS = os.environ.get("SCALER_THIRDPARTY_SDISTS", "")


@pytest.fixture(scope="session")
def sources(tmp_path_factory):
    """``{"opengris_parfun": path, "pargraph": path}``: each source distribution unpacked."""
    if not SDISTS:
        pytest.fail("SCALER_THIRDPARTY_SDISTS is not set: run tox -e thirdparty (it downloads the sources)")
    root = tmp_path_factory.mktemp("sdists")
    unpacked = {}
    for name in ("opengris_parfun", "pargraph"):
        (archive,) = glob.glob(os.path.join(SDISTS, f"{name}-*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
        unpacked[name] = os.path.join(root, os.path.basename(archive)[: -len(".tar.gz")])
    return unpacked


@pytest.fixture(scope="module")
def remote_cluster():
    """A cluster started from the command line, as a user starts one: scaler_scheduler, then scaler_cluster."""
    processes = Processes()
    address = free_address()
    try:
        processes.scheduler(address)
        processes.cluster(address, 2)
        wait_until(lambda: worker_count(default_monitor_address(address)) == 2, 60, "2 workers")
        yield address
    finally:
        processes.stop_all()
