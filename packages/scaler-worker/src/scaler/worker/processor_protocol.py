"""What the agent and its processor say to each other over their multiprocessing Pipe.

A Pipe message is one of the tuples below, or a list of them (read as if they came one by one, in order).

Tasks. The agent sends tasks as a list of `ProcessorTask`: the processor appends them to its local FIFO and
starts the head of the FIFO whenever no task runs (before it resumes a waiting task). The agent keeps up to
`PROCESSOR_PIPELINE_DEPTH` tasks "sent ahead" beyond the one running (while no task waits and the tasks
finish within `PIPELINE_TASK_SECONDS`, as `ProcessorResult.seconds` tells; up to `TINY_TASKS_PIPELINE_DEPTH`
while they finish within `RESULT_HOLD_TASK_SECONDS`), so the processor never idles while the agent turns a
result around, and several tasks travel in one message. ``Drop(task_id)`` asks to
take a task out of the FIFO: the processor answers ``Dropped(task_id)``, or nothing if the task has started
(its result then comes as usual). The processor reads the Pipe only between tasks: when a task ends or waits
it reads whatever is readable without blocking (so a `Drop` or more tasks that arrived meanwhile are seen in
order), then tells the agent (the task's result, or `TaskWaiting`), then starts the head of its FIFO
without reading again. So a ``Drop`` written while a task ran is answered before the agent hears that the
task ended or waits. Idle, it reads one message at a time; it reads the rest of what is readable before it
starts a task ``sent_ahead`` (the agent sent it while it took another for running, so a ``Drop`` of it may
follow), not before one the agent sent as nothing ran (never dropped). A ``Drop`` that comes once its task
started (it was written as the processor took the task) is not answered; the agent learns that the task
started from the processor's next message. While a task runs long (`READ_BESIDE_SECONDS` or more since it
started or resumed), a thread of the processor also reads the Pipe beside it and answers a ``Drop`` at once:
the agent takes back the tasks it sent ahead behind a task that may never end (the scheduler balances them
onto an idle worker), and the tasks it sends meanwhile join the FIFO.

Results. The processor answers each task with its `ProcessorResult`, possibly several in one list. It sends
at once when its FIFO is empty, or when the task that just finished took longer than
`RESULT_HOLD_TASK_SECONDS`; otherwise (a run of quick tasks) it holds results, and starts the head of its
FIFO, until its FIFO is empty or the oldest held one is `RESULT_HOLD_SECONDS` old. Whatever the task started
meanwhile does (it may run for minutes), a thread of the processor sends what is held once the oldest of it
is `RESULT_HOLD_LIMIT_SECONDS` old (later only while a task keeps Python's GIL: up to the interpreter's
switch interval, 5 ms, for Python code, longer in C code that does not release it). So the agent hears that
the task before ended, and takes the head of its inbox for started, within that bound of its start. A
``Dropped`` waits with the results it comes among, on the same bound.

Output. A task submitted with ``stream_output`` runs with its ``sys.stdout`` and ``sys.stderr`` captured: what
it prints travels as lists of `TaskOutputText`, every `task_output.FLUSH_SECONDS` while it runs (from a thread
of the processor) and when it ends, before its result.

Caches. A function, a serializer or an object-storage argument travels as bytes only the first time the
processor needs it; afterwards its ID alone refers to the processor's cached copy. The processor updates its
caches when it reads a task from the Pipe (not when it runs it), so the agent, which applies the same get/put
sequence when it sends, keeps an exact copy, whatever order the tasks then run in and even if some are
dropped: both ends take the rule from one module (`processor_caches`). When the processor loads a function
the agent sent, it says its name (``FunctionLoaded``, as it reads the task), which the agent needs should it
have to stop that task for memory.

Memory. With a memory limit, the processor bounds its data segment to it (`memory_limit`): an allocation of a
task past it fails, and its result says so (``ProcessorResult.over_memory``): the agent recycles the processor
before the next task.

Nested tasks. When a task waits inside the Scaler client (on the tasks it submitted), the processor switches
it out (each task runs in a greenlet of its own) and sends ``TaskWaiting(task_id, True)``: it holds no slot,
and the processor starts the next task of its FIFO, or idles until the agent sends one. When the wait is over
(what it waited for is done, or its timeout passed) and no task runs and the FIFO is empty, the processor
sends ``TaskWaiting(task_id, False)`` and resumes it. Waits end, and tasks resume, in any order. So the
agent knows from the order of the messages which tasks run, which wait and which are still in the FIFO:
when the last running task ends or waits, the head of the FIFO has started; a task it sends when none runs
starts at once (a resume that crossed it only delays it).
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import threading
from multiprocessing.connection import Connection
from pickle import PickleBuffer
from typing import Any, List, NamedTuple, Optional, Tuple

from scaler.protocol.payload import OUT_OF_BAND_BYTES, writable_buffers

FUNCTION_CACHE_CAPACITY = 128
SERIALIZER_CACHE_CAPACITY = 16
# object-storage arguments a processor keeps (serialized), bounded by their total size
OBJECT_CACHE_BYTES = 256 * 1024 * 1024

# tasks the agent keeps in the processor's FIFO beyond the one running (0: one task at a time), while the
# tasks run quicker than PIPELINE_TASK_SECONDS (for longer ones the gap between two tasks is negligible, and
# tasks held back here could neither be given to an idle worker nor be cancelled without waiting)
PROCESSOR_PIPELINE_DEPTH = 4
PIPELINE_TASK_SECONDS = 0.1
# ... and up to TINY_TASKS_PIPELINE_DEPTH while they run quicker than RESULT_HOLD_TASK_SECONDS (a no-op takes
# 10-20 µs: four ahead made a Pipe message, a wake-up of each end and an event of the agent's core per five
# tasks; 32 ahead are at most ~6 ms of work, which a balance or a cancel takes back as it does 4)
TINY_TASKS_PIPELINE_DEPTH = 32
# the processor holds a result back (to send it with the next ones) only after a task this quick, and only
# while the oldest held result is younger than RESULT_HOLD_SECONDS; whatever the tasks started meanwhile do, a
# thread of the processor sends what is held once the oldest of it is RESULT_HOLD_LIMIT_SECONDS old
# the processor reads the Pipe beside a task that has run this long (from a thread of its own: see above)
READ_BESIDE_SECONDS = PIPELINE_TASK_SECONDS
RESULT_HOLD_TASK_SECONDS = 0.0002
RESULT_HOLD_SECONDS = 0.001
RESULT_HOLD_LIMIT_SECONDS = 0.005


class ProcessorTask(NamedTuple):
    task_id: bytes
    function_id: bytes
    function: Optional[bytes]  # cloudpickled function; None: the processor holds it already
    serializer_id: bytes  # b"": cloudpickle
    serializer: Optional[bytes]  # cloudpickled serializer; None: the processor holds it already (or cloudpickle)
    # (name, serialized value, object ID); name "" is positional; object ID b"": an inline argument; else an
    # object-storage argument, its value None when the processor holds it already; a large value crosses the Pipe
    # out of band (the agent sends a PickleBuffer; it arrives as bytes, or a bytearray if writable), and an object
    # of several frames is a list of them (scaler.protocol.payload)
    arguments: List[Tuple[str, Any, bytes]]
    profiling: bool
    stream_output: bool = False  # capture what it prints and send it as `TaskOutputText` (task_output.py)
    sent_ahead: bool = False  # sent while another task ran (as the agent saw it): a `Drop` of it may follow
    scope: bytes = b""  # the client whose objects it reads (`Task.scopeId`, or its client): its Clients stand for it


class Drop(NamedTuple):
    """From the agent: take this task out of the FIFO if it has not started (answered by `Dropped`)."""

    task_id: bytes


class Dropped(NamedTuple):
    """From the processor: the task was taken out of the FIFO unstarted; no result will come for it."""

    task_id: bytes


class TaskWaiting(NamedTuple):
    """From the processor: this task waits inside the Scaler client (``waiting``: switched out, it holds no
    slot), or it runs again (its wait is over and the processor resumed it)."""

    task_id: bytes
    waiting: bool


class ProcessorResult(NamedTuple):
    task_id: bytes
    status: int  # scaler.protocol.messages.TaskStatus
    payload: Any  # bytes; or a list of frames (scaler.protocol.payload), PickleBuffers on their way
    error_text: str
    profiling: Optional[Tuple[float, float, int]]  # duration seconds, CPU seconds, peak memory bytes
    seconds: float = 0.0  # how long the task took on the processor (wall time), profiled or not
    function: str = ""  # the task's function as module.qualname (for monitors); "" if it could not be loaded
    error_line: str = ""  # a failure's exception in one line (``ValueError: ...``), for monitors and reports
    ended: float = 0.0  # when it ended (time.monotonic(): the agent's clock too, on the same host); 0: not said
    over_memory: bool = False  # it failed for memory: an allocation past the worker's limit was refused


class FunctionLoaded(NamedTuple):
    """From the processor, when it loads a function the agent sent: its name, for the errors the agent makes
    (a task stopped for memory names its function)."""

    function_id: bytes
    name: str  # module.qualname; "" if it could not be loaded


class TaskOutputText(NamedTuple):
    """From the processor: text a task printed (``Client(stream_output=True)``), sent before its result."""

    task_id: bytes
    stream: int  # scaler.protocol.messages.OutputStream
    text: str


# Framing. Both ends use the Pipe as a byte stream (a socket pair). A message is pickled (protocol 5) and the
# `pickle.PickleBuffer`s in it (large payloads: the agent wraps every object frame of the serializer's
# `OUT_OF_BAND_BYTES` or more) travel out of band, after the pickle, so that no end copies them into or out of a pickle:
#
#     !QI: the pickle's length, the number n of out-of-band buffers; n x !Q: their lengths, the top bit set for a
#     read-only one; the pickle; the buffers
#
# The processor reads the pickle with one blocking ``recv(size, MSG_WAITALL)``, a read-only buffer the same way
# into bytes, and a writable one straight into a bytearray of its size (as a NumPy array rebuilt on it must be
# writable); the unpickled message holds them in place of the buffers: a 10 MB argument is copied once, by the
# kernel. The agent writes and reads without blocking (`processor_link`).

HEADER = struct.Struct("!QI")
_SMALL_MESSAGE_BYTES = 64 * 1024  # header and pickle go in one write below this size


def encode(message: Any) -> List[Any]:
    """The frames (bytes-like) to write, in order, for ``message``."""
    buffers: List[pickle.PickleBuffer] = []
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    header = HEADER.pack(len(data), len(raws))
    if raws:
        header += struct.pack(f"!{len(raws)}Q", *[raw.nbytes | (_READ_ONLY if raw.readonly else 0) for raw in raws])
    if len(data) < _SMALL_MESSAGE_BYTES:
        return [header + data, *raws]
    return [header, data, *raws]


def buffer_lengths(data: Any, count: int, offset: int = HEADER.size) -> List[int]:
    """The ``count`` out-of-band buffer lengths at ``offset`` in ``data`` (just after the fixed header, by default),
    each with its read-only bit: mask it with `LENGTH_MASK`."""
    return list(struct.unpack_from(f"!{count}Q", data, offset)) if count else []


_READ_ONLY = 1 << 63
LENGTH_MASK = _READ_ONLY - 1


class PipeEnd:
    """The processor's end of the Pipe: blocking reads and writes of whole messages."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection  # kept open: it owns the descriptor the socket below duplicates
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(connection.fileno()))
        self._socket.setblocking(True)
        self._send_lock = threading.Lock()
        self._readable = select.poll()  # for `readable`, asked after every task: half the cost of a select
        self._readable.register(self._socket, select.POLLIN)

    def poll(self, timeout: float) -> bool:
        """Whether a message (or the end of the Pipe) is readable within ``timeout`` seconds."""
        return bool(select.select([self._socket], [], [], timeout)[0])

    def readable(self) -> bool:
        """Whether a message (or the end of the Pipe) is readable now. One thread at a time, as the reads are."""
        return bool(self._readable.poll(0))

    def wait_readable(self, other: int, timeout: Optional[float]) -> bool:
        """Wait until the Pipe or the descriptor ``other`` is readable, or ``timeout`` seconds (None: no limit);
        whether the Pipe is."""
        pipe = self._socket.fileno()
        return pipe in select.select([pipe, other], [], [], timeout)[0]

    def send(self, message: Any) -> None:
        """Raise OSError when the agent is gone. Any thread may send (a task's output is sent from another)."""
        frames = encode(message)
        with self._send_lock:
            for frame in frames:
                self._socket.sendall(frame)

    def receive(self) -> Any:
        """The next message, waiting for it; raise EOFError when the agent closed the Pipe."""
        length, count = HEADER.unpack(self._read(HEADER.size))
        lengths = buffer_lengths(self._read(8 * count), count, 0)
        data = self._read(length)
        buffers = [self._read(size & LENGTH_MASK) if size & _READ_ONLY else self._read_into(size) for size in lengths]
        return pickle.loads(data, buffers=buffers)

    def _read(self, size: int) -> bytes:
        if size == 0:
            return b""
        data = self._socket.recv(size, socket.MSG_WAITALL)
        if len(data) == size:
            return data
        parts = []
        missing = size
        while data:  # a signal interrupted the wait: go on
            parts.append(data)
            missing -= len(data)
            if missing == 0:
                return b"".join(parts)
            data = self._socket.recv(missing, socket.MSG_WAITALL)
        raise EOFError("the agent closed the pipe")

    def _read_into(self, size: int) -> bytearray:
        buffer = bytearray(size)
        with memoryview(buffer) as view:
            done = 0
            while done < size:
                read = self._socket.recv_into(view[done:], size - done, socket.MSG_WAITALL)
                if read == 0:
                    raise EOFError("the agent closed the pipe")
                done += read
        return buffer


def out_of_band(payload: Any) -> Any:
    """A payload as it goes to the processor: each large frame crosses the Pipe out of band, from the very buffer
    storage's answer arrived in (`processor_protocol`), small ones inside the pickle. A frame that is only read
    (a whole pickle, or a buffer the payload's pickle marks read-only) is marked read-only, so the processor
    reads it into bytes, which a ``bytes`` value then is without a copy; the others into writable memory."""
    if type(payload) is not list:
        return PickleBuffer(memoryview(payload).toreadonly()) if len(payload) >= OUT_OF_BAND_BYTES else payload
    frames: List[Any] = [payload[0]]
    writable = writable_buffers(payload[0])
    for index, frame in enumerate(payload[1:]):
        if len(frame) < OUT_OF_BAND_BYTES:
            frames.append(frame)
        elif index < len(writable) and not writable[index]:
            frames.append(PickleBuffer(memoryview(frame).toreadonly()))
        else:
            frames.append(PickleBuffer(frame))
    return frames
