"""A joblib backend that runs joblib's batches as Scaler tasks; importing this module registers it as "scaler".

    import scaler.compat.joblib  # registers the backend
    with joblib.parallel_config(backend="scaler", n_jobs=8, client=client):
        GridSearchCV(model, grid, n_jobs=-1).fit(X, y)

Without ``client=``, the backend uses the current client (`Client.current`: the one of the innermost ``with
Client(...)`` block, else the last one made, as Dask's backend does); with ``address=``, or without a current
client, it connects its own client for each ``Parallel`` call, to that address or to the
``SCALER_SCHEDULER_ADDRESS`` environment variable, and disconnects it when the call ends. joblib (and its
automatic batching) decides the batches; each batch is one task. Nested ``Parallel`` calls inside a task run
sequentially in that task's worker.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Any, Callable, Optional, Set

try:
    from joblib import register_parallel_backend
    from joblib._parallel_backends import AutoBatchingMixin, ParallelBackendBase, SequentialBackend
except ImportError as error:
    raise ImportError(
        "scaler.compat.joblib needs joblib: pip install joblib (or scaler-client[joblib])", name="joblib"
    ) from error

from scaler.client import current_client
from scaler.client.client import SCHEDULER_ADDRESS_VARIABLE, Client
from scaler.client.executor import cancel_without_waiting
from scaler.client.future import ScalerFuture

BACKEND_NAME = "scaler"


class ScalerBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's batches as Scaler tasks.

    ``n_jobs``: how many batches joblib keeps on the cluster at once (it dispatches twice as many ahead by
    default). The client cannot see how many workers the cluster has, so a negative ``n_jobs`` counts back
    from ``cluster_size`` (default: this machine's CPU count): ``n_jobs=-1`` is ``cluster_size``.
    """

    supports_retrieve_callback = True  # results are read when a batch ends, by the backend's callback thread
    supports_timeout = True
    supports_sharedmem = False
    uses_threads = False
    default_n_jobs = -1
    MAX_IDEAL_BATCH_DURATION = 1.0  # seconds; shorter than joblib's 2 s: stragglers cost more across machines

    def __init__(
        self,
        client: Optional[Client] = None,
        address: Optional[str] = None,
        cluster_size: Optional[int] = None,
        nesting_level: Optional[int] = None,
        inner_max_num_threads: Optional[int] = None,
        **task_options: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads)
        if client is not None and address is not None:
            raise ValueError("give the scaler backend a client or an address, not both")
        if cluster_size is not None and cluster_size < 1:
            raise ValueError(f"cluster_size must be at least 1, got {cluster_size}")
        self._given_client = client
        self._address = address
        self._cluster_size = cluster_size
        self._task_options = task_options
        self._client: Optional[Client] = client
        self._current: Optional[Client] = None  # the current client it uses for this Parallel call, if it does
        self._callbacks: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.Lock()  # guards _running
        self._running: Set[ScalerFuture] = set()

    # --- joblib's backend interface ----------------------------------------------------------------------------

    def effective_n_jobs(self, n_jobs: Optional[int]) -> int:
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs < 0:
            size = self._cluster_size or os.cpu_count() or 1
            return max(size + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs: Optional[int] = 1, parallel: Any = None, **backend_kwargs: Any) -> int:
        self.parallel = parallel
        if self._client is None and self._address is None:
            self._client = self._current = current_client.current()  # not ours to disconnect
        if self._client is None:
            address = self._address or os.environ.get(SCHEDULER_ADDRESS_VARIABLE)
            if not address:
                raise ValueError(
                    "the scaler joblib backend needs a cluster: parallel_config(backend='scaler', client=client) "
                    f"or address='tcp://HOST:PORT', a connected Client, or the {SCHEDULER_ADDRESS_VARIABLE} "
                    "environment variable"
                )
            self._client = Client(address=address)
        return self.effective_n_jobs(n_jobs)

    def submit(self, func: Callable[[], Any], callback: Optional[Callable[[Any], Any]] = None) -> ScalerFuture:
        client = self._client
        if client is None:
            raise RuntimeError("the scaler joblib backend is not configured (or was terminated)")
        if self._task_options:
            future = client.submit_verbose(func, (), {}, **self._task_options)
        else:
            future = client.submit(func)
        with self._lock:
            self._running.add(future)
        if self._callbacks is None:
            self._callbacks = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ScalerJoblibCallback")
        callbacks = self._callbacks
        # joblib's callback takes its Parallel's lock, reads the result and dispatches the next batch: it must
        # not run in the client's agent thread, which the future's own callbacks run in.
        future.add_done_callback(lambda done: _hand_over(callbacks, self._batch_ended, done, callback))
        return future

    apply_async = submit  # the name joblib before 1.5 calls

    def retrieve_result_callback(self, future: ScalerFuture) -> Any:
        return future.result()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        with self._lock:
            running, self._running = list(self._running), set()
        if self._client is not None:
            cancel_without_waiting(self._client, running)
        if not ensure_ready:
            self.terminate()

    def terminate(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            callbacks.shutdown(wait=False)
        if self._current is not None:  # the next call uses the client current then
            self._client = self._current = None
        elif self._given_client is None and self._client is not None:
            client, self._client = self._client, None
            client.disconnect()
        self.reset_batch_stats()

    def get_nested_backend(self) -> Any:
        """A ``Parallel`` inside a task runs its calls one after the other in that task's worker."""
        return SequentialBackend(nesting_level=(self.nesting_level or 0) + 1), None

    def __reduce__(self) -> Any:
        # A backend travels (inside joblib's objects) as its address: a copy connects its own client.
        address = self._address or (self._client.address if self._client is not None else None)
        return (ScalerBackend, (None, address, self._cluster_size))

    # --- internals ----------------------------------------------------------------------------------------------

    def _batch_ended(self, future: ScalerFuture, callback: Optional[Callable[[Any], Any]]) -> None:
        with self._lock:
            self._running.discard(future)
        if callback is not None:
            callback(future)


def _hand_over(callbacks: concurrent.futures.ThreadPoolExecutor, ended: Callable[..., None], *args: Any) -> None:
    try:
        callbacks.submit(ended, *args)
    except RuntimeError:  # the Parallel call ended (terminate) before this batch: nothing waits for it
        pass


def register(make_default: bool = False) -> None:
    """Register the backend with joblib as "scaler" (importing this module does it once)."""
    register_parallel_backend(BACKEND_NAME, ScalerBackend, make_default=make_default)


register()
