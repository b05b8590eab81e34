"""Ray's task API on a Scaler cluster: ``import scaler.compat.ray as ray`` and a simple Ray script runs here.

    import scaler.compat.ray as ray

    ray.init("tcp://127.0.0.1:2345")   # or ray.init(): a local cluster, or the cluster running this task

    @ray.remote
    def square(x):
        return x * x

    print(ray.get([square.remote(i) for i in range(4)]))   # [0, 1, 4, 9]

Provided: `init`, `shutdown`, `is_initialized`, `remote` (functions, with ``num_returns``, ``max_retries``,
``retry_exceptions`` and ``.options``), `get`, `wait`, `put`, `cancel` and `exceptions`. Ray actors (``@remote``
on a class) are refused with an error saying so. docs/interfaces.md lists what differs from Ray.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from scaler.client.client import SCHEDULER_ADDRESS_VARIABLE, Client
from scaler.client.object_reference import ObjectReference
from scaler.client.task_waits import wait_in_task
from scaler.compat.ray import exceptions
from scaler.protocol.errors import TaskCancelledError

__all__ = [
    "ObjectRef",
    "RemoteFunction",
    "cancel",
    "exceptions",
    "get",
    "init",
    "is_initialized",
    "put",
    "remote",
    "shutdown",
    "wait",
]

# Options of ray.init that change nothing on Scaler (logging and dashboard settings); others are refused.
_IGNORED_INIT_OPTIONS = frozenset(
    ("include_dashboard", "dashboard_host", "dashboard_port", "logging_level", "log_to_driver", "configure_logging",
     "namespace")
)  # fmt: skip
_TASK_OPTIONS = frozenset(("num_returns", "max_retries", "retry_exceptions", "num_cpus", "name"))
_RAY_DEFAULT_MAX_RETRIES = 3


# --- the connection ------------------------------------------------------------------------------------------------


class _Session:
    """The client this module submits through, and the local cluster `init` started, if any."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client: Optional[Client] = None
        self.owns_client = False
        self.cluster: Any = None


_session = _Session()


def init(
    address: Optional[str] = None,
    *,
    num_cpus: Optional[int] = None,
    client: Optional[Client] = None,
    ignore_reinit_error: bool = False,
    **options: Any,
) -> None:
    """Connect to a Scaler scheduler, as ``ray.init`` connects to a Ray cluster.

    ``address``: ``"tcp://HOST:PORT"`` of a Scaler scheduler; ``None`` or ``"auto"``: the scheduler in the
    ``SCALER_SCHEDULER_ADDRESS`` environment variable (set inside tasks), else a local cluster of ``num_cpus``
    workers (default: the CPU count) that `shutdown` stops. ``client``: use this connected `Client`.
    """
    unknown = sorted(set(options) - _IGNORED_INIT_OPTIONS)
    if unknown:
        raise TypeError(f"scaler.compat.ray.init() does not support {', '.join(unknown)}")
    if address is not None and address.startswith("ray://"):
        raise ValueError(f"{address!r} is a Ray address; give the Scaler scheduler's address, tcp://HOST:PORT")
    with _session.lock:
        if _session.client is not None:
            if ignore_reinit_error:
                return
            raise RuntimeError("scaler.compat.ray.init() was already called; call shutdown() first")
        _connect(address, num_cpus, client)


def _connect(address: Optional[str], num_cpus: Optional[int], client: Optional[Client]) -> None:
    """With the session lock held."""
    if client is not None:
        _session.client, _session.owns_client = client, False
        return
    if address in (None, "auto"):
        address = os.environ.get(SCHEDULER_ADDRESS_VARIABLE) or None
    if address is None:
        try:
            from scaler.cluster.combo import SchedulerClusterCombo
        except ImportError as error:
            raise ImportError(
                "scaler.compat.ray.init() without an address starts a local cluster, which needs the scheduler "
                "and worker components: pip install scaler (or pass the address of a running scheduler)"
            ) from error
        _session.cluster = SchedulerClusterCombo(  # its warnings on stderr, as Ray's: the program's stdout is its own
            n_workers=num_cpus or os.cpu_count() or 1, logging_level="WARNING", logging_paths=("/dev/stderr",)
        )
        address = _session.cluster.get_address()
    try:
        _session.client, _session.owns_client = Client(address=address), True
    except BaseException:
        _stop_cluster()
        raise


