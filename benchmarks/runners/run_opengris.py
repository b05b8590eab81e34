"""Runner for opengris-scaler from PyPI (the earlier `scaler` package; benchmarks/.envs/opengris)."""

import importlib.metadata

import bench_common
import psutil
from bench_common import Engine

from scaler import Client, SchedulerClusterCombo


class OpengrisEngine(Engine):
    name = "opengris-scaler"

    def version(self):
        return importlib.metadata.version("opengris-scaler")

    def start(self):
        self.cluster = SchedulerClusterCombo(n_workers=self.workers, logging_level="WARNING", protected=False)
        self.client = Client(address=self.cluster.get_address())

    def stop(self):
        try:
            self.client.disconnect()
        finally:
            self.cluster.shutdown()

    def map(self, fn, items):
        return self.client.map(fn, items)  # map(fn, *iterables), as the builtin

    def submit(self, fn, *args):
        return self.client.submit(fn, *args)

    def result(self, handle, timeout=None):
        return handle.result(timeout)

    def send_object(self, obj):
        return self.client.send_object(obj)

    def get(self, graph, keys):
        return self.client.get(graph, keys=keys)

    def processes(self):
        # every process is a multiprocessing child, so roles come from the combo's handles, not command lines
        me = psutil.Process()
        roles = {me.pid: "client"}
        known = {
            self.cluster._scheduler.pid: "scheduler",
            self.cluster._object_storage.pid: "storage",
            self.cluster._worker_manager_process.pid: "worker manager",
        }
        for child in me.children(recursive=True):
            try:
                if child.pid in known:
                    roles[child.pid] = known[child.pid]
                    continue
                parent = child.ppid()
                if known.get(parent) == "worker manager":
                    roles[child.pid] = "agent"
                elif parent in roles and roles[parent] == "agent" or _grandparent_is_manager(child, known):
                    roles[child.pid] = "processor"
                else:
                    roles[child.pid] = "other"
            except psutil.Error:
                continue
        return roles


def _grandparent_is_manager(process, known):
    try:
        return known.get(psutil.Process(process.ppid()).ppid()) == "worker manager"
    except psutil.Error:
        return False


if __name__ == "__main__":
    bench_common.main(OpengrisEngine)
