"""The processor: the subprocess that runs the tasks' user code.

Started by the agent with the multiprocessing "spawn" context, so it inherits
nothing of the agent's ZeroMQ state. It reads `ProcessorTask`s from its Pipe
into a local FIFO (the agent sends a few ahead), runs them one after another in
its main thread and writes back their `ProcessorResult`s, several in one
message during a run of quick tasks. It never talks to the scheduler or the
storage server: a cancel, a timeout or a crash costs the agent only this
process, which it replaces.

Nested tasks: the processor installs a wait hook in the Scaler client
(`scaler.protocol.wait_hook`). When a task waits there (on `result()` of a
task it submitted, in `Client.map`, ...), the hook tells the agent, runs the
tasks the agent sends meanwhile on the same stack (each may wait in turn), and
checks between them, and every few milliseconds while it has none, whether
what the task waits for is done; then the task goes on. A waiting task thus
costs a few stack frames, not a process or a thread, and never holds the
worker: its children (and anything else queued) run in its place. See
`processor_protocol` for the conversation with the agent.

Keep this module's imports light: every processor start imports it.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import traceback
import tracemalloc
from collections import deque
from multiprocessing.connection import Connection
from pickle import PickleBuffer
from typing import Any, Callable, Deque, Dict, List, NoReturn, Optional, Set, Tuple

import cloudpickle

from scaler.client.serializer import DefaultSerializer, deserialize_payload, serialize_payload
from scaler.protocol import object_frames
from scaler.protocol.messages import TaskStatus
from scaler.protocol.process_control import die_with_parent, reuse_payload_memory
from scaler.protocol.wait_hook import set_wait_hook
from scaler.worker.lru_cache import LRUCache, SizedLRUCache
from scaler.worker.processor_protocol import (
    RESULT_HOLD_SECONDS,
    RESULT_HOLD_TASK_SECONDS,
    WAIT_CHECK_INTERVAL_SECONDS,
    Drop,
    Dropped,
    PipeEnd,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
    WaitEnded,
)
from scaler.worker.task_failure import failure_payload

SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_SCHEDULER_ADDRESS"
WORKER_ID_ENVIRONMENT_VARIABLE = "SCALER_WORKER_ID"
# Nested tasks stack up in the main thread, a few frames per level: allow deeper recursion than Python's 1000
# (a level costs well under 1 KiB of C stack on Python 3.11+; 10,000 frames of C recursion fit the usual 8 MiB)
RECURSION_LIMIT = 10_000


_DEFAULT_SERIALIZER = DefaultSerializer()  # of tasks whose client did not choose one


class _Loaded:
    """A cached function or serializer, or the exception raised while loading it (so that the cache,
    which the agent mirrors, holds an entry either way)."""

    __slots__ = ("value", "error", "traceback_text", "name")

    def __init__(self, payload: bytes) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.traceback_text = ""
        self.name = ""  # module.qualname, reported with each result for monitors
        try:
            self.value = cloudpickle.loads(payload)
        except Exception as error:
            self.error = error
            self.traceback_text = traceback.format_exc()
        else:
            self.name = _qualified_name(self.value)


def _qualified_name(value: Any) -> str:
    """``module.qualname`` of a function (of the function inside a ``functools.partial``), or of its type."""
    if isinstance(value, functools.partial):
        value = value.func
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    module = getattr(value, "__module__", None)
    return f"{module}.{name}" if module else name


class _Accepted:
    """A task read from the Pipe, with what it needs taken from (or put in) the caches as it was read."""

    __slots__ = ("task", "function", "serializer", "arguments", "problem")

    def __init__(self, task: ProcessorTask, function: _Loaded, serializer: Optional[_Loaded], arguments) -> None:
        self.task = task
        self.function = function
        self.serializer = serializer
        self.arguments: List[Tuple[str, Optional[bytes], bytes]] = arguments
        self.problem: Optional[BaseException] = None


class _Frame:
    """A task on the processor's stack, with what its profiling needs."""

    __slots__ = ("task_id", "started", "cpu_started", "nested_cpu", "memory_base", "memory_peak", "traces")

    def __init__(self, task_id: bytes) -> None:
        self.task_id = task_id
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()
        self.nested_cpu = 0.0  # CPU seconds of the tasks that ran nested in this one
        self.memory_base = 0
        self.memory_peak = 0
        self.traces = False  # this task started tracemalloc (the outermost profiled task does)