def shutdown() -> None:
    """Disconnect (a client given to `init` stays connected) and stop the local cluster `init` started."""
    with _session.lock:
        client, owns = _session.client, _session.owns_client
        _session.client, _session.owns_client = None, False
        if client is not None and owns:
            client.disconnect()
        _stop_cluster()


def _stop_cluster() -> None:
    cluster, _session.cluster = _session.cluster, None
    if cluster is not None:
        cluster.shutdown()


def is_initialized() -> bool:
    return _session.client is not None


def _client() -> Client:
    """The session's client; the first use without `init` calls it, as Ray does."""
    client = _session.client
    if client is not None:
        return client
    with _session.lock:
        if _session.client is None:
            _connect(None, None, None)
        assert _session.client is not None
        return _session.client


# --- object references ---------------------------------------------------------------------------------------------


class ObjectRef:
    """A value to come: the result of a `.remote()` call (one of them, with ``num_returns``) or of `put`.

    Passed directly as an argument of ``.remote()``, the task waits for it (on the client) and receives its
    value; a `put` value is read from object storage by the worker. Inside a list or other container it is
    resolved when the task is sent: the ``.remote()`` call then waits for it.
    """

    __slots__ = ("_future", "_index", "_stored")

    def __init__(
        self,
        future: concurrent.futures.Future,
        index: Optional[Tuple[int, int]] = None,
        stored: Optional[ObjectReference] = None,
    ) -> None:
        self._future = future  # its result is the task's return value (all of them, with num_returns)
        self._index = index  # with num_returns: (which return, num_returns)
        self._stored = stored  # the put value's copy in object storage

    def future(self) -> concurrent.futures.Future:
        """A `concurrent.futures.Future` of the task (of all its returns, with ``num_returns``)."""
        return self._future

    def __repr__(self) -> str:
        state = "ready" if self._future.done() else "pending"
        index = "" if self._index is None else f" return {self._index[0]}"
        return f"<ObjectRef{index} {state}>"

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (_ready_ref, (self._value(None),))

    def _value(self, timeout: Optional[float]) -> Any:
        future = self._future
        try:
            value = future.result(wait_in_task([future], 1, timeout))  # no room held inside a task
        except concurrent.futures.CancelledError:
            raise TaskCancelledError("the task of this ObjectRef was cancelled") from None
        if self._index is None:
            return value
        index, count = self._index
        if not isinstance(value, (tuple, list)) or len(value) != count:
            got = f"{len(value)} values" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
            raise ValueError(f"the task returned {got}, but num_returns={count}")
        return value[index]


def _ready_ref(value: Any) -> ObjectRef:
    """An ObjectRef that was resolved before it travelled (inside a task's arguments)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return ObjectRef(future)


def put(value: Any) -> ObjectRef:
    """Store ``value`` once in object storage; pass the returned ref to any number of tasks."""
    if isinstance(value, ObjectRef):
        raise TypeError("put() of an ObjectRef is not allowed: pass the ObjectRef itself")
    stored = _client().send_object(value)
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return ObjectRef(future, stored=stored)


def get(object_refs: Union[ObjectRef, Sequence[ObjectRef]], *, timeout: Optional[float] = None) -> Any:
    """The value of a ref, or the list of values of a list of refs; a task's exception is raised as itself.

    ``timeout`` (seconds, for all of them): `exceptions.GetTimeoutError` when they are not ready by then.
    """
    single = isinstance(object_refs, ObjectRef)
    refs = [object_refs] if isinstance(object_refs, ObjectRef) else _ref_list(object_refs, "get")
    deadline = None if timeout is None else time.monotonic() + timeout
    values = []
    for ref in refs:
        try:
            values.append(ref._value(None if deadline is None else max(0.0, deadline - time.monotonic())))
        except concurrent.futures.TimeoutError:
            raise exceptions.GetTimeoutError(f"get() timed out after {timeout:g}s") from None
    return values[0] if single else values


def wait(
    object_refs: Sequence[ObjectRef],
    *,
    num_returns: int = 1,
    timeout: Optional[float] = None,
    fetch_local: bool = True,
) -> Tuple[List[ObjectRef], List[ObjectRef]]:
    """``(ready, not_ready)``: the first ``num_returns`` refs that are ready (or all ready ones at ``timeout``),
    and the others, both in the order given. A failed task counts as ready (`get` raises its exception)."""
    refs = _ref_list(object_refs, "wait")
    if len({id(ref) for ref in refs}) != len(refs):
        raise ValueError("wait() requires a list of unique ObjectRefs")
    if not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns must be between 1 and the number of refs ({len(refs)}), got {num_returns}")
    if timeout is not None and timeout < 0:
        raise ValueError("timeout must not be negative")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        ready = [ref for ref in refs if ref._future.done()]
        remaining = None if deadline is None else deadline - time.monotonic()
        if len(ready) >= num_returns or (remaining is not None and remaining <= 0):
            break
        pending = [ref._future for ref in refs if not ref._future.done()]
        remaining = wait_in_task(pending, 1, remaining)
        concurrent.futures.wait(pending, remaining, return_when=concurrent.futures.FIRST_COMPLETED)
    chosen = {id(ref) for ref in ready[:num_returns]}
    return [ref for ref in refs if id(ref) in chosen], [ref for ref in refs if id(ref) not in chosen]


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task of this ref (running or queued: a worker stops a task it runs); `get` then raises
    `exceptions.TaskCancelledError`."""
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() takes an ObjectRef, got {type(object_ref).__name__}")
    object_ref._future.cancel()


