"""The processor: the subprocess that runs the tasks' user code.

Started by the agent with the multiprocessing "spawn" context, so it inherits
nothing of the agent's ZeroMQ state. It reads one `ProcessorTask` at a time from
its Pipe, runs the function in its main thread and writes back one
`ProcessorResult`. It never talks to the scheduler or the storage server: a
cancel, a timeout or a crash costs the agent only this process, which it
replaces.

Keep this module's imports light: every processor start imports it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import tracemalloc
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any, Dict, List, Optional

import cloudpickle

from scaler.protocol.messages import TaskStatus
from scaler.worker.lru_cache import LRUCache
from scaler.worker.parent_death import die_with_parent
from scaler.worker.processor_protocol import (
    BLOCKED_AFTER_SECONDS,
    BLOCKED_CHECK_INTERVAL_SECONDS,
    CLIENT_MODULE_PREFIX,
    GRAPH_NODE_MODULE,
    ProcessorBlocked,
    ProcessorResult,
    ProcessorTask,
    receive,
    send,
)
from scaler.worker.task_failure import failure_payload

SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_SCHEDULER_ADDRESS"
WORKER_ID_ENVIRONMENT_VARIABLE = "SCALER_WORKER_ID"


class _CloudpickleSerializer:
    """The serializer of tasks whose client did not choose one."""

    @staticmethod
    def serialize(obj: Any) -> bytes:
        return cloudpickle.dumps(obj)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        return cloudpickle.loads(payload)


_DEFAULT_SERIALIZER = _CloudpickleSerializer()


class _Loaded:
    """A cached function or serializer, or the exception raised while loading it (so that the cache,
    which the agent mirrors, holds an entry either way)."""

    __slots__ = ("value", "error", "traceback_text")

    def __init__(self, payload: bytes) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.traceback_text = ""
        try:
            self.value = cloudpickle.loads(payload)
        except Exception as error:
            self.error = error
            self.traceback_text = traceback.format_exc()


class _MissingFromCache(Exception):
    pass


def run_processor(
    connection: Connection,
    agent_pid: int,
    scheduler_address: str,
    worker_id: str,
    function_cache_capacity: int,
    serializer_cache_capacity: int,
) -> None:
    """The processor's main function (the target of its multiprocessing.Process)."""
    die_with_parent(agent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the agent, which then stops us
    os.environ[SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE] = scheduler_address
    os.environ[WORKER_ID_ENVIRONMENT_VARIABLE] = worker_id
    processor = _Processor(function_cache_capacity, serializer_cache_capacity)
    watcher = _BlockingWatcher(connection)
    watcher.start()
    while True:
        try:
            task = receive(connection)
        except (EOFError, OSError):  # the agent closed the pipe or is gone
            return
        watcher.task_started(task.task_id)
        result = processor.run(task)
        _flush_standard_streams()
        try:
            watcher.task_finished(result)
        except (BrokenPipeError, OSError):
            return


class _BlockingWatcher(threading.Thread):
    """Tells the agent when the running task waits inside the Scaler client, and when it runs again.

    A task that submitted tasks and waits for their results holds no CPU; the
    agent may then run a queued task (maybe one of those children) on another
    processor. The main thread's stack is sampled every few tens of
    milliseconds while a task runs; nothing is sampled between tasks.
    """

    def __init__(self, connection: Connection) -> None:
        super().__init__(name="blocking-watcher", daemon=True)
        self._connection = connection
        self._lock = threading.Lock()  # the Pipe is written by this thread and the main thread
        self._running = threading.Event()
        self._task_id: Optional[bytes] = None
        self._main_thread_id = threading.main_thread().ident or 0

    def task_started(self, task_id: bytes) -> None:
        with self._lock:
            self._task_id = task_id
        self._running.set()

    def task_finished(self, result: ProcessorResult) -> None:
        with self._lock:
            self._task_id = None
            self._running.clear()
            send(self._connection, result)

    def run(self) -> None:
        inside_since: Optional[float] = None
        blocked = False
        watched: Optional[bytes] = None
        while True:
            self._running.wait()
            time.sleep(BLOCKED_CHECK_INTERVAL_SECONDS)
            task_id = self._task_id
            if task_id != watched:  # a new task: start afresh
                watched, inside_since, blocked = task_id, None, False
            if task_id is None:
                continue
            now = time.monotonic()
            if _inside_client(sys._current_frames().get(self._main_thread_id)):
                if inside_since is None:
                    inside_since = now
                if blocked or now - inside_since < BLOCKED_AFTER_SECONDS:
                    continue
                blocked = True
            else:
                inside_since = None
                if not blocked:
                    continue
                blocked = False
            with self._lock:
                if self._task_id != task_id:  # finished meanwhile: its result is sent, say nothing more
                    continue
                try:
                    send(self._connection, ProcessorBlocked(task_id, blocked))
                except (OSError, ValueError):
                    return


def _inside_client(frame: Optional[FrameType]) -> bool:
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and (name == CLIENT_MODULE_PREFIX or name.startswith(CLIENT_MODULE_PREFIX + ".")):
            if name != GRAPH_NODE_MODULE:
                return True
        frame = frame.f_back
    return False


class _Processor:
    def __init__(self, function_cache_capacity: int, serializer_cache_capacity: int) -> None:
        self._functions: LRUCache[bytes, _Loaded] = LRUCache(function_cache_capacity)
        self._serializers: LRUCache[bytes, _Loaded] = LRUCache(serializer_cache_capacity)

    def run(self, task: ProcessorTask) -> ProcessorResult:
        # the caches are updated first and unconditionally: the agent's mirror of them assumes exactly that
        function = self._load(self._functions, task.function_id, task.function, "function")
        serializer_entry = None
        if task.serializer_id:
            serializer_entry = self._load(self._serializers, task.serializer_id, task.serializer, "serializer")

        for entry in (function, serializer_entry):
            if entry is not None and entry.error is not None:
                return self._failed(task.task_id, entry.error, entry.traceback_text)
        serializer = serializer_entry.value if serializer_entry is not None else _DEFAULT_SERIALIZER

        try:
            positional: List[Any] = []
            named: Dict[str, Any] = {}
            for name, payload in task.arguments:
                value = serializer.deserialize(payload)
                if name:
                    named[name] = value
                else:
                    positional.append(value)
        except Exception as error:
            return self._failed(task.task_id, error, traceback.format_exc())

        if task.profiling:
            return self._run_profiled(task.task_id, function.value, positional, named, serializer)
        try:
            value = function.value(*positional, **named)
        except BaseException as error:  # SystemExit and KeyboardInterrupt of a task are its failure, not ours
            return self._failed(task.task_id, error, _user_traceback(error))
        return self._success(task.task_id, value, serializer, None)

    def _run_profiled(self, task_id: bytes, function: Any, positional: List[Any], named: Dict[str, Any], serializer):
        tracemalloc.start()
        started = time.perf_counter()
        cpu_started = time.process_time()
        error: Optional[BaseException] = None
        value = None
        try:
            value = function(*positional, **named)
        except BaseException as raised:
            error = raised
        duration = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        profiling = (duration, cpu, peak)
        if error is not None:
            return self._failed(task_id, error, _user_traceback(error), profiling)
        return self._success(task_id, value, serializer, profiling)

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

    @staticmethod
    def _success(task_id: bytes, value: Any, serializer: Any, profiling) -> ProcessorResult:
        try:
            payload = serializer.serialize(value)
            if not isinstance(payload, (bytes, bytearray, memoryview)):
                raise TypeError(f"the serializer returned {type(payload).__name__}, not bytes")
        except Exception as error:
            problem = TypeError(f"the result of the task could not be serialized: {type(error).__name__}: {error}")
            return _Processor._failed(task_id, problem, traceback.format_exc(), profiling)
        return ProcessorResult(task_id, TaskStatus.SUCCESS, bytes(payload), "", profiling)

    @staticmethod
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