def run_processor(
    connection: Connection,
    agent_pid: int,
    scheduler_address: str,
    worker_id: str,
    function_cache_capacity: int,
    serializer_cache_capacity: int,
    object_cache_bytes: int,
    environment: Optional[Dict[str, str]] = None,
) -> None:
    """The processor's main function (the target of its multiprocessing.Process). ``environment``: variables for
    the tasks (the keys of their Clients)."""
    die_with_parent(signal.SIGKILL, agent_pid)
    reuse_payload_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the agent, which then stops us
    os.environ[SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE] = scheduler_address
    os.environ[WORKER_ID_ENVIRONMENT_VARIABLE] = worker_id
    os.environ.update(environment or {})
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    processor = _Processor(connection, function_cache_capacity, serializer_cache_capacity, object_cache_bytes)
    set_wait_hook(processor.help_while_waiting)
    processor.serve()


class _Processor:
    def __init__(
        self,
        connection: Connection,
        function_cache_capacity: int,
        serializer_cache_capacity: int,
        object_cache_bytes: int,
    ) -> None:
        self._pipe = PipeEnd(connection)
        self._functions: LRUCache[bytes, _Loaded] = LRUCache(function_cache_capacity)
        self._serializers: LRUCache[bytes, _Loaded] = LRUCache(serializer_cache_capacity)
        self._objects: SizedLRUCache[bytes, Any] = SizedLRUCache(object_cache_bytes)  # ID -> payload
        self._stack: List[_Frame] = []  # the tasks running here, the top one last
        self._fifo: Deque[_Accepted] = deque()  # tasks sent ahead, not started: they run at the top, in order
        self._out: List[Any] = []  # messages for the agent not sent yet (results held during quick tasks)
        self._held_since = 0.0
        self._wait_ended: Set[bytes] = set()  # tasks the agent let resume (read by a wait above theirs, maybe)
        self._main_thread_id = threading.main_thread().ident
        self._handlers: Dict[type, Callable[[Any], None]] = {
            list: self._on_list,
            ProcessorTask: self._on_task,
            Drop: self._on_drop,
            WaitEnded: self._on_wait_ended,
        }

    def serve(self) -> None:
        """Run the tasks the agent sends until it closes the Pipe."""
        pipe = self._pipe
        fifo = self._fifo
        handlers = self._handlers
        while True:
            if not fifo:
                self._flush()
                try:
                    message = pipe.receive()
                except (EOFError, OSError):  # the agent closed the pipe or is gone
                    return
                handlers[type(message)](message)
                continue
            self._drain()  # a Drop, more tasks, ... that came meanwhile are seen before the next task starts
            if not fifo:
                continue
            accepted = fifo.popleft()
            frame = _Frame(accepted.task.task_id)
            self._stack.append(frame)
            try:
                result = self._run(accepted, frame)
            finally:
                self._stack.pop()
            _flush_standard_streams()
            now = time.perf_counter()
            self._emit(result, now)
            # hold the result for company only during a run of quick tasks, and never long
            if fifo and result.seconds < RESULT_HOLD_TASK_SECONDS and now - self._held_since < RESULT_HOLD_SECONDS:
                continue
            self._flush()

    def help_while_waiting(self, done: Callable[[], bool], timeout: Optional[float]) -> None:
        """The Scaler client's wait hook: run the agent's tasks here until ``done()`` or ``timeout``."""
        if not self._stack or threading.get_ident() != self._main_thread_id:
            return  # not a task's own wait (a thread of the task, or outside any task): wait as usual
        if timeout is not None and timeout <= 0:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        task_id = self._stack[-1].task_id
        pipe = self._pipe
        self._send(TaskWaiting(task_id, True))
        try:
            while True:
                checked = time.perf_counter()
                if done():
                    break
                # a check costs at most a tenth of the wait (a map of 100,000 futures checks them all)
                interval = max(WAIT_CHECK_INTERVAL_SECONDS, 10 * (time.perf_counter() - checked))
                if deadline is not None:
                    interval = min(interval, deadline - time.monotonic())
                    if interval <= 0:
                        break
                if pipe.poll(interval):
                    self._handle(self._receive())
                    self._flush()  # Dropped answers: the tasks taken back may be what this task waits for
        finally:
            self._send(TaskWaiting(task_id, False))
            wait_ended = self._wait_ended
            while task_id not in wait_ended:  # what the agent sent before it read our notice runs first
                self._handle(self._receive())
                self._flush()
            wait_ended.discard(task_id)

    # ------------------------------------------------------------------------- the pipe

    def _receive(self) -> Any:
        try:
            return self._pipe.receive()
        except (EOFError, OSError):
            _agent_gone()

    def _drain(self) -> None:
        pipe = self._pipe
        try:
            while pipe.poll(0):
                self._handle(self._receive())
        except (EOFError, OSError):
            _agent_gone()

    def _emit(self, message: Any, now: Optional[float] = None) -> None:
        """Queue ``message`` for the agent (sent by the next `_flush`)."""
        if not self._out:
            self._held_since = time.perf_counter() if now is None else now
        self._out.append(message)

    def _send(self, message: Any) -> None:
        """Send ``message`` now, after anything held."""
        self._out.append(message)
        self._flush()

    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        try:
            self._pipe.send(out[0] if len(out) == 1 else out)
        except (OSError, ValueError):
            _agent_gone()

    def _handle(self, message: Any) -> None:
        self._handlers[type(message)](message)

    def _on_list(self, messages: List[Any]) -> None:
        """Tasks sent ahead (and maybe other messages): tasks go to the FIFO, to run at the top in order."""
        handlers = self._handlers
        fifo = self._fifo
        for message in messages:
            if type(message) is ProcessorTask:
                fifo.append(self._accept(message))
            else:
                handlers[type(message)](message)

    def _on_task(self, task: ProcessorTask) -> None:
        """A single task: inside a wait it runs now, nested on the waiting task; idle, it goes to the FIFO."""
        accepted = self._accept(task)
        if not self._stack:
            self._fifo.append(accepted)
            return
        frame = _Frame(task.task_id)
        self._stack.append(frame)
        try:
            result = self._run(accepted, frame)
        finally:
            self._stack.pop()
        _flush_standard_streams()
        self._send(result)

    def _on_drop(self, drop: Drop) -> None:
        fifo = self._fifo
        for position, accepted in enumerate(fifo):
            if accepted.task.task_id == drop.task_id:
                del fifo[position]
                self._emit(Dropped(drop.task_id))
                return
        # started already (or unknown): its result answers the agent

    def _on_wait_ended(self, message: WaitEnded) -> None:
        self._wait_ended.add(message.task_id)

    # ------------------------------------------------------------------------- one task

    def _accept(self, task: ProcessorTask) -> _Accepted:
        """Take what ``task`` needs from the caches, or put it there, as the agent's mirror of them assumes:
        when the task is read, whether it then runs or is dropped."""
        function = self._load(self._functions, task.function_id, task.function, "function")
        serializer = None
        if task.serializer_id:
            serializer = self._load(self._serializers, task.serializer_id, task.serializer, "serializer")
        arguments = task.arguments
        accepted = _Accepted(task, function, serializer, arguments)
        for _, _, object_id in arguments:
            if object_id:
                accepted.arguments = self._resolve_objects(accepted)
                break
        return accepted

    def _resolve_objects(self, accepted: _Accepted) -> List[Tuple[str, Optional[bytes], bytes]]:
        objects = self._objects
        resolved: List[Tuple[str, Optional[bytes], bytes]] = []
        for name, payload, object_id in accepted.task.arguments:
            if object_id:
                if payload is None:
                    payload = objects.get(object_id)
                    if payload is None and accepted.problem is None:
                        accepted.problem = RuntimeError(
                            f"internal error: the processor has no cached object {object_id.hex()}"
                        )
                else:
                    objects.put(object_id, payload, object_frames.size(payload))
            resolved.append((name, payload, object_id))
        return resolved

    def _run(self, accepted: _Accepted, frame: _Frame) -> ProcessorResult:
        task = accepted.task
        function = accepted.function
        serializer_entry = accepted.serializer
        for entry in (function, serializer_entry):
            if entry is not None and entry.error is not None:
                return _failed(task.task_id, entry.error, entry.traceback_text)._replace(function=function.name)
        if accepted.problem is not None:
            return _failed(task.task_id, accepted.problem, "")._replace(function=function.name)
        serializer = serializer_entry.value if serializer_entry is not None else _DEFAULT_SERIALIZER

        try:
            positional: List[Any] = []
            named: Dict[str, Any] = {}
            for name, payload, _ in accepted.arguments:
                assert payload is not None  # a missing object is accepted.problem, answered above
                value = deserialize_payload(serializer, payload)
                if name:
                    named[name] = value
                else:
                    positional.append(value)
        except Exception as error:
            return _failed(task.task_id, error, traceback.format_exc())._replace(function=function.name)

        self._start_profile(frame, task.profiling)
        failure: Optional[BaseException] = None
        try:
            value = function.value(*positional, **named)
        except BaseException as raised:  # SystemExit and KeyboardInterrupt of a task are its failure, not ours
            failure, value = raised, None
        profiling = self._end_profile(frame, task.profiling)
        if failure is not None:
            result = _failed(task.task_id, failure, _user_traceback(failure), profiling)
        else:
            result = _success(task.task_id, value, serializer, profiling)
        return result._replace(seconds=time.perf_counter() - frame.started, function=function.name)

    @staticmethod
    def _load(cache: LRUCache, key: bytes, payload: Optional[bytes], what: str) -> _Loaded:
        if payload is None:
            entry = cache.get(key)
            if entry is None:
                entry = _Loaded(b"")
                entry.error = RuntimeError(f"internal error: the processor has no cached {what} {key.hex()}")
                entry.traceback_text = ""
            return entry
        entry = _Loaded(payload)
        cache.put(key, entry)
        return entry

    # ------------------------------------------------------------------------- profiling

    def _start_profile(self, frame: _Frame, profiling: bool) -> None:
        """Memory is traced while a profiled task is on the stack; a task's peak leaves out what ran nested."""
        if tracemalloc.is_tracing():
            outer = self._stack[-2] if len(self._stack) > 1 else None
            current, peak = tracemalloc.get_traced_memory()
            if outer is not None:
                outer.memory_peak = max(outer.memory_peak, peak)
            tracemalloc.reset_peak()
            frame.memory_base = current
        elif profiling:
            tracemalloc.start()
            frame.traces = True
        frame.started = time.perf_counter()
        frame.cpu_started = time.process_time()

    def _end_profile(self, frame: _Frame, profiling: bool) -> Optional[Tuple[float, float, int]]:
        duration = time.perf_counter() - frame.started
        cpu = time.process_time() - frame.cpu_started
        if len(self._stack) > 1:
            self._stack[-2].nested_cpu += cpu
        result = None
        if tracemalloc.is_tracing():
            peak = max(frame.memory_peak, tracemalloc.get_traced_memory()[1])
            if frame.traces:
                tracemalloc.stop()
            else:
                tracemalloc.reset_peak()  # the task beneath measures its own peak from here
            if profiling:
                result = (duration, max(0.0, cpu - frame.nested_cpu), max(0, peak - frame.memory_base))
        return result