def _ref_list(object_refs: Any, caller: str) -> List[ObjectRef]:
    if isinstance(object_refs, (str, bytes)) or not hasattr(object_refs, "__iter__"):
        raise ValueError(f"{caller}() takes an ObjectRef or a list of ObjectRefs, got {type(object_refs).__name__}")
    refs = list(object_refs)
    for ref in refs:
        if not isinstance(ref, ObjectRef):
            raise ValueError(f"{caller}() takes ObjectRefs only, got an element of type {type(ref).__name__}")
    return refs


# --- remote functions ---------------------------------------------------------------------------------------------


class RemoteFunction:
    """A function made remote by `remote`: ``f.remote(*args, **kwargs)`` runs it as a Scaler task."""

    def __init__(self, function: Callable[..., Any], options: Dict[str, Any]) -> None:
        self._function = function
        self._options = options
        self._num_returns, self._retries = _task_options(options, getattr(function, "__name__", "function"))

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Submit the call; an `ObjectRef` (a list of ``num_returns`` refs when that is above 1)."""
        future = _submit(self._function, args, kwargs, self._retries)
        if self._num_returns == 1:
            return ObjectRef(future)
        return [ObjectRef(future, (index, self._num_returns)) for index in range(self._num_returns)]

    def options(self, **options: Any) -> RemoteFunction:
        """The same function with these options changed, as Ray's ``f.options(num_returns=2).remote(...)``."""
        return RemoteFunction(self._function, {**self._options, **options})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self._function, "__name__", "function")
        raise TypeError(f"remote functions cannot be called directly: instead of {name}(), call {name}.remote()")

    def __repr__(self) -> str:
        return f"<RemoteFunction {getattr(self._function, '__qualname__', self._function)!r}>"


def remote(*args: Any, **options: Any) -> Any:
    """``@remote`` or ``@remote(num_returns=2, max_retries=3, retry_exceptions=False)`` on a function.

    ``num_returns``: the function returns that many values, each with its own ref. ``max_retries`` with
    ``retry_exceptions=True``: a call that raises runs again up to that many times (Scaler's ``retries``); a
    process that dies is run again by the scheduler anyway (``--max-task-deaths``). ``num_cpus`` and ``name``
    are accepted and ignored: a Scaler worker runs one task at a time.
    """
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("remote() takes a function, or only keyword options: @remote(num_returns=2)")
    return lambda function: _make_remote(function, options)


def _make_remote(function: Any, options: Dict[str, Any]) -> RemoteFunction:
    if isinstance(function, type):
        raise TypeError(
            f"scaler.compat.ray runs remote functions, not actors: @remote on class {function.__name__} is not "
            "supported. Keep the state in the caller and pass it to remote functions (or return it from them)."
        )
    if not callable(function):
        raise TypeError(f"remote() takes a function, got {type(function).__name__}")
    return RemoteFunction(function, options)


