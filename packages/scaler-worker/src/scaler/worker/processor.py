"""The processor: the subprocess that runs the tasks' user code.

Started by the agent with the multiprocessing "spawn" context, so it inherits
nothing of the agent's ZeroMQ state. It reads `ProcessorTask`s from its Pipe
into a local FIFO (the agent sends a few ahead), runs them one at a time in
its main thread and writes back their `ProcessorResult`s, several in one
message during a run of quick tasks. The results it holds for company while
the next task runs are sent by a thread of its own, the flusher, should that
task run past `RESULT_HOLD_LIMIT_SECONDS` (`_send_late`; every send of them,
the hub's and the flusher's, takes one lock, so they leave in order; the hub
holds one without it). It never
talks to the scheduler or the storage server for the agent: a cancel, a
timeout or a crash costs the agent only this process, which it replaces.

Nested tasks. Each task runs in a greenlet of its own (`greenlet`: stack
switching in one thread), under the hub (`_Processor.serve`, the main
greenlet). The processor installs a task context for the Scaler client
(`scaler.protocol.task_context`): when a task waits there (on `result()` of a
task it submitted, in `Client.map`, ...), it asks what it waits for to wake
the hub once done, and switches back to the hub, which tells the agent
(`TaskWaiting`) and runs the next task meanwhile. A task whose wait is over is resumed
when the hub is free and no task sent ahead is pending, in whatever order the
waits end; the hub tells the agent (`TaskWaiting(..., False)`). So a waiting
task holds no slot, costs its greenlet's saved stack and its frames (no
process, no thread, no depth of the main stack: a chain of 1,000 nested waits
is 1,000 greenlets side by side), and every Client inside the processor
shares one connection (`scaler.client.shared_connection`). The client's agent
thread wakes the hub through a pipe the hub selects on beside the agent's.
See `processor_protocol` for the conversation with the agent.

Keep this module's imports light: every processor start imports it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
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
from typing import Any, Callable, Deque, Dict, List, NoReturn, Optional, Tuple

import cloudpickle
import greenlet

from scaler.protocol import object_frames
from scaler.protocol.messages import TaskStatus
from scaler.protocol.process_control import die_with_parent, reuse_payload_memory
from scaler.protocol.serializer import DefaultSerializer, deserialize_payload, serialize_payload
from scaler.protocol.task_context import Notify, TaskContext, set_task_context
from scaler.protocol.task_runs import function_name
from scaler.worker.lru_cache import LRUCache, SizedLRUCache
from scaler.worker.memory_limit import bound_data_segment, refused_allocation
from scaler.worker.processor_protocol import (
    RESULT_HOLD_LIMIT_SECONDS,
    RESULT_HOLD_SECONDS,
    RESULT_HOLD_TASK_SECONDS,
    Drop,
    Dropped,
    FunctionLoaded,
    PipeEnd,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
)
from scaler.worker.task_failure import error_line, failure_payload
from scaler.worker.task_output import OutputCapture

SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_SCHEDULER_ADDRESS"
WORKER_ID_ENVIRONMENT_VARIABLE = "SCALER_WORKER_ID"
# a task's own recursion may go deeper than Python's default 1000 frames, as it always could here (a frame of
# Python code costs well under 1 KiB of C stack on Python 3.11+; 10,000 fit the usual 8 MiB)
RECURSION_LIMIT = 10_000

_DEFAULT_SERIALIZER = DefaultSerializer()  # of tasks whose client did not choose one
_WAITS = object()  # what a task's greenlet hands the hub when it waits (a finished one hands its result)
_SPARE_GREENLETS = 16  # greenlets kept for the next tasks once theirs ended (making one costs several µs)


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
            self.name = function_name(self.value)


class _Accepted:
    """A task read from the Pipe, with what it needs taken from (or put in) the caches as it was read."""

    __slots__ = ("task", "function", "serializer", "arguments", "problem")

    def __init__(self, task: ProcessorTask, function: _Loaded, serializer: Optional[_Loaded], arguments) -> None:
        self.task = task
        self.function = function
        self.serializer = serializer
        self.arguments: List[Tuple[str, Optional[bytes], bytes]] = arguments
        self.problem: Optional[BaseException] = None


class _Started:
    """A task started on the processor: its greenlet, its wait, and what its profiling needs."""

    __slots__ = (
        "task_id", "scope", "greenlet", "done", "wake", "waiting", "waits", "started", "cpu", "cpu_since",
        "profiled", "memory_base", "memory_peak", "streams",
    )  # fmt: skip

    def __init__(self, task_id: bytes, scope: bytes, profiled: bool) -> None:
        self.task_id = task_id
        self.scope = scope  # the client whose objects it reads: the Clients made in it stand for that client
        self.greenlet: Any = None
        self.done: Callable[[], bool] = _never
        self.wake: Optional[Callable[[], None]] = None  # what the waited-on objects call once their wait may be over
        self.waiting = False  # switched out in a wait that has not ended
        self.waits = 0  # how many waits it began (a timeout belongs to one of them)
        self.started = time.perf_counter()
        self.cpu = 0.0  # CPU seconds while it ran (not while it waited)
        self.cpu_since = 0.0
        self.profiled = profiled
        self.memory_base = 0
        self.memory_peak = 0  # the highest traced memory above its base while it ran
        self.streams: Optional[Tuple[Any, Any]] = None  # its captured stdout and stderr (it streams its output)


def _never() -> bool:
    return False


def run_processor(
    connection: Connection,
    agent_pid: int,
    scheduler_address: str,
    worker_id: str,
    function_cache_capacity: int,
    serializer_cache_capacity: int,
    object_cache_bytes: int,
    environment: Optional[Dict[str, str]] = None,
    delegation_key: bytes = b"",
    memory_limit: int = 0,
) -> None:
    """The processor's main function (the target of its multiprocessing.Process). ``environment``: variables for
    the tasks (the keys of their Clients); ``delegation_key``: what their Clients prove their task with;
    ``memory_limit``: the worker's, in bytes (0: none)."""
    die_with_parent(signal.SIGKILL, agent_pid)
    bound_data_segment(memory_limit)
    reuse_payload_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the agent, which then stops us
    os.environ[SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE] = scheduler_address
    os.environ[WORKER_ID_ENVIRONMENT_VARIABLE] = worker_id
    os.environ.update(environment or {})
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    processor = _Processor(
        connection, function_cache_capacity, serializer_cache_capacity, object_cache_bytes, memory_limit
    )
    context = TaskContext(scheduler_address, processor.wait, processor.running_task, delegation_key)
    set_task_context(context)
    signal.signal(signal.SIGTERM, lambda signum, frame: _stopped(context))
    processor.serve()
    _leave_scheduler(context)


