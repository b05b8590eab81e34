"""Runner for multiprocessing.Pool: map() in chunks (the default chunk size), no network (a ceiling)."""

import multiprocessing
import platform

import bench_common
from bench_common import Engine


class MultiprocessingPoolEngine(Engine):
    name = "mp-pool"
    scheduler_roles = ()  # the queue lives in the client process

    def version(self):
        return f"python {platform.python_version()}"

    def start(self):
        self.pool = multiprocessing.get_context("fork").Pool(self.workers)

    def stop(self):
        self.pool.terminate()
        self.pool.join()

    def map(self, fn, items):
        return self.pool.map(fn, list(items))  # chunksize = len / (4 * workers)

    def submit(self, fn, *args):
        return self.pool.apply_async(fn, args)

    def result(self, handle, timeout=None):
        return handle.get(timeout)

    def submit_in_background(self, fn, items):
        self._pending = self.pool.map_async(fn, list(items))

    def classify(self, process, cmdline):
        return "worker"


if __name__ == "__main__":
    bench_common.main(MultiprocessingPoolEngine)
