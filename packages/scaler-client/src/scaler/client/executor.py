"""`ScalerExecutor`: a `concurrent.futures.Executor` whose calls run on a Scaler cluster.

``client.executor()`` gives one. Code written for `concurrent.futures.ProcessPoolExecutor` runs on
the cluster by changing the line that creates the executor; docs/interfaces.md compares the two.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

from scaler.client.future import ScalerFuture
from scaler.client.remote_errors import RemoteTraceback
from scaler.client.task_waits import wait_in_task

if TYPE_CHECKING:
    from scaler.client.client import Client

_PRUNE_AT = 1024  # the executor forgets finished futures once it holds this many (amortised: no per-task callback)


class ScalerExecutor(concurrent.futures.Executor):
    """A `concurrent.futures.Executor` over a Scaler client.

    ``ScalerExecutor(client)`` shares a connected `Client` (`shutdown` leaves it connected);
    ``ScalerExecutor("tcp://host:port")`` connects its own client and disconnects it on `shutdown`.
    ``capabilities``, ``priority``, ``timeout_seconds`` and ``retries`` apply to every task it submits
    (see `Client.submit_verbose`).

    `map` has the standard semantics: the inputs are submitted at once (with ``buffersize``, only that
    many tasks ahead of the consumer), results come back lazily and in order, and a call's exception is
    raised when its result is reached. ``chunksize`` runs that many calls per task, for throughput when
    the calls are short; it never changes which results are seen before an exception.
    """

    def __init__(
        self,
        client: Union[Client, str],
        *,
        capabilities: Optional[dict] = None,
        priority: int = 0,
        timeout_seconds: float = 0.0,
        retries: int = 0,
    ) -> None:
        from scaler.client.client import Client  # here: client.py imports this module

        if isinstance(client, str):
            self._client = Client(address=client)
            self._owns_client = True
        elif isinstance(client, Client):
            self._client = client
            self._owns_client = False
        else:
            raise TypeError(f"ScalerExecutor needs a Client or a scheduler address, got {type(client).__name__}")
        if timeout_seconds < 0 or retries < 0:
            raise ValueError("timeout_seconds and retries must not be negative")
        options: Dict[str, Any] = dict(
            capabilities=capabilities, priority=priority, timeout_seconds=timeout_seconds, retries=retries
        )
        self._options = options if (capabilities or priority or timeout_seconds or retries) else None
        self._lock = threading.Lock()  # guards _shutdown and _pending
        self._shutdown = False
        self._pending: Set[ScalerFuture] = set()
        self._prune_at = _PRUNE_AT

    @property
    def client(self) -> Client:
        return self._client

    def __repr__(self) -> str:
        state = "shut down" if self._shutdown else "open"
        return f"<ScalerExecutor {state} over {self._client!r}>"

    # --- the Executor interface ------------------------------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ScalerFuture:
        """Run ``fn(*args, **kwargs)`` on a worker; returns its future."""
        return self._submit(fn, args, kwargs)

    def map(  # type: ignore[override]
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: Optional[float] = None,
        chunksize: int = 1,
        buffersize: Optional[int] = None,
    ) -> Iterator[Any]:
        """``fn(*args)`` for each ``args`` of ``zip(*iterables)``: an iterator of the results, in order.

        ``timeout`` (seconds from this call): `TimeoutError` from the iterator if a result is not there by
        then. ``chunksize``: calls per task. ``buffersize`` (as in Python 3.14): at most this many tasks
        submitted ahead of the consumer, so the inputs are read lazily too. Leaving the iterator early
        (an exception, ``close()``, garbage collection) cancels the tasks not yet consumed.
        """
        if not callable(fn):
            raise TypeError(f"map() needs a callable, got {type(fn).__name__}")
        if not isinstance(chunksize, int) or chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None:
            if not isinstance(buffersize, int):
                raise TypeError("buffersize must be an integer or None")
            if buffersize < 1:
                raise ValueError("buffersize must be None or > 0")
        end_time = None if timeout is None else timeout + time.monotonic()
        inputs: Iterator[Tuple[Any, ...]] = zip(*iterables, strict=False)
        submit: Callable[[Any], ScalerFuture]
        if chunksize == 1:
            task_inputs: Iterator[Any] = inputs
            submit = lambda arguments: self._submit(fn, arguments, {})  # noqa: E731
        else:
            task_inputs = _batched(inputs, chunksize)
            chunk_fn = functools.partial(run_chunk, fn)
            submit = lambda chunk: self._submit(chunk_fn, (chunk,), {})  # noqa: E731
        futures: Deque[ScalerFuture] = collections.deque()
        try:
            for task_input in itertools.islice(task_inputs, buffersize) if buffersize else task_inputs:
                futures.append(submit(task_input))
        except BaseException:
            self._cancel(futures)
            raise
        refill = functools.partial(_submit_next, submit, task_inputs) if buffersize else None
        return _results(futures, end_time, chunksize > 1, refill, self._client)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new tasks after this. ``cancel_futures``: cancel this executor's unfinished tasks (running ones
        too: a worker stops a task it is running). ``wait``: return once every task has ended. An executor made
        from an address then disconnects its client; one made over a `Client` leaves the client connected."""
        with self._lock:
            self._shutdown = True
            pending = [future for future in self._pending if not future.done()]
            self._pending = set()
        if cancel_futures:
            self._cancel(pending)
        if wait:
            wait_in_task(pending, len(pending), None)  # inside a task, the tasks waited for may run meanwhile
            concurrent.futures.wait(pending)
        if not self._owns_client:
            return
        if wait:
            self._client.disconnect()
        else:  # the tasks go on: disconnect once they have ended
            threading.Thread(target=_disconnect_after, args=(self._client, pending), daemon=True).start()

    # --- internals ------------------------------------------------------------------------------------------------

    def _submit(self, fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: dict) -> ScalerFuture:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._options is None:
                future = self._client.submit(fn, *args, **kwargs)
            else:
                future = self._client.submit_verbose(fn, args, kwargs, **self._options)
            pending = self._pending
            pending.add(future)
            if len(pending) >= self._prune_at:
                self._pending = pending = {known for known in pending if not known.done()}
                self._prune_at = max(_PRUNE_AT, 2 * len(pending))
        return future

    def _cancel(self, futures: Iterable[ScalerFuture]) -> None:
        cancel_without_waiting(self._client, futures)