def _task_options(options: Dict[str, Any], name: str) -> Tuple[int, int]:
    """(num_returns, retries) from a remote function's options; a clear error for any other option."""
    unknown = sorted(set(options) - _TASK_OPTIONS)
    if unknown:
        raise TypeError(
            f"{name}: scaler.compat.ray does not support the option(s) {', '.join(unknown)} "
            f"(supported: {', '.join(sorted(_TASK_OPTIONS))})"
        )
    num_returns = options.get("num_returns", 1)
    if not isinstance(num_returns, int) or isinstance(num_returns, bool) or num_returns < 1:
        raise ValueError(f"{name}: num_returns must be a positive integer, got {num_returns!r}")
    max_retries = options.get("max_retries", _RAY_DEFAULT_MAX_RETRIES)
    if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < -1:
        raise ValueError(f"{name}: max_retries must be an integer >= -1, got {max_retries!r}")
    retry_exceptions = options.get("retry_exceptions", False)
    if not isinstance(retry_exceptions, bool):
        raise TypeError(f"{name}: retry_exceptions must be True or False (lists of exception types are not supported)")
    if not retry_exceptions:
        return num_returns, 0
    if max_retries == -1:
        raise ValueError(f"{name}: retry_exceptions=True needs a finite max_retries, not -1")
    return num_returns, max_retries


# --- submission, and arguments that are refs to results still to come ----------------------------------------------


def _submit(function: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], retries: int) -> Any:
    client = _client()
    waiting = [
        value._future
        for value in (*args, *kwargs.values())
        if isinstance(value, ObjectRef) and value._stored is None and not value._future.done()
    ]
    if waiting:
        return _Deferred(client, function, args, kwargs, retries, waiting)
    return _send(client, function, args, kwargs, retries)


def _send(client: Client, function: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], retries: int):
    """Submit with every direct ref argument replaced: a put by its stored object, a task ref by its value."""
    try:
        args = tuple(_argument(value) for value in args)
        kwargs = {name: _argument(value) for name, value in kwargs.items()}
    except BaseException as error:  # an argument's task failed or was cancelled: so does this one, unrun
        failed: concurrent.futures.Future = concurrent.futures.Future()
        failed.set_exception(error)
        return failed
    if retries:
        return client.submit_verbose(function, args, kwargs, retries=retries)
    return client.submit(function, *args, **kwargs)


def _argument(value: Any) -> Any:
    if not isinstance(value, ObjectRef):
        return value
    if value._stored is not None:
        return value._stored
    return value._value(None)


class _Deferred(concurrent.futures.Future):
    """The future of a task whose ref arguments are not ready yet: it is sent once they all are (by one
    dispatch thread, not by the client's agent thread that ends the arguments' futures), and this future then
    follows the task's."""

    def __init__(self, client: Client, function: Callable[..., Any], args, kwargs, retries: int, waiting) -> None:
        super().__init__()
        self._inner: Optional[concurrent.futures.Future] = None
        self._call = (client, function, args, kwargs, retries)
        self._left = len(waiting)
        self._count_lock = threading.Lock()
        for future in waiting:
            future.add_done_callback(self._argument_ended)

    def cancel(self) -> bool:
        inner = self._inner
        if inner is not None:
            return inner.cancel()
        return super().cancel()

    def _argument_ended(self, _: concurrent.futures.Future) -> None:
        with self._count_lock:
            self._left -= 1
            if self._left:
                return
        _dispatcher().submit(self._launch)

    def _launch(self) -> None:
        if not self.set_running_or_notify_cancel():  # cancelled while it waited
            return
        try:
            inner = _send(*self._call)
        except BaseException as error:
            self.set_exception(error)
            return
        self._call = None  # type: ignore[assignment]
        self._inner = inner
        inner.add_done_callback(lambda done: _dispatcher().submit(self._follow, done))

    def _follow(self, inner: concurrent.futures.Future) -> None:
        if inner.cancelled():
            self.set_exception(TaskCancelledError("the task of this ObjectRef was cancelled"))
            return
        error = inner.exception()
        if error is not None:
            self.set_exception(error)
        else:
            self.set_result(inner.result())


_dispatch_lock = threading.Lock()
_dispatch_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _dispatcher() -> concurrent.futures.ThreadPoolExecutor:
    global _dispatch_pool
    with _dispatch_lock:
        if _dispatch_pool is None:
            _dispatch_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ScalerRayDependencies")
        return _dispatch_pool
