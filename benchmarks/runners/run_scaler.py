"""Runner for this project (installed from packages/ into benchmarks/.envs/scaler)."""

import logging

import bench_common
from bench_common import Engine, Unsupported

from scaler import Client, SchedulerClusterCombo


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
        if "scaler.worker.worker_main" in cmdline:
            return "agent"
        if "multiprocessing.spawn" in cmdline or "spawn_main" in cmdline:
            return "processor"
        return "other"


if __name__ == "__main__":
    bench_common.main(ScalerEngine)
