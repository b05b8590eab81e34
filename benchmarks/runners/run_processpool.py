"""Runner for concurrent.futures.ProcessPoolExecutor: one future per item, no network (a ceiling)."""

import concurrent.futures
import multiprocessing
import platform

import bench_common
from bench_common import Engine


class ProcessPoolEngine(Engine):
    name = "processpool"
    scheduler_roles = ()  # the queue lives in the client process

    def version(self):
        return f"python {platform.python_version()}"

    def start(self):
        self.pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))

    def stop(self):
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        for process in processes:  # a "blocked" task would hold shutdown for an hour
            process.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def map(self, fn, items):
        futures = [self.pool.submit(fn, item) for item in items]  # one future per item
        return [future.result() for future in futures]

    def executor_map(self, fn, items, chunksize):
        return list(self.pool.map(fn, items, chunksize=chunksize or 1))

    def submit(self, fn, *args):
        return self.pool.submit(fn, *args)

    def result(self, handle, timeout=None):
        return handle.result(timeout)

    def classify(self, process, cmdline):
        return "worker"


if __name__ == "__main__":
    bench_common.main(ProcessPoolEngine)
