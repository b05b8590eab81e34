"""The client installed alone (scaler-protocol + scaler-client) runs tasks on a cluster from another environment.

Run by the tox environment ``client-alone``, whose own environment holds only
the client; SCALER_CLUSTER_BIN names the bin directory of an environment with
every component (tox points it at the integration environment).
"""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import subprocess
import time

import pytest

from scaler.protocol.addresses import free_tcp_port

CLUSTER_BIN = os.environ.get("SCALER_CLUSTER_BIN", "")


def test_only_the_client_is_installed_here():
    import scaler

    assert importlib.util.find_spec("scaler.client") is not None
    for component in ("scaler.scheduler", "scaler.worker", "scaler.storage", "psutil"):
        assert importlib.util.find_spec(component) is None, f"{component} should not be installed here"
    with pytest.raises(ImportError, match="pip install"):
        scaler.SchedulerClusterCombo  # noqa: B018
    assert importlib.util.find_spec("joblib") is None and importlib.util.find_spec("tqdm") is None
    with pytest.raises(ImportError, match=r"pip install joblib"):  # the optional joblib backend says what it needs
        import scaler.compat.joblib  # noqa: F401


@pytest.mark.skipif(not CLUSTER_BIN, reason="SCALER_CLUSTER_BIN is not set (run through tox -e client-alone)")
def test_a_task_runs_on_a_cluster_started_from_another_environment():
    from scaler import Client

    port = free_tcp_port(count=3)
    address = f"tcp://127.0.0.1:{port}"
    started = [
        subprocess.Popen([os.path.join(CLUSTER_BIN, "scaler_scheduler"), address], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([os.path.join(CLUSTER_BIN, "scaler_cluster"), "-n", "1", address], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]  # fmt: skip
    try:
        with Client(address=address, timeout_seconds=60) as client:
            assert client.submit(math.sqrt, 16).result(timeout=120) == 4.0
            assert round(sum(client.map(math.sqrt, [(i,) for i in range(100)])), 2) == 661.46
            # the standard interfaces need nothing more: no tqdm here, so progress=True draws the text line
            assert list(client.executor().map(math.sqrt, [4, 9, 16], chunksize=2)) == [2.0, 3.0, 4.0]
            assert client.map(math.sqrt, [(4,)], progress=True) == [2.0]
            import scaler.compat.ray as ray

            ray.init(client=client)
            try:
                assert ray.get(ray.remote(math.sqrt).remote(ray.put(16.0))) == 4.0
            finally:
                ray.shutdown()
    finally:
        for process in started:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        for process in started:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