def _success(task_id: bytes, value: Any, serializer: Any, profiling) -> ProcessorResult:
    try:
        payload = serialize_payload(serializer, value)
        if type(payload) is list:  # the default serializer's frames: the large ones cross the Pipe out of band
            return ProcessorResult(
                task_id, TaskStatus.SUCCESS, [PickleBuffer(frame) for frame in payload], "", profiling
            )
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"the serializer returned {type(payload).__name__}, not bytes")
    except Exception as error:
        problem = TypeError(f"the result of the task could not be serialized: {type(error).__name__}: {error}")
        return _failed(task_id, problem, traceback.format_exc(), profiling)
    return ProcessorResult(task_id, TaskStatus.SUCCESS, bytes(payload), "", profiling)


def _failed(task_id: bytes, error: BaseException, traceback_text: str, profiling=None) -> ProcessorResult:
    payload, error_text = failure_payload(error, traceback_text)
    return ProcessorResult(task_id, TaskStatus.FAILED, payload, error_text, profiling)


def _user_traceback(error: BaseException) -> str:
    """The traceback of an exception raised by a task, without the processor's own frame."""
    tb = error.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _agent_gone() -> NoReturn:
    """The Pipe broke: the agent is gone (it would have stopped us otherwise), and so are we."""
    _flush_standard_streams()
    os._exit(1)


def processor_exit_cause(exit_code: Optional[int]) -> str:
    """Human-readable cause of a processor's end, from its multiprocessing exit code."""
    if exit_code is None:
        return "processor ended for an unknown reason"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = str(-exit_code)
        return f"processor was killed by signal {name}"
    return f"processor exited with code {exit_code}"
