"""`Client`: submit Python functions to a Scaler scheduler and get futures back."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from scaler.client import current_client
from scaler.client.agent import ClientAgent, close_unreferenced
from scaler.client.call_check import CallChecks
from scaler.client.client_events import Cancel, Clear, PutObject, Shutdown, Submit, SubmitGraph
from scaler.client.dask_calls import DaskCalls
from scaler.client.executor import ScalerExecutor
from scaler.client.future import FutureBatch, ScalerFuture
from scaler.client.graph_builder import (
    BuiltGraph,
    GraphEncoder,
    build_graph,
    collector_paused,
    flatten_keys,
    pack_results,
    to_task_spec,
)
from scaler.client.graph_parser import requested_keys
from scaler.client.nested_references import lift
from scaler.client.object_reference import ObjectReference
from scaler.client.performance_report import PerformanceReport
from scaler.client.progress_bar import ProgressOption, start_progress
from scaler.client.serializer import check_serializer, serialize_payload
from scaler.client.shared_connection import ClientView, shared_connection
from scaler.client.task_builder import INLINE_ARGUMENT_LIMIT, Puts, TaskBuilder, capability_list
from scaler.client.task_stream import TaskStream
from scaler.protocol import object_frames
from scaler.protocol.addresses import check_address
from scaler.protocol.errors import DisconnectedError, ShutdownRefusedError
from scaler.protocol.ids import new_client_id, show
from scaler.protocol.messages import Capability, Task
from scaler.protocol.security import SecurityConfig, peer_keys
from scaler.protocol.task_context import TaskContext, task_context, wait_with_hook
from scaler.protocol.version import GRAPH_PARTS_VERSION, knows

logger = logging.getLogger(__name__)

SCHEDULER_ADDRESS_VARIABLE = "SCALER_SCHEDULER_ADDRESS"
MAP_CHUNK = 1000  # map() hands tasks to the agent this many at a time
GRAPH_PART_SIZE = 10_000  # get() sends a larger graph in parts of this many tasks (to a scheduler of 1.7 on)
# how much longer than its timeout the user thread waits for an answer of the agent thread: the agent's own
# bounds (the timeout from the ask, a full storage server's retries every 0.5 s) end it first, with their own error
ANSWER_MARGIN_SECONDS = 2.0
# how long a client waits for a lost scheduler to come back: a restart (by hand, by systemd, an upgrade) takes
# seconds, a host's reboot a minute; as long as a worker waits for it (scaler_cluster --worker-timeout-seconds)
DEFAULT_RECONNECT_SECONDS = 60.0


class Client(DaskCalls):
    """A connection to a Scaler scheduler.

    ``address`` defaults to the ``SCALER_SCHEDULER_ADDRESS`` environment
    variable (set inside worker processes, so tasks can make a client).
    ``security`` (`scaler.protocol.security.SecurityConfig`) gives the
    client's key pair and the server's public key when the cluster runs with
    keys (docs/security.md); by default they come from the ``SCALER_KEY_FILE``
    and ``SCALER_SERVER_KEY_FILE`` environment variables (set inside tasks by
    their worker), and without them the client connects without keys.

    ``stream_output=True`` shows what each task prints, on this process's stdout
    and stderr as the task prints it, each line prefixed with the task.

    The constructor returns once the scheduler has accepted the client; it
    raises `DisconnectedError` when none answers within ``timeout_seconds``,
    `ProtocolError` when the scheduler refuses it (another protocol version, a
    key it does not know or that is not a client key, keys it requires), and
    `SecurityError` for key files it cannot use. A client that hears nothing
    from the scheduler for ``timeout_seconds`` fails every pending future with
    `DisconnectedError`.

    A client whose connection to the scheduler closes (the scheduler was
    restarted, or the network failed) waits up to ``reconnect_seconds`` for it
    to come back at the same address, saying so in a log line; then it says
    Hello again and sends again every task and graph that has not ended, and
    its futures end as if nothing had happened (a task may run twice,
    docs/scheduling.md). Past that wait they fail with `DisconnectedError`
    naming the address; with ``reconnect_seconds=0`` they fail at once.

    A client pickles as its address and options, without its keys: unpickling
    it connects a new client to the same scheduler. Inside a task (a task
    received it, or made a ``Client()`` without an address) every Client of the
    worker's processor shares one connection to the scheduler that runs the
    task, with the keys of that processor (its worker's task key): there
    `disconnect` stops only that Client, and `clear` cancels only the tasks
    submitted through it.

    Dask's ``gather``, ``scatter``, ``scheduler_info``, ``dashboard_link`` and ``current`` come from `DaskCalls`.
    """

    def __init__(
        self,
        address: Optional[str] = None,
        profiling: bool = False,
        timeout_seconds: float = 10,
        heartbeat_interval_seconds: float = 1,
        serializer: Any = None,
        stream_output: bool = False,
        security: Optional[SecurityConfig] = None,
        reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS,
    ) -> None:
        context = task_context() if address is None else None
        if context is not None:
            address = context.scheduler_address
        elif address is None:
            address = os.environ.get(SCHEDULER_ADDRESS_VARIABLE)
            if not address:
                raise ValueError(
                    f"Client needs the scheduler's address: pass address='tcp://HOST:PORT' "
                    f"or set the {SCHEDULER_ADDRESS_VARIABLE} environment variable"
                )
        check_address(address)
        if timeout_seconds <= 0 or heartbeat_interval_seconds <= 0:
            raise ValueError("timeout_seconds and heartbeat_interval_seconds must be positive")
        if reconnect_seconds < 0:
            raise ValueError("reconnect_seconds must not be negative")
        if serializer is not None:
            check_serializer(serializer)
        keys = peer_keys(security if security is not None else SecurityConfig.from_environment())
        self._address = address
        self._profiling = bool(profiling)
        self._timeout = float(timeout_seconds)
        self._heartbeat_interval = float(heartbeat_interval_seconds)
        self._custom_serializer = serializer
        self._stream_output = bool(stream_output)
        self._reconnect = float(reconnect_seconds)
        self._bounded_wait = min(self._timeout, 5.0)  # cancel confirmation, disconnect response
        self._calls = CallChecks()  # a call that cannot bind fails at submit
        self._dashboard_link: Optional[str] = None  # once asked: the scheduler's answer, "" for none
        if context is not None:
            self._share(context, self._profiling)
            current_client.made(self)
            return

        self._client_id = new_client_id()
        self._builder = builder = TaskBuilder(self._client_id, serializer, self._profiling, self._stream_output)
        self._serializer = builder.serializer  # the futures decode results with it
        self._agent = ClientAgent(
            self._client_id, address, self._timeout, self._heartbeat_interval, self._bounded_wait,
            on_objects_failed=builder.forget,  # the next task puts the failed functions again
            keys=keys, reconnect_seconds=self._reconnect,
        )  # fmt: skip
        builder.send = self._agent.send
        self._agent.connect(self._timeout, self._bounded_wait)
        weakref.finalize(self, close_unreferenced, self._agent)
        current_client.made(self)
        logger.debug(f"Client: {show(self._client_id)} connected to {address}")

    def _share(self, context: TaskContext, profiling: bool) -> None:
        """Inside a processor: this Client is a view on the processor's one connection (`shared_connection`)."""
        connection = shared_connection(
            context, self._timeout, self._heartbeat_interval, self._bounded_wait, self._reconnect
        )
        self._client_id = connection.client_id
        self._builder = connection.builder(self._custom_serializer, profiling)
        self._serializer = self._builder.serializer
        self._agent = ClientView(connection)  # type: ignore[assignment]

    # --- properties, context manager, pickling ----------------------------------------------------------

    @property
    def address(self) -> str:
        return self._address

    @property
    def client_id(self) -> bytes:
        return self._client_id

    identity = client_id  # the earlier engine's name (docs/compatibility.md)

    @property
    def connected(self) -> bool:
        return not self._agent.closed

    def __enter__(self) -> Client:
        current_client.entered(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        current_client.exited(self)
        self.disconnect()

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (
            _unpickle_client,
            (
                self._address,
                self._profiling,
                self._timeout,
                self._heartbeat_interval,
                self._custom_serializer,
                self._stream_output,
                self._reconnect,
            ),
        )

    def __repr__(self) -> str:
        state = "connected" if self.connected else "disconnected"
        return f"<Client {show(self._client_id)} {state} to {self._address}>"

    # --- tasks -------------------------------------------------------------------------------------------------

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ScalerFuture:
        """Run ``fn(*args, **kwargs)`` on a worker; returns its future. A call that cannot bind raises `TypeError`
        here."""
        self._calls.check(fn, args, kwargs)
        puts = Puts()
        task = self._builder.build(*lift(fn, args, kwargs), [], puts)
        future = ScalerFuture(task.task_id, self, self._serializer, self._profiling, self._bounded_wait)
        self._agent.send(Submit([task], puts), {task.task_id: future})
        return future

    def submit_verbose(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        capabilities: Optional[Mapping[str, int]] = None,
        priority: int = 0,
        timeout_seconds: float = 0.0,
        retries: int = 0,
    ) -> ScalerFuture:
        """`submit` with explicit arguments and scheduling options.

        ``capabilities``: what a worker must offer to run the task, e.g. ``{"gpu": -1}`` (it waits for such a
        worker, or fails with `TaskRejectedError` if the scheduler was so told: docs/scheduling.md).
        ``priority``: higher runs first.
        ``timeout_seconds``: the task fails with `TaskTimeoutError` if it runs longer, or is rejected if no
        worker takes it in that time (0: no limit). ``retries``: how many times to run it again if it raises.
        """
        if timeout_seconds < 0 or retries < 0:
            raise ValueError("timeout_seconds and retries must not be negative")
        self._calls.check(fn, args, kwargs or {})
        puts = Puts()
        task = self._builder.build(*lift(fn, tuple(args), kwargs or {}), capability_list(capabilities), puts)
        task.priority = priority
        task.timeout_seconds = float(timeout_seconds)
        task.retries = retries
        future = ScalerFuture(task.task_id, self, self._serializer, self._profiling, self._bounded_wait)
        self._agent.send(Submit([task], puts), {task.task_id: future})
        return future

    def map(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Sequence[Any]],
        *iterables: Iterable[Any],
        progress: ProgressOption = False,
        capabilities: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        """Run ``fn(*arguments)`` for each tuple of arguments; return the results in order.

        ``client.map(math.sqrt, [(i,) for i in range(100)])``. With several iterables, each gives one
        argument, as in the built-in ``map``: ``client.map(add, [1, 2], [10, 20])`` is ``[11, 22]``. The first
        failing task's exception is raised here and the map's other tasks are cancelled. For
        ``map(fn, values)`` over single values use ``client.executor().map``. ``progress=True`` shows a
        bar (docs/interfaces.md); ``capabilities`` as in `submit_verbose`.
        """
        if not callable(fn):
            raise TypeError(f"map() needs a callable, got {type(fn).__name__}")
        if iterables:
            iterable = zip(iterable, *iterables, strict=False)
        needs = capability_list(capabilities)
        futures: List[ScalerFuture] = []
        chunk: List[Task] = []
        chunk_futures: Dict[bytes, ScalerFuture] = {}
        puts = Puts()
        batch = FutureBatch()  # the map waits on this one condition, not on each future
        bar = start_progress(progress, "map")
        build, serializer, profiling, wait = self._builder.build, self._serializer, self._profiling, self._bounded_wait
        check = self._calls.check
        try:
            for arguments in iterable:
                if not isinstance(arguments, (tuple, list)):
                    raise TypeError(
                        f"Client.map() takes an iterable of argument tuples, such as [(1,), (2,)] for f(1), f(2); "
                        f"got an element of type {type(arguments).__name__}. For single values, as in the "
                        f"built-in map(f, values), use client.executor().map(f, values)"
                    )
                check(fn, arguments, {})
                task = build(*lift(fn, tuple(arguments), {}), needs, puts)
                future = ScalerFuture(task.task_id, self, serializer, profiling, wait, batch)
                chunk.append(task)
                futures.append(future)
                chunk_futures[task.task_id] = future
                if len(chunk) >= MAP_CHUNK:
                    self._agent.send(Submit(chunk, puts), chunk_futures)
                    if bar is not None:
                        bar.watch(futures[-len(chunk) :])
                    chunk, chunk_futures, puts = [], {}, Puts()
            if chunk:
                self._agent.send(Submit(chunk, puts), chunk_futures)
                if bar is not None:
                    bar.watch(futures[-len(chunk) :])
                chunk = []
            # Wake on the first failure, wherever it is in the map, not on the first in order.
            batch.close(len(futures))
            wait_with_hook(batch.finished, None, batch.notify)
            batch.wait()
            _raise_first_failure(futures, batch)
            return [future.result() for future in futures]
        except BaseException:
            sent = futures[: len(futures) - len(chunk)]
            pending = [future.task_id for future in sent if not future.done()]
            if pending and not self._agent.closed:
                try:
                    self._agent.send(Cancel(pending))
                except DisconnectedError:
                    pass
            raise
        finally:
            if bar is not None:
                bar.close()

    def starmap(
        self,
        fn: Callable[..., Any],
        iterable: Iterable[Sequence[Any]],
        progress: ProgressOption = False,
        capabilities: Optional[Mapping[str, int]] = None,
    ) -> List[Any]:
        """`map` of one iterable of argument tuples (the name itertools uses for this contract)."""
        return self.map(fn, iterable, progress=progress, capabilities=capabilities)

    def executor(self, **task_options: Any) -> ScalerExecutor:
        """A `concurrent.futures.Executor` over this client (``shutdown`` leaves the client connected).

        ``task_options`` (``capabilities``, ``priority``, ``timeout_seconds``, ``retries``) apply to its tasks.
        """
        return ScalerExecutor(self, **task_options)

    # --- graphs ----------------------------------------------------------------------------------------------

    def get(
        self,
        graph: Mapping[Any, Any],
        keys: Any,
        block: bool = True,
        progress: ProgressOption = False,
        capabilities: Optional[Mapping[str, int]] = None,
    ) -> Dict[Any, Any]:
        """Run a Dask-style graph; return ``{key: result}`` for each requested key.

        ``client.get({"a": 2, "c": (inc, "a")}, keys=["c"])`` returns ``{"c": 3}``. Values are literals
        or tasks ``(function, *arguments)`` whose arguments may be keys, nested tasks, lists, tuples or
        dicts of them, or `ObjectReference`; docs/graphs.md has the rules. Only what the keys need
        runs, sent to the scheduler in dependency order (a large graph in parts of `GRAPH_PART_SIZE` tasks, its
        first nodes running while the rest is read and encoded). A missing key or a cycle raises `GraphKeyError`
        or `GraphCycleError` here: before anything runs for a requested key, or a graph of one part; else the
        tasks already sent are cancelled.

        ``block=False`` returns ``{key: future}`` at once. With ``block=True`` the first failure is
        raised as the failing node's own exception (every key downstream of it fails with it) and the
        graph's other keys are cancelled. ``progress=True`` (with ``block=True``) shows a bar of the requested
        keys' results. ``capabilities`` (as in `submit_verbose`) apply to every task of the graph.
        """
        if progress and not block:
            raise ValueError("progress needs block=True; for the futures of block=False use scaler.progress(futures)")
        bar = start_progress(progress, "graph")  # a bad option is refused before anything is sent
        batch = FutureBatch() if block else None
        futures = self._submit_graph(graph, requested_keys(graph, keys), batch, capability_list(capabilities))
        if batch is None:
            return futures
        distinct = list({id(future): future for future in futures.values()}.values())
        try:
            if bar is not None:
                bar.watch(distinct)
            wait_with_hook(batch.finished, None, batch.notify)  # inside a task: the worker helps
            batch.wait()
            _raise_first_failure(distinct, batch)
            return {key: future.result() for key, future in futures.items()}
        except BaseException:
            pending = [future.task_id for future in distinct if future.task_id and not future.done()]
            if pending and not self._agent.closed:
                try:
                    self._agent.send(Cancel(pending))
                except DisconnectedError:
                    pass
            raise
        finally:
            if bar is not None:
                bar.close()

    def dask_get(self, dsk: Mapping[Any, Any], keys: Any, progress: ProgressOption = False, **kwargs: Any) -> Any:
        """A Dask scheduler: ``dask.compute(collection, scheduler=client.dask_get)``.

        Dask's ``get(dsk, keys, **kwargs)`` contract: ``keys`` is a key or nested lists of keys, and the
        results come back in that shape (a list of keys gives a tuple, as Dask's own schedulers do).
        Classic tuple tasks and task-spec nodes are both accepted; Dask's other options are ignored.
        ``progress=True`` shows a bar (``functools.partial(client.dask_get, progress=True)`` as the scheduler).
        """
        flat = list(dict.fromkeys(flatten_keys(keys)))  # dask.compute(x, x) asks for x's keys twice
        values = self.get(to_task_spec(dsk), flat, progress=progress)
        return pack_results(keys, values)

    def _submit_graph(
        self,
        graph: Mapping[Any, Any],
        keys: List[Any],
        batch: Optional[FutureBatch] = None,
        capabilities: Optional[List[Capability]] = None,
    ) -> Dict[Any, ScalerFuture]:
        builder = self._builder
        serializer_id = builder.serializer_id()
        encoder = GraphEncoder(
            builder.ids.next_id, builder.function_id, functools.partial(serialize_payload, self._serializer),
            serializer_id, self._client_id, INLINE_ARGUMENT_LIMIT,
        )  # fmt: skip
        part_size = GRAPH_PART_SIZE if knows(self._agent.scheduler_version, GRAPH_PARTS_VERSION) else None
        with collector_paused():
            return self._build_and_send_graph(graph, keys, encoder, part_size, batch, capabilities)

    def _build_and_send_graph(
        self,
        graph: Mapping[Any, Any],
        keys: List[Any],
        encoder: GraphEncoder,
        part_size: Optional[int],
        batch: Optional[FutureBatch],
        capabilities: Optional[List[Capability]],
    ) -> Dict[Any, ScalerFuture]:
        built = build_graph(graph, keys, encoder, part_size)
        serializer_id = encoder.serializer_id
        targets = {
            target: ScalerFuture(target, self, self._serializer, self._profiling, self._bounded_wait, batch)
            for target in built.targets
        }
        if batch is not None:
            batch.close(len(targets))
        futures: Dict[Any, ScalerFuture] = {}
        for key in keys:
            if key in built.key_targets:
                futures[key] = targets[built.key_targets[key]]
            else:  # the key is a literal: no task
                futures[key] = ScalerFuture(b"", None, self._serializer, False)
                futures[key]._set_value(built.key_values[key])
        if targets:
            self._send_graph(built, serializer_id, targets, capabilities)
        return futures

    def _send_graph(
        self,
        built: BuiltGraph,
        serializer_id: bytes,
        targets: Dict[bytes, ScalerFuture],
        capabilities: Optional[List[Capability]],
    ) -> None:
        """Each part to the agent as it is encoded (the first with the targets and the serializer); a part that
        cannot be encoded cancels the graph."""
        first = True
        try:
            for part in built.parts:
                for task in part.message.tasks:
                    task.profiling = self._profiling
                    task.stream_output = self._stream_output
                    if capabilities:
                        task.capabilities = capabilities
                temporary = [object_id for object_id, _ in part.puts]
                requires = [*part.function_ids, *temporary, *([serializer_id] if first and serializer_id else [])]
                event = SubmitGraph(part.message, part.puts, requires, temporary, part.function_ids)
                if first:
                    event.targets = built.targets
                self._agent.send(event, targets if first else None)
                first = False
        except BaseException:
            if not first and not self._agent.closed:
                self._agent.send(Cancel(built.targets))
            raise

    # --- objects ---------------------------------------------------------------------------------------------

    def send_object(self, obj: Any, name: Optional[str] = None) -> ObjectReference:
        """Put ``obj`` in object storage once; pass the reference as a task argument instead of the object (also
        inside the lists, tuples and dicts of an argument). It lives until this client leaves or clears."""
        (reference,) = self._put_all([obj], name)
        return reference

    def _put_all(self, values: List[Any], name: Optional[str] = None) -> List[ObjectReference]:
        """Put each of ``values`` in object storage, all the requests at once; their references."""
        references, replies = [], []
        for value in values:
            data = serialize_payload(self._serializer, value)
            object_id = self._builder.ids.next_id()
            replies.append(self._agent.ask(PutObject, object_id, data))
            label = name if name is not None else type(value).__name__
            references.append(ObjectReference(object_id=object_id, name=label, size=object_frames.size(data)))
        for reply in replies:
            self._wait(reply, "the object storage server")
        return references

    def clear(self) -> None:
        """Cancel every task of this client and delete every object it sent; pending futures become cancelled."""
        self._builder.forget()
        self._wait(self._agent.ask(Clear), "the scheduler")

    # --- seeing the tasks run --------------------------------------------------------------------------------

    def task_stream(self) -> TaskStream:
        """``with client.task_stream() as stream: ...``: ``stream.records`` lists the runs of this client's tasks
        (and of the tasks of the Clients made in them) while the block ran, for a notebook to plot
        (docs/monitoring.md).
        `ProtocolError` with a scheduler older than protocol 1.8."""
        if isinstance(self._agent, ClientView):
            raise RuntimeError("a task stream is made by a Client outside a task, not by one inside a task")
        return TaskStream(self._agent, self._timeout)

    def performance_report(self, filename: str) -> PerformanceReport:
        """``with client.performance_report("report.html"): ...`` writes, when the block ends, one HTML file that
        opens offline: the task stream of the tasks the block ran, per-function totals, worker utilisation and
        the time range (docs/monitoring.md)."""
        return PerformanceReport(self.task_stream(), filename, show(self._client_id))

    # --- leaving -------------------------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Leave the scheduler (it cancels this client's tasks); pending futures end cancelled (as leaving a
        ``with`` block does)."""
        reply = self._agent.disconnect()
        if not self._agent.in_agent_thread():
            try:
                reply.result(timeout=self._bounded_wait + 5)
            except Exception:
                pass
            self._agent.join(self._bounded_wait)

    close = disconnect  # Dask's name

    def shutdown(self) -> bool:
        """Ask the scheduler to shut down (with its workers); True once it accepted. `ShutdownRefusedError` when
        it refuses (a scheduler started with ``--protected``); the client stays connected then."""
        accepted, reason = self._wait(self._agent.ask(Shutdown), "the scheduler")
        if not accepted:
            raise ShutdownRefusedError(f"the scheduler at {self._address} refused to shut down: {reason}")
        self._agent.abort(DisconnectedError(f"the scheduler at {self._address} was shut down by this client"))
        self._agent.join(self._bounded_wait)
        return True

    # --- internals ---------------------------------------------------------------------------------------------

    def _cancel_tasks(self, task_ids: Sequence[bytes]) -> None:
        self._agent.send(Cancel(task_ids))

    def _in_agent_thread(self) -> bool:
        return self._agent.in_agent_thread()

    def _wait(self, reply: Any, peer: str) -> Any:
        try:
            return reply.result(timeout=self._timeout + ANSWER_MARGIN_SECONDS)
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError on 3.10
            raise DisconnectedError(f"{peer} did not answer within {self._timeout:g}s") from None


def _raise_first_failure(futures: List[ScalerFuture], batch: FutureBatch) -> None:
    """After a batch wait: raise the exception (or CancelledError) of the first failed future, in order."""
    if not batch.failed:
        return
    for future in futures:
        if future.cancelled() or (future.done() and future._exception is not None):
            future.result()  # raises


def _unpickle_client(
    address: str,
    profiling: bool,
    timeout_seconds: float,
    heartbeat_interval_seconds: float,
    serializer: Any,
    stream_output: bool = False,
    reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS,
) -> Client:
    """A pickled Client comes back connected to the same scheduler; inside a processor (a task received it)
    as a view on the processor's one connection to the scheduler that runs the task."""
    if task_context() is not None:
        address = None  # type: ignore[assignment]
    return Client(
        address, profiling, timeout_seconds, heartbeat_interval_seconds, serializer, stream_output,
        reconnect_seconds=reconnect_seconds,
    )  # fmt: skip
