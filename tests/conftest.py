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
def network():
    """Hosts made of network namespaces (`network_hosts`), removed when the test ends, whatever happens."""
    from network_hosts import Network

    with Network() as hosts:
        yield hosts


@pytest.fixture
def address() -> str:
    return free_address()


@pytest.fixture(scope="module")
def cluster():
    """A SchedulerClusterCombo of 2 workers shared by the tests of one module (a module may define its own)."""
    from scaler import SchedulerClusterCombo  # here: tests/client_alone runs without the cluster's components

    combo = SchedulerClusterCombo(n_workers=2, logging_level="WARNING")
    try:
        yield combo
    finally:
        combo.shutdown()


@pytest.fixture(scope="module")
def client(cluster):
    from scaler import Client

    with Client(address=cluster.get_address(), timeout_seconds=60) as client:
        yield client


@pytest.fixture(params=[True, False], ids=["with keys", "without keys"])
def any_cluster(request, processes, address, tmp_path):
    """A scheduler and two workers from the command-line programs, with keys and without (`keyed_clusters`)."""
    from keyed_clusters import start_cluster  # here: tests/client_alone runs without the cluster's components

    return start_cluster(processes, address, tmp_path, secure=request.param)


@pytest.fixture
def secure_cluster(processes, address, tmp_path):
    """A scheduler and two workers from the command-line programs, with keys (`keyed_clusters`)."""
    from keyed_clusters import start_cluster

    return start_cluster(processes, address, tmp_path, secure=True)
