"""Runner for joblib's default backend (loky): `Parallel(n_jobs=2)` with its automatic batching, no network."""

import bench_common
import bench_tasks
import joblib
from bench_common import Engine, Unsupported


class JoblibEngine(Engine):
    name = "joblib"
    scheduler_roles = ()  # the queue lives in the client process

    def version(self):
        return f"joblib {joblib.__version__}"

    def start(self):
        self.parallel = joblib.Parallel(n_jobs=self.workers)  # the default backend, loky
        self.parallel.__enter__()  # keeps its workers between calls

    def stop(self):
        self.parallel.__exit__(None, None, None)
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=True, kill_workers=True)

    def wait_ready(self):
        pids = set(self.parallel(joblib.delayed(bench_tasks.whoami)(i) for i in range(4 * self.workers)))
        if len(pids) < self.workers:
            raise RuntimeError(f"only {len(pids)} of {self.workers} joblib workers answered")

    def map(self, fn, items):
        return self.parallel(joblib.delayed(fn)(item) for item in items)

    def executor_map(self, fn, items, chunksize):
        return joblib.Parallel(n_jobs=self.workers, batch_size=chunksize or "auto")(
            joblib.delayed(fn)(item) for item in items
        )

    def submit(self, fn, *args):
        raise Unsupported("joblib has no futures: only Parallel over a batch of calls")

    def result(self, handle, timeout=None):
        raise Unsupported("joblib has no futures")

    def classify(self, process, cmdline):
        return "worker"


if __name__ == "__main__":
    bench_common.main(JoblibEngine)