def cancel_without_waiting(client: Any, futures: Iterable[ScalerFuture]) -> None:
    """Ask the scheduler to cancel every unfinished future at once (`ScalerFuture.cancel` waits for each)."""
    task_ids = [future.task_id for future in futures if future.task_id and not future.done()]
    if task_ids and client.connected:
        try:
            client._cancel_tasks(task_ids)
        except Exception:  # the client closed meanwhile: its futures have failed already
            pass


def _submit_next(submit: Callable[[Any], ScalerFuture], inputs: Iterator[Any]) -> Optional[ScalerFuture]:
    """With ``buffersize``: the next input's task, each time the consumer takes a result (None at the end)."""
    for task_input in inputs:
        return submit(task_input)
    return None


def _results(
    futures: Deque[ScalerFuture],
    end_time: Optional[float],
    chunked: bool,
    refill: Optional[Callable[[], Optional[ScalerFuture]]],
    client: Any,
) -> Iterator[Any]:
    try:
        while futures:
            if refill is not None:
                extra = refill()
                if extra is not None:
                    futures.append(extra)
            future = futures.popleft()
            failure = None
            try:
                value = future.result() if end_time is None else future.result(end_time - time.monotonic())
            except concurrent.futures.TimeoutError:
                cancel_without_waiting(client, [future])
                raise
            except ChunkFailure as raised:
                failure = raised.args
            del future  # the iterator must not keep a result alive once it has been handed out
            if failure is not None:
                results, error, remote_traceback = failure
                del failure
                yield from results
                error.__cause__ = RemoteTraceback(remote_traceback)
                raise error
            if chunked:
                yield from value
            else:
                yield value
            del value
    finally:
        cancel_without_waiting(client, futures)


def _batched(iterable: Iterator[Any], size: int) -> Iterator[List[Any]]:
    while True:
        batch = list(itertools.islice(iterable, size))
        if not batch:
            return
        yield batch


def _disconnect_after(client: Any, futures: List[ScalerFuture]) -> None:
    concurrent.futures.wait(futures)
    client.disconnect()


class ChunkFailure(Exception):
    """Raised by a chunk's task when one of its calls raised: the results before it, the exception, its
    traceback text. The executor's iterator yields those results, then raises the exception itself."""


def run_chunk(fn: Callable[..., Any], chunk: List[Tuple[Any, ...]]) -> List[Any]:
    """The task of one chunk of `ScalerExecutor.map` (runs on a worker)."""
    results = []
    for arguments in chunk:
        try:
            results.append(fn(*arguments))
        except Exception as error:
            raise ChunkFailure(results, error, traceback.format_exc()) from None
    return results
