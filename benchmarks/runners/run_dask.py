"""Runner for dask.distributed from PyPI (benchmarks/.envs/dask): LocalCluster, processes, 1 thread each."""

import logging

import bench_common
import distributed
from bench_common import Engine
from distributed import Client, LocalCluster


class DaskEngine(Engine):
    name = "dask"
    # LocalCluster runs its scheduler inside the client process: the queued-memory numbers are the two together
    scheduler_roles = ("client",)

    def version(self):
        return distributed.__version__

    def start(self):
        logging.getLogger("distributed").setLevel(logging.ERROR)
        self.cluster = LocalCluster(
            n_workers=self.workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster)
        self.client.wait_for_workers(self.workers)

    def stop(self):
        try:
            self.client.close(timeout=30)
        finally:
            self.cluster.close(timeout=30)

    def map(self, fn, items):
        return self.client.gather(self.client.map(fn, list(items), pure=False))

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def result(self, handle, timeout=None):
        return handle.result(timeout)

    def gather(self, handles):
        return self.client.gather(handles)

    def send_object(self, obj):
        [future] = self.client.scatter([obj], broadcast=False)
        return future

    def get(self, graph, keys):
        values = self.client.get(graph, keys)
        return dict(zip(keys, values, strict=False))

    def submit_in_background(self, fn, items):
        self._pending = self.client.map(fn, list(items), pure=False)  # returns once submitted

    def classify(self, process, cmdline):
        # the nannies live in the client process; their children are the worker processes
        if "resource_tracker" in cmdline or "forkserver" in cmdline:
            return "other"
        return "worker"


if __name__ == "__main__":
    bench_common.main(DaskEngine)
