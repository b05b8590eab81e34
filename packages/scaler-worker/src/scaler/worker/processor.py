"""The processor: the subprocess that runs the tasks' user code; the I/O shell of `processor_core`.

Started by the agent with the multiprocessing "spawn" context, so it inherits nothing of the agent's ZeroMQ
state. Its core (`processor_core.ProcessorCore`) decides everything `processor_protocol` promises the agent:
the FIFO of tasks sent ahead, the caches, which results are held for company and when they go, and which task
runs, waits or resumes when. This shell does what the core says: it reads and writes the Pipe, and runs each
task in a greenlet of its own (`greenlet`: stack switching in one thread) under the hub (`_Processor.serve`,
the main greenlet). A thread of its own, the watcher, does what must happen while the hub runs a task that
takes long: it sends the results held for company once the core says they are due, and reads the Pipe beside
a task that has run `READ_BESIDE_SECONDS` (so that the agent can take back the tasks it sent ahead behind it).
Every call of the core, every send and every read of the Pipe while a task runs takes one lock, so they happen
in order. It never talks to the scheduler or the storage server for the agent: a cancel, a timeout or a crash
costs the agent only this process, which it replaces.

Nested tasks. The processor installs a task context for the Scaler client (`scaler.protocol.task_context`):
when a task waits there (on `result()` of a task it submitted, in `Client.map`, ...), it asks what it waits
for to wake the hub once done, and switches back to the hub (`TaskWaits`), which runs the next task
meanwhile. A waiting task holds no slot, costs its greenlet's saved stack and its frames (no process, no
thread, no depth of the main stack: a chain of 1,000 nested waits is 1,000 greenlets side by side), and every
Client inside the processor shares one connection (the client's `shared_connection`). The client's agent
thread wakes the hub through a pipe the hub selects on beside the agent's.

Keep this module's imports light: every processor start imports it.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
import tracemalloc
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, Callable, Deque, Dict, List, NamedTuple, NoReturn, Optional, Tuple

import greenlet

from scaler.protocol.process_control import die_with_parent, reuse_payload_memory
from scaler.protocol.task_context import Notify, TaskContext, set_task_context
from scaler.worker.memory_limit import bound_data_segment
from scaler.worker.processor_core import (
    AgentGone,
    Die,
    FromAgent,
    HeldDue,
    Idle,
    InProcessor,
    Leave,
    ProcessorCore,
    ReadAll,
    ReadBeside,
    ReadOne,
    ResumeTask,
    SendToAgent,
    StartTask,
    TaskEnded,
    TaskWaits,
)
from scaler.worker.processor_protocol import READ_BESIDE_SECONDS, RESULT_HOLD_LIMIT_SECONDS, PipeEnd
from scaler.worker.task_call import Loaded, call_task
from scaler.worker.task_output import OutputCapture
from scaler.worker.worker_setup import prepare_processor

SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE = "SCALER_SCHEDULER_ADDRESS"
WORKER_ID_ENVIRONMENT_VARIABLE = "SCALER_WORKER_ID"
# a task's own recursion may go deeper than Python's default 1000 frames, as it always could here (a frame of
# Python code costs well under 1 KiB of C stack on Python 3.11+; 10,000 fit the usual 8 MiB)
RECURSION_LIMIT = 10_000

_WAITS = object()  # what a task's greenlet hands the hub when it waits (a finished one hands its result)
_SPARE_GREENLETS = 16  # greenlets kept for the next tasks once theirs ended (making one costs several µs)
_NOTHING: Tuple[Any, ...] = ()
_NEVER = float("inf")  # `ProcessorCore.send_held_by` while nothing is held, `read_beside_from` while none runs


class _Ran(NamedTuple):
    """A task the hub ran ended (its result) or waits (`_WAITS`): the Pipe is read next, under the lock."""

    started: Any
    outcome: Any


class _Started:
    """A task started on the processor: its greenlet, its wait, and what its profiling needs."""

    __slots__ = (
        "task_id", "scope", "greenlet", "done", "wake", "waiting", "timeout", "started", "cpu", "cpu_since",
        "profiled", "memory_base", "memory_peak", "streams",
    )  # fmt: skip

    def __init__(self, task_id: bytes, scope: bytes, profiled: bool) -> None:
        self.task_id = task_id
        self.scope = scope  # the client whose objects it reads: the Clients made in it stand for that client
        self.greenlet: Any = None
        self.done: Callable[[], bool] = _never
        self.wake: Optional[Callable[[], None]] = None  # what the waited-on objects call once their wait may be over
        self.waiting = False  # switched out in a wait, not resumed yet
        self.timeout: Optional[float] = None  # of the wait it begins
        self.started = time.perf_counter()
        self.cpu = 0.0  # CPU seconds while it ran (not while it waited), counted for a profiled task
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
    prepare_processor()  # the uploaded files on its path, its --preload (worker_setup.py)
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
        self._core = ProcessorCore(Loaded, object_cache_bytes, function_cache_capacity, serializer_cache_capacity)
        # every call of the core, every send, and every read of the Pipe while a task runs takes it: the hub's, and
        # the watcher thread's
        self._lock = threading.Lock()
        self._watcher_wake = threading.Condition(self._lock)
        self._watcher: Optional[threading.Thread] = None  # started the first time a task runs
        self._watcher_look = _NEVER  # when the watcher looks next, unless woken
        self._stopping = False
        self._hub = greenlet.getcurrent()
        self._spare: List[greenlet.greenlet] = []  # greenlets whose task ended, each ready for another
        self._current: Optional[_Started] = None  # the task whose greenlet runs now
        self._switched_out: Dict[bytes, _Started] = {}  # the tasks that wait, by ID
        self._woken: Deque[_Started] = deque()  # appended from any thread: a task's wait may be over
        self._wake_pending = False  # a byte is on its way through the wake pipe
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._profiled = 0  # profiled tasks started and not ended: tracemalloc traces while there are some
        self._output: Optional[OutputCapture] = None  # made when a task first asks for its output (task_output.py)
        self._plain_streams = (sys.stdout, sys.stderr)
        self._moves: Dict[type, Callable[[Any], Any]] = {
            StartTask: self._start,
            ResumeTask: self._resume,
            ReadOne: self._read_one,
            ReadAll: self._read_all,
            Idle: self._idle,
            Leave: self._leave,
            Die: self._die,
        }

    def serve(self) -> None:
        """The hub: hand the core each event, carry out what it says, until the agent closes the Pipe."""
        core = self._core
        lock = self._lock
        moves = self._moves
        monotonic = time.monotonic
        event: Any = FromAgent(_NOTHING)
        while event is not None:
            with lock:
                if type(event) is _Ran:
                    event = self._ran(event)  # the Pipe is read under the lock: the watcher may read it too
                effects = core.handle(event, monotonic())
                move = effects.pop()
                for effect in effects:
                    self._send(effect)
                if core.send_held_by < self._watcher_look or core.read_beside_from < self._watcher_look:
                    self._wake_watcher()
            event = moves[type(move)](move)

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
        started.timeout = timeout
        self._hub.switch(_WAITS)  # the hub tells the core (`TaskWaits`); back here once it says `ResumeTask`

    # ------------------------------------------------------------------------- the moves

    def _start(self, move: StartTask) -> Any:
        held = move.task
        task = held.task
        started = _Started(task.task_id, task.scope, task.profiling)
        spare = self._spare
        started.greenlet = spare.pop() if spare else greenlet.greenlet(self._run_tasks)
        return self._switch_to(started, held)

    def _resume(self, move: ResumeTask) -> Any:
        started = self._switched_out.pop(move.task_id)
        started.waiting = False
        started.done = _never
        return self._switch_to(started, None)

    def _read_one(self, move: ReadOne) -> Any:
        try:
            return FromAgent([self._pipe.receive()])
        except (EOFError, OSError):  # the agent closed the pipe or is gone
            return AgentGone()

    def _read_all(self, move: ReadAll) -> Any:
        messages = self._read_readable()
        if messages is None:
            return AgentGone()
        return FromAgent(messages, self._collect_wakes() if self._woken else _NOTHING)

    def _idle(self, move: Idle) -> Any:
        """Nothing to run and tasks wait: sleep until the agent writes, a wait ends or a wait's timeout passes."""
        timeout = None if move.deadline is None else max(0.0, move.deadline - time.monotonic())
        messages = []
        if self._pipe.wait_readable(self._wake_read, timeout):
            try:
                messages.append(self._pipe.receive())
            except (EOFError, OSError):
                return AgentGone()
        return FromAgent(messages, self._collect_wakes(read=True))

    def _leave(self, move: Leave) -> None:
        with self._lock:
            self._stopping = True
            self._watcher_wake.notify()
        return None

    def _die(self, move: Die) -> NoReturn:
        _agent_gone()

    # ------------------------------------------------------------------------- switching

    def _switch_to(self, started: _Started, held: Optional[InProcessor]) -> _Ran:
        """Run ``started`` until it ends or waits."""
        self._current = started
        if started.streams is not None:  # a task that streams its output, resumed
            sys.stdout, sys.stderr = started.streams
        if started.profiled:
            self._start_profile(started, held is not None)
        try:
            outcome = started.greenlet.switch(held, started) if held is not None else started.greenlet.switch()
        finally:
            self._current = None
            if started.streams is not None:
                sys.stdout, sys.stderr = self._plain_streams
        if started.profiled:
            outcome = self._pause_profile(started, outcome)
        return _Ran(started, outcome)

    def _ran(self, ran: _Ran) -> Any:
        """The task ended or waits: read what is readable (with the lock held), the core's next event. The Pipe is
        read before the agent hears that the task ended or waits, and not again before the head of the FIFO
        starts: a Dropped for the head comes ahead of that notice, or the head has started."""
        started, outcome = ran
        messages = self._read_readable()
        if messages is None:
            _agent_gone()
        woken = self._collect_wakes() if self._woken else _NOTHING
        if outcome is _WAITS:
            self._switched_out[started.task_id] = started
            return TaskWaits(started.task_id, started.timeout, messages, woken)
        if len(self._spare) < _SPARE_GREENLETS:
            self._spare.append(started.greenlet)
        _flush_standard_streams()
        return TaskEnded(outcome, messages, woken)

    def _read_readable(self) -> Optional[List[Any]]:
        """Every message readable now, without waiting; None when the Pipe ended (the agent is gone)."""
        pipe = self._pipe
        messages = []
        try:
            while pipe.readable():
                messages.append(pipe.receive())
        except (EOFError, OSError):
            return None
        return messages

    def _run_tasks(self, held: InProcessor, started: _Started) -> None:
        """The body of a greenlet: run a task, hand its result to the hub, and the next task the hub gives."""
        hub = self._hub
        while True:
            held, started = hub.switch(self._run(held, started))

    def _run(self, held: InProcessor, started: _Started) -> Any:
        """One task, in its greenlet: its result."""
        output = None
        if held.task.stream_output:
            if self._output is None:
                self._output = OutputCapture(self._pipe.send)
            started.streams = self._output.streams(held.task.task_id)
            sys.stdout, sys.stderr = started.streams  # its own while its greenlet runs (`_switch_to`)
            output = self._flush_output
        return call_task(held, started.started, self._memory_limit, output)

    def _flush_output(self) -> None:
        try:
            self._output.flush()  # type: ignore[union-attr]
        except (OSError, ValueError):
            _agent_gone()

    def _wake(self, started: _Started) -> None:
        """From any thread (the client's agent thread, as a future ends): ``started``'s wait may be over."""
        self._woken.append(started)
        if not self._wake_pending:
            self._wake_pending = True
            try:
                os.write(self._wake_write, b"\0")
            except (BlockingIOError, OSError):  # full: the hub is woken anyway
                pass

    def _collect_wakes(self, read: bool = False) -> List[bytes]:
        """The waiting tasks whose wait is over, as far as what they wait for says (the core adds the timeouts).
        The wake pipe is read when a wake wrote to it (or ``read``: it was seen readable)."""
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
        over = []
        while woken:
            started = woken.popleft()
            if started.waiting and started.done():
                over.append(started.task_id)
        return over

    # ------------------------------------------------------------------------- with the lock held: sending, the watcher

    def _send(self, effect: SendToAgent) -> None:
        try:
            self._pipe.send(effect.message)
        except (OSError, ValueError):
            _agent_gone()

    def _wake_watcher(self) -> None:
        """Something is due before the watcher's next look (results held, a task that may run long): wake it, or
        start it the first time."""
        self._watcher_look = 0.0  # (woken: it looks now)
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="scaler-processor-watcher", daemon=True)
            self._watcher.start()
        else:
            self._watcher_wake.notify()

    def _watch(self) -> None:
        """The watcher thread: send what the hub holds once the core says it is due, and read the Pipe beside a
        task that runs long (`ProcessorCore.read_beside_from`). While the hub holds results now and then it looks
        every `RESULT_HOLD_LIMIT_SECONDS`, and while tasks start now and then every `READ_BESIDE_SECONDS`, rather
        than be woken for each; once a look finds nothing held, no task running and none started since the last
        look, it sleeps until the hub wakes it (`_wake_watcher`, when something is due before its next look)."""
        core = self._core
        wake = self._watcher_wake
        seen_holds = seen_starts = -1
        with wake:
            while not self._stopping:
                now = time.monotonic()
                due = core.send_held_by
                if due <= now:
                    for effect in core.handle(HeldDue(), now):
                        self._send(effect)
                    continue
                beside = core.read_beside_from
                if beside <= now:
                    self._read_beside(min(due, now + READ_BESIDE_SECONDS) - now)
                    continue
                if due != _NEVER or core.holds != seen_holds:  # held, or held lately
                    look = min(due, beside, now + RESULT_HOLD_LIMIT_SECONDS)
                elif beside != _NEVER or core.starts != seen_starts:  # a task runs, or ran lately: it may run long
                    look = min(beside, now + READ_BESIDE_SECONDS)
                else:
                    look = _NEVER
                seen_holds, seen_starts = core.holds, core.starts
                self._watcher_look = look
                wake.wait(None if look == _NEVER else look - now)

    def _read_beside(self, timeout: float) -> None:
        """A task has run long: wait up to ``timeout`` for the agent to write (without the lock), and hand the core
        what it wrote if that task (or another long one) still runs: the hub reads the Pipe only between tasks."""
        self._watcher_look = time.monotonic() + timeout
        self._lock.release()
        try:
            readable = self._pipe.poll(timeout)
        finally:
            self._lock.acquire()
        now = time.monotonic()
        if readable and self._core.read_beside_from <= now:
            messages = self._read_readable()
            if messages is None:
                _agent_gone()
            for effect in self._core.handle(ReadBeside(messages), now):
                self._send(effect)

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
        started.cpu_since = time.process_time()

    def _pause_profile(self, started: _Started, outcome: Any) -> Any:
        """It waits or ended: note its peak; if it ended, its result carries (duration, CPU, peak memory)."""
        started.cpu += time.process_time() - started.cpu_since
        peak = tracemalloc.get_traced_memory()[1]
        started.memory_peak = max(started.memory_peak, peak - started.memory_base)
        if outcome is _WAITS:
            return outcome
        self._profiled -= 1
        if self._profiled == 0:
            tracemalloc.stop()
        duration = time.perf_counter() - started.started
        return outcome._replace(profiling=(duration, started.cpu, started.memory_peak))


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
