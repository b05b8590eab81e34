"""Runner for this project (installed from packages/ into benchmarks/.envs/scaler)."""

import contextlib
import json
import logging
import select
import subprocess
import sys
import tempfile
import time
import urllib.request

import bench_common
from bench_common import Engine, Unsupported

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.addresses import default_monitor_address, free_tcp_port

# a viewer of scaler_ui's page: it reads the live event stream, as a browser's page does, and drops it; it says
# when the first update came, so that its start is not timed with the workload
_VIEWER = (
    "import sys, urllib.request\n"
    "for number, _ in enumerate(urllib.request.urlopen(sys.argv[1] + '/events')):\n"
    "    if not number: print('viewing', flush=True)\n"
)


class ScalerEngine(Engine):
    name = "scaler"
    event_loop = "builtin"

    def version(self):
        from scaler.client import __version__

        return __version__

    def start(self):
        logging.disable(logging.WARNING)  # no client-side log lines in the measurements
        self.cluster = SchedulerClusterCombo(
            n_workers=self.workers, logging_level="WARNING", event_loop=self.event_loop
        )
        self.client = Client(address=self.cluster.get_address())

    def stop(self):
        try:
            self.client.disconnect()
        finally:
            self.cluster.shutdown()

    def map(self, fn, items):
        return self.client.map(fn, ((item,) for item in items))

    @contextlib.contextmanager
    def watched(self, report=True):
        """scaler_ui subscribed to the scheduler, a viewer reading its page's event stream, and (``report``) a
        performance report open (its file written when the block ends, outside what is timed)."""
        port = free_tcp_port()
        monitor = default_monitor_address(self.cluster.get_address())
        ui = subprocess.Popen([sys.executable, "-m", "scaler.monitor.ui", monitor, "--port", str(port),
                               "--logging-level", "WARNING"])  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        viewer = None
        try:
            deadline = time.monotonic() + 60
            while not _serves_workers(url, self.workers):
                if time.monotonic() > deadline or ui.poll() is not None:
                    raise RuntimeError("scaler_ui did not show the workers within 60 s")
                time.sleep(0.2)
            viewer = subprocess.Popen([sys.executable, "-c", _VIEWER, url], stdout=subprocess.PIPE)
            if not select.select([viewer.stdout], [], [], 60)[0] or not viewer.stdout.readline():
                raise RuntimeError("the viewer of scaler_ui's page received nothing within 60 s")
            with tempfile.TemporaryDirectory() as directory:
                with self.client.performance_report(f"{directory}/report.html") if report else contextlib.nullcontext():
                    yield
        finally:
            for process in (viewer, ui):
                if process is not None:
                    process.terminate()
                    process.wait(10)

    def executor_map(self, fn, items, chunksize):
        with self.client.executor() as executor:
            return list(executor.map(fn, items, chunksize=chunksize or 1))

    def submit(self, fn, *args):
        return self.client.submit(fn, *args)

    def result(self, handle, timeout=None):
        return handle.result(timeout)

    def send_object(self, obj):
        return self.client.send_object(obj)

    def get(self, graph, keys):
        get = getattr(self.client, "get", None)
        if get is None:
            raise Unsupported("Client has no get()")
        try:
            return get(graph, keys=keys)
        except Exception as error:
            # graph tasks are answered with a refusal until the scheduler implements them
            if "graph" in str(error).lower() or type(error).__name__ in ("TaskRejectedError", "NotImplementedError"):
                raise Unsupported(f"{type(error).__name__}: {error}") from error
            raise

    def classify(self, process, cmdline):
        if "scaler.scheduler" in cmdline:
            return "scheduler"
        if "scaler.storage" in cmdline:
            return "storage"
        if "scaler.cluster" in cmdline:
            return "cluster supervisor"
        if "scaler.monitor.ui" in cmdline:
            return "monitor"
        if "scaler.worker.worker_main" in cmdline:
            return "agent"
        if "multiprocessing.spawn" in cmdline or "spawn_main" in cmdline:
            return "processor"
        return "other"


def _serves_workers(url: str, workers: int) -> bool:
    """Whether scaler_ui at ``url`` shows a snapshot with ``workers`` workers (it subscribed)."""
    try:
        snapshot = json.loads(urllib.request.urlopen(url + "/state.json", timeout=5).read())["snapshot"]
    except OSError:
        return False
    return snapshot is not None and len(snapshot["workers"]) >= workers


if __name__ == "__main__":
    bench_common.main(ScalerEngine)