def _leave_scheduler(context: TaskContext) -> None:
    """The tasks' shared client connections, if they made any, say goodbye: the scheduler then cancels what it
    still runs for them at once, and does not take the processor's end for lost clients."""
    agents = [connection.agent for connection in list(context.connections.values())]
    for agent in agents:
        agent.disconnect()
    deadline = time.monotonic() + 1.0  # bounded: the agents get a second, together, to leave
    for agent in agents:
        agent.join(max(0.0, deadline - time.monotonic()))


def _stopped(context: TaskContext) -> NoReturn:
    """SIGTERM, from the agent as its worker stops (a task may install its own handler instead): leave, then end
    as SIGTERM ends a process. A second SIGTERM meanwhile (sent to the whole process group, say) is ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _leave_scheduler(context)
    _flush_standard_streams()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(1)  # not reached: the default action ends the process


class _Processor:
    def __init__(
        self,
        connection: Connection,
        function_cache_capacity: int,
        serializer_cache_capacity: int,
        object_cache_bytes: int,
        memory_limit: int = 0,
    ) -> None:
        self._pipe = PipeEnd(connection)
        self._memory_limit = memory_limit
        self._functions: LRUCache[bytes, _Loaded] = LRUCache(function_cache_capacity)
        self._serializers: LRUCache[bytes, _Loaded] = LRUCache(serializer_cache_capacity)
        self._objects: SizedLRUCache[bytes, Any] = SizedLRUCache(object_cache_bytes)  # ID -> payload
        self._fifo: Deque[_Accepted] = deque()  # tasks sent ahead, not started: they start in order
        # messages for the agent not sent yet (results held during quick tasks): only the hub adds to them, without
        # a lock; whoever sends them (the hub, the flusher thread) takes `_lock` and sends in order (`_send_held`)
        self._out: List[Any] = []
        self._held_since = 0.0
        self._lock = threading.Lock()
        self._flusher_wake = threading.Condition(self._lock)
        self._flusher: Optional[threading.Thread] = None  # started the first time a task starts with results held
        self._flusher_idle = True  # it waits without a timeout: a hold must wake it
        self._held_lately = False  # the hub held results since the flusher last looked
        self._stopping = False
        self._hub = greenlet.getcurrent()
        self._spare: List[greenlet.greenlet] = []  # greenlets whose task ended, each ready for another
        self._current: Optional[_Started] = None  # the task whose greenlet runs now
        self._waiting = 0  # tasks switched out in a wait
        self._resumable: Deque[_Started] = deque()  # tasks whose wait is over, in the order they ended
        self._woken: Deque[_Started] = deque()  # appended from any thread: a task's wait may be over
        self._deadlines: List[Tuple[float, int, int, _Started]] = []  # of waits with a timeout: (when, _, wait, task)
        self._sequence = itertools.count()
        self._wake_pending = False  # a byte is on its way through the wake pipe
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._profiled = 0  # profiled tasks started and not ended: tracemalloc traces while there are some
        self._output: Optional[OutputCapture] = None  # made when a task first asks for its output (task_output.py)
        self._plain_streams = (sys.stdout, sys.stderr)
        self._handlers: Dict[type, Callable[[Any], None]] = {
            list: self._on_list,
            Drop: self._on_drop,
        }

    def serve(self) -> None:
        """The hub: run the tasks the agent sends, and resume the waiting ones, until the agent closes the Pipe."""
        pipe = self._pipe
        fifo = self._fifo
        resumable = self._resumable
        handlers = self._handlers
        drained = False  # nothing needs reading before the head of the FIFO starts (see processor_protocol)
        while True:
            if not fifo and not resumable:
                self._flush()
                if self._waiting:
                    self._idle()
                else:
                    try:
                        message = pipe.receive()
                    except (EOFError, OSError):  # the agent closed the pipe or is gone
                        self._stop_flusher()
                        return
                    handlers[type(message)](message)
                drained = bool(fifo) and not fifo[0].task.sent_ahead  # sent as nothing ran: it will not be dropped
                continue
            if not drained:
                self._drain()  # a Drop, more tasks, ... that came meanwhile are seen before the next task starts
            drained = False
            if fifo:
                accepted = fifo.popleft()
                task = accepted.task
                started = _Started(task.task_id, task.scope, task.profiling)
                spare = self._spare
                started.greenlet = spare.pop() if spare else greenlet.greenlet(self._run_tasks)
                outcome = self._switch_to(started, accepted)
            elif resumable:
                started = resumable.popleft()
                self._send(TaskWaiting(started.task_id, False))
                outcome = self._switch_to(started, None)
            else:
                continue
            # the Pipe is read before the agent hears that the task ended or waits, and not again before the head of
            # the FIFO starts: a Dropped for the head comes ahead of that notice, or the head has started
            self._drain()
            drained = True
            if outcome is _WAITS:
                self._send(TaskWaiting(started.task_id, True))
                continue
            if len(self._spare) < _SPARE_GREENLETS:
                self._spare.append(started.greenlet)
            _flush_standard_streams()
            now = time.perf_counter()
            # hold the result for company only during a run of quick tasks, and never long: the head of the FIFO
            # starts now, and should it run long, the flusher sends what is held (`_send_late`)
            if (
                fifo
                and outcome.seconds < RESULT_HOLD_TASK_SECONDS
                and (not self._out or now - self._held_since < RESULT_HOLD_SECONDS)
            ):
                self._hold(outcome, now)
                continue
            self._send(outcome)

    def running_task(self) -> Optional[Tuple[bytes, bytes]]:
        """The task context's ``running_task``: the ID and scope of the task whose code calls (None outside a
        task's own greenlet: a thread it started, say)."""
        started = self._current
        if started is None or greenlet.getcurrent() is not started.greenlet:
            return None
        return started.task_id, started.scope

    def wait(self, done: Callable[[], bool], timeout: Optional[float], notify: Notify) -> None:
        """The task context's wait hook: switch to the hub until ``done()`` or ``timeout``; the hub runs other
        tasks meanwhile."""
        started = self._current
        if started is None or greenlet.getcurrent() is not started.greenlet:
            return  # not a task's own wait (a thread of the task, or outside any task): wait as usual
        if timeout is not None and timeout <= 0:
            return
        if started.wake is None:
            started.wake = functools.partial(self._wake, started)
        notify(started.wake)  # before the check: an end in between is not missed
        if done():
            return
        started.done = done
        started.waiting = True
        started.waits += 1
        self._waiting += 1
        if timeout is not None:
            deadline = time.monotonic() + timeout
            heapq.heappush(self._deadlines, (deadline, next(self._sequence), started.waits, started))
        self._hub.switch(_WAITS)  # the hub tells the agent (`TaskWaiting`); back here once the hub resumes it

    # ------------------------------------------------------------------------- switching

    def _switch_to(self, started: _Started, accepted: Optional[_Accepted]) -> Any:
        """Run ``started`` until it ends (its `ProcessorResult`) or waits (`_WAITS`)."""
        self._current = started
        if started.streams is not None:  # a task that streams its output, resumed
            sys.stdout, sys.stderr = started.streams
        if started.profiled:
            self._start_profile(started, accepted is not None)
        started.cpu_since = time.process_time()
        try:
            outcome = started.greenlet.switch(accepted, started) if accepted is not None else started.greenlet.switch()
        finally:
            self._current = None
            if started.streams is not None:
                sys.stdout, sys.stderr = self._plain_streams
        started.cpu += time.process_time() - started.cpu_since
        if started.profiled:
            outcome = self._pause_profile(started, outcome)
        return outcome

    def _wake(self, started: _Started) -> None:
        """From any thread (the client's agent thread, as a future ends): ``started``'s wait may be over."""
        self._woken.append(started)
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_write, b"\0")
            except (BlockingIOError, OSError):  # full: the hub is woken anyway
                pass

    def _collect_wakes(self, read: bool = False) -> None:
        """Tasks whose wait is over (they were woken, or their timeout passed) become resumable. The wake pipe is
        read when a wake wrote to it (or ``read``: it was seen readable)."""
        if self._wake_pending or read:
            try:
                os.read(self._wake_read, 4096)
            except BlockingIOError:
                pass
            # after the pipe is read (a wake from now on writes again: cleared before the read, a wake in between
            # would write a byte the read takes, leaving the flag set and the pipe empty for the next wake), and
            # before `_woken` is read (what a wake that saw the flag still set appended is taken below)
            self._wake_pending = False
        woken = self._woken
        while woken:
            started = woken.popleft()
            if started.waiting and started.done():
                self._end_wait(started)
        deadlines = self._deadlines
        if deadlines:
            now = time.monotonic()
            while deadlines and deadlines[0][0] <= now:
                _, _, wait, started = heapq.heappop(deadlines)
                if started.waiting and started.waits == wait:
                    self._end_wait(started)

    def _end_wait(self, started: _Started) -> None:
        started.waiting = False
        started.done = _never
        self._waiting -= 1
        self._resumable.append(started)

    def _idle(self) -> None:
        """Nothing to run and tasks wait: sleep until the agent writes, a wait ends or a wait's timeout passes."""
        timeout = None
        if self._deadlines:
            timeout = max(0.0, self._deadlines[0][0] - time.monotonic())
        if self._pipe.wait_readable(self._wake_read, timeout):
            self._handle(self._receive())
        self._collect_wakes(read=True)

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
        if self._woken or self._deadlines:
            self._collect_wakes()

    def _send(self, message: Any) -> None:
        """Send ``message`` now, after anything held."""
        with self._lock:
            self._out.append(message)
            self._send_held()

    def _flush(self) -> None:
        if self._out:  # only the hub adds to it: found empty, it is
            with self._lock:
                self._send_held()

    def _send_held(self) -> None:
        """Send what is held, in one message (call with `_lock` held: the hub and the flusher send). What the hub
        adds meanwhile stays for the next send: the copy and the deletion are each one step under the GIL."""
        out = self._out
        if not out:
            return
        taken = out[:]
        del out[: len(taken)]
        try:
            self._pipe.send(taken[0] if len(taken) == 1 else taken)
        except (OSError, ValueError):
            _agent_gone()

    def _hold(self, message: Any, now: float) -> None:
        """Keep ``message`` for the next send (by the hub, or the flusher once it is old), as a task starts."""
        out = self._out
        if not out:
            self._held_since = now
        out.append(message)
        self._held_lately = True
        if self._flusher_idle:  # read after the two writes above: see `_send_late`
            self._wake_flusher()

    # ------------------------------------------------------------------------- the flusher

    def _wake_flusher(self) -> None:
        """Results are held as a task starts and the flusher sleeps without a timeout: wake it, or start it the
        first time."""
        with self._lock:
            if not self._flusher_idle:  # it saw the hold before it slept
                return
            self._flusher_idle = False
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._send_late, name="scaler-held-results", daemon=True)
                self._flusher.start()
            else:
                self._flusher_wake.notify()

    def _send_late(self) -> None:
        """The flusher thread: send what the hub holds once the oldest of it is `RESULT_HOLD_LIMIT_SECONDS` old
        (the task that started meanwhile runs long). While the hub holds results now and then it looks every
        `RESULT_HOLD_LIMIT_SECONDS`, rather than be woken for each hold; once a look finds no hold since the last,
        it sleeps until the hub wakes it (`_wake_flusher`). The hub holds without the lock: it writes, then reads
        `_flusher_idle`; the flusher sets it, then reads what the hub wrote, so one of them sees the other."""
        wake = self._flusher_wake
        with wake:
            while not self._stopping:
                if self._out:
                    delay = self._held_since + RESULT_HOLD_LIMIT_SECONDS - time.perf_counter()
                    if delay <= 0:
                        self._send_held()
                        continue
                elif self._held_lately:
                    delay = RESULT_HOLD_LIMIT_SECONDS
                else:
                    self._flusher_idle = True
                    if self._out or self._held_lately:  # held as it was about to sleep
                        self._flusher_idle = False
                    else:
                        wake.wait()
                    continue
                self._held_lately = False
                wake.wait(delay)

    def _stop_flusher(self) -> None:
        with self._lock:
            self._stopping = True
            self._flusher_wake.notify()

    def _handle(self, message: Any) -> None:
        self._handlers[type(message)](message)

    def _on_list(self, messages: List[Any]) -> None:
        """Tasks for the FIFO, to start in order (and maybe other messages)."""
        handlers = self._handlers
        fifo = self._fifo
        for message in messages:
            if type(message) is ProcessorTask:
                fifo.append(self._accept(message))
            else:
                handlers[type(message)](message)

    def _on_drop(self, drop: Drop) -> None:
        fifo = self._fifo
        for position, accepted in enumerate(fifo):
            if accepted.task.task_id == drop.task_id:
                del fifo[position]
                self._hold(Dropped(drop.task_id), time.perf_counter())  # with the results it comes among
                return
        # started already (or unknown): its result answers the agent

    # ------------------------------------------------------------------------- one task

    def _accept(self, task: ProcessorTask) -> _Accepted:
        """Take what ``task`` needs from the caches, or put it there, as the agent's mirror of them assumes:
        when the task is read, whether it then runs or is dropped."""
        function = self._load(self._functions, task.function_id, task.function, "function")
        if task.function is not None:  # the agent names the function of a task it stops for memory
            self._hold(FunctionLoaded(task.function_id, function.name), time.perf_counter())
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

    def _run_tasks(self, accepted: _Accepted, started: _Started) -> None:
        """The body of a greenlet: run a task, hand its result to the hub, and the next task the hub gives."""
        hub = self._hub
        while True:
            accepted, started = hub.switch(self._run(accepted, started))

    def _run(self, accepted: _Accepted, started: _Started) -> ProcessorResult:
        """One task, in its greenlet: its result."""
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

        if task.stream_output:
            started.streams = self._task_streams(task.task_id)
            sys.stdout, sys.stderr = started.streams
        failure: Optional[BaseException] = None
        try:
            value = function.value(*positional, **named)
        except BaseException as raised:  # SystemExit and KeyboardInterrupt of a task are its failure, not ours
            failure, value = raised, None
        if started.streams is not None:
            self._flush_output()  # before the result: the client prints the output, then the result arrives
        if failure is not None:
            over_memory = isinstance(failure, MemoryError) and self._memory_limit > 0  # (bound_data_segment)
            reported = refused_allocation(function.name, self._memory_limit) if over_memory else failure
            result = _failed(task.task_id, reported, _user_traceback(failure))._replace(over_memory=over_memory)
        else:
            result = _success(task.task_id, value, serializer, None)
        seconds = time.perf_counter() - started.started
        return result._replace(seconds=seconds, function=function.name, ended=time.monotonic())

    def _task_streams(self, task_id: bytes) -> Tuple[Any, Any]:
        """The ``sys.stdout`` and ``sys.stderr`` of a task that asked for its output: captured for it. They are
        the task's own while its greenlet runs (`_switch_to` swaps them in and out)."""
        if self._output is None:
            self._output = OutputCapture(self._pipe.send)
        return self._output.streams(task_id)

    def _flush_output(self) -> None:
        try:
            self._output.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            _agent_gone()

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

    def _start_profile(self, started: _Started, first: bool) -> None:
        """A profiled task starts or resumes. Memory is traced while profiled tasks are started; a task's peak
        counts what it allocated above the memory of each of its starts, while it ran (not while it waited)."""
        if first:
            self._profiled += 1
            if not tracemalloc.is_tracing():
                tracemalloc.start()
        tracemalloc.reset_peak()
        started.memory_base = tracemalloc.get_traced_memory()[0]

    def _pause_profile(self, started: _Started, outcome: Any) -> Any:
        """It waits or ended: note its peak; if it ended, its result carries (duration, CPU, peak memory)."""
        peak = tracemalloc.get_traced_memory()[1]
        started.memory_peak = max(started.memory_peak, peak - started.memory_base)
        if outcome is _WAITS:
            return outcome
        self._profiled -= 1
        if self._profiled == 0:
            tracemalloc.stop()
        duration = time.perf_counter() - started.started
        return outcome._replace(profiling=(duration, started.cpu, started.memory_peak))


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
    return ProcessorResult(task_id, TaskStatus.FAILED, payload, error_text, profiling, error_line=error_line(error))


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
