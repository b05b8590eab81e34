"""The agent's end of one processor subprocess: start it, hand it tasks, read its results, end it.

The processor is started with the multiprocessing "spawn" context, so it
shares nothing with the agent but the Pipe. The agent's event loop watches two
file descriptors per processor: the Pipe (results) and the process sentinel
(its end). Both are registered by `WorkerAgent`; this class holds the process
and does the blocking-free parts.

The agent never blocks on its end of the Pipe (a socket pair; each call says
MSG_DONTWAIT, whatever the event loop did to the descriptor's flags): messages are
framed as `processor_protocol` says (large payloads out of band, written from
where they lie), written as far as the Pipe takes them, the rest kept until it
is writable again (`flush`), and read into a buffer from which every complete
message is taken (`receive_all`); once a message's pickle has arrived, its
out-of-band buffers (a large result) are read straight into memory of their
own, so a result exists once in the agent, never also in the read buffer.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import select
import signal
import socket
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, Deque, Dict, List, Optional, Tuple

from scaler.protocol.errors import DisconnectedError
from scaler.worker.processor import run_processor
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    HEADER,
    LENGTH_MASK,
    OBJECT_CACHE_BYTES,
    SERIALIZER_CACHE_CAPACITY,
    buffer_lengths,
    encode,
)

logger = logging.getLogger(__name__)

_SPAWN = multiprocessing.get_context("spawn")
_READ_BYTES = 1 << 20


class ProcessorLink:
    __slots__ = (
        "processor_id",
        "process",
        "connection",
        "pid",
        "sentinel",
        "_cause",
        "exit_code",
        "_fd",
        "_socket",
        "_out",
        "_in",
        "_incoming",
        "_ready",
    )

    def __init__(self, processor_id: int, process: multiprocessing.process.BaseProcess, connection: Connection):
        self.processor_id = processor_id
        self.process = process
        self.connection = connection
        self.pid: Optional[int] = process.pid
        self.sentinel: int = process.sentinel
        self._cause: Optional[str] = None
        self.exit_code: Optional[int] = None  # once reaped
        self._fd = connection.fileno()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(self._fd))
        self._out: Deque[memoryview] = deque()  # bytes not written yet
        self._in = bytearray()  # bytes read, not yet a whole message
        self._incoming: Optional[_Incoming] = None  # a message whose out-of-band buffers are being read
        self._ready: Deque[Any] = deque()  # messages read, not handed out yet (by `receive`)

    @classmethod
    def start(
        cls,
        processor_id: int,
        scheduler_address: str,
        worker_id: str,
        environment: Optional[Dict[str, str]] = None,
        delegation_key: bytes = b"",
        memory_limit: int = 0,
    ) -> ProcessorLink:
        """Start a processor (non-daemonic, so that tasks may start processes of their own); ``environment``:
        variables set in it for its tasks; ``delegation_key``: what its tasks' Clients prove their task with (an
        argument of the spawned process, never in its environment or on its command line); ``memory_limit``:
        the worker's (`memory_limit`), 0 for none."""
        agent_end, processor_end = _SPAWN.Pipe(duplex=True)
        process = _SPAWN.Process(
            target=run_processor,
            args=(
                processor_end,
                os.getpid(),
                scheduler_address,
                worker_id,
                FUNCTION_CACHE_CAPACITY,
                SERIALIZER_CACHE_CAPACITY,
                OBJECT_CACHE_BYTES,
                environment,
                delegation_key,
                memory_limit,
            ),
            name=f"Processor[{processor_id}]",
            daemon=False,
        )
        process.start()
        processor_end.close()
        return cls(processor_id, process, agent_end)

    def send(self, message: Any) -> bool:
        """Hand a task (or an answer) to the processor: True when it is all written, False when the rest waits
        for `flush` (call it once the Pipe is writable); raise DisconnectedError when the processor is gone
        (its sentinel tells why). Out-of-band buffers in ``message`` are written from where they are."""
        self._out.extend(memoryview(frame) for frame in encode(message))
        return self.flush()

    @property
    def pending(self) -> bool:
        """Whether bytes wait for the Pipe to be writable."""
        return bool(self._out)

    def flush(self) -> bool:
        """Write what waits, as far as the Pipe takes it; True when nothing waits any more."""
        out = self._out
        while out:
            chunk = out[0]
            try:
                written = self._socket.send(chunk, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except (OSError, ValueError) as error:  # BrokenPipeError, or the connection is already closed
                raise DisconnectedError(f"processor {self.processor_id} is gone: {error}") from None
            if written == len(chunk):
                out.popleft()
            else:
                out[0] = chunk[written:]
        return True

    def receive_all(self) -> List[Any]:
        """Every whole message readable now (results, notices, or lists of them), oldest first; never blocks.
        Raise DisconnectedError once the Pipe is closed and nothing whole is left (the processor ended)."""
        messages = list(self._ready)
        self._ready.clear()
        buffer = self._in
        ended = False
        while True:
            incoming = self._incoming
            try:
                if incoming is not None:
                    with incoming.target() as target:
                        read = self._socket.recv_into(target, len(target), socket.MSG_DONTWAIT)
                else:
                    chunk = self._socket.recv(_READ_BYTES, socket.MSG_DONTWAIT)
                    read = len(chunk)
            except BlockingIOError:
                break
            except OSError as error:
                if messages:
                    break
                raise DisconnectedError(f"processor {self.processor_id} closed its pipe: {error}") from None
            if not read:
                ended = True
                break
            if incoming is not None:
                incoming.advance(read)
                if not incoming.complete:
                    continue
                self._incoming = None
                messages.append(incoming.message())
            else:
                buffer += chunk
            self._take_messages(messages)
        self._take_messages(messages)
        if ended and not messages:
            raise DisconnectedError(f"processor {self.processor_id} closed its pipe: end of file")
        return messages

    def receive(self, timeout: Optional[float] = None) -> Any:
        """The next message, waiting for it up to ``timeout`` (None: without limit); raise TimeoutError."""
        while not self._ready:
            if not select.select([self._fd], [], [], timeout)[0]:
                raise TimeoutError(f"processor {self.processor_id} said nothing within {timeout} seconds")
            self._ready.extend(self.receive_all())
        return self._ready.popleft()

    def receive_left(self) -> List[Any]:
        """What the processor wrote before it ended (call once it has ended: never blocks then)."""
        try:
            return self.receive_all()
        except DisconnectedError:
            return []

    def _head(self) -> Optional[Tuple[int, int, List[int]]]:
        """The message at the head of the read buffer: (where its pickle starts, the pickle's length, the lengths
        of its out-of-band buffers); None while its header is incomplete."""
        buffer = self._in
        if len(buffer) < HEADER.size:
            return None
        length, count = HEADER.unpack_from(buffer)
        start = HEADER.size + 8 * count
        if len(buffer) < start:
            return None
        sizes = [size & LENGTH_MASK for size in buffer_lengths(buffer, count)]
        return start, length, sizes

    def _take_messages(self, messages: List[Any]) -> None:
        """Every message whose pickle is in the read buffer: whole, or left to be read (`_incoming`)."""
        buffer = self._in
        while self._incoming is None:
            head = self._head()
            if head is None or len(buffer) < head[0] + head[1]:
                return
            start, length, sizes = head
            incoming = _Incoming(bytes(buffer[start : start + length]), sizes)
            del buffer[: start + length]
            incoming.take_from(buffer)  # what was read of its buffers with the pickle
            if incoming.complete:
                messages.append(incoming.message())
            else:
                self._incoming = incoming

    def close(self) -> None:
        """Close the agent's end of the Pipe (the processor then exits on its own)."""
        self._socket.close()
        self.connection.close()

    def kill(self) -> None:
        """SIGKILL the processor (it runs user code, which may ignore anything milder)."""
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM the processor: lets the user code's own handlers clean up."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        if self._cause is None and self.pid is not None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def reap(self, timeout: float = 0) -> Optional[str]:
        """If the processor has ended (waiting up to ``timeout``): release it and return the cause; else None."""
        if self._cause is not None:
            return self._cause
        self.process.join(timeout)
        exit_code = self.process.exitcode
        if exit_code is None:
            return None
        self._cause = processor_exit_cause(exit_code)
        self.exit_code = exit_code
        self.close()
        self.process.close()
        return self._cause


class _Incoming:
    """A message whose pickle arrived: its out-of-band buffers, each read straight into a bytearray of its size."""

    __slots__ = ("_pickle", "_buffers", "_index", "_filled")

    def __init__(self, data: bytes, sizes: List[int]) -> None:
        self._pickle = data
        self._buffers = [bytearray(size) for size in sizes]
        self._index = 0  # the buffer being read
        self._filled = 0  # of it, the bytes read
        self.advance(0)

    @property
    def complete(self) -> bool:
        return self._index == len(self._buffers)

    def target(self) -> memoryview:
        """Where the next bytes go (release it before the next call)."""
        return memoryview(self._buffers[self._index])[self._filled :]

    def advance(self, count: int) -> None:
        self._filled += count
        buffers = self._buffers
        while self._index < len(buffers) and self._filled == len(buffers[self._index]):
            self._index += 1
            self._filled = 0

    def take_from(self, buffer: bytearray) -> None:
        """Move what ``buffer`` starts with into the out-of-band buffers, as far as they take it."""
        while buffer and not self.complete:
            with self.target() as target:
                count = min(len(target), len(buffer))
                target[:count] = buffer[:count]
            del buffer[:count]
            self.advance(count)

    def message(self) -> Any:
        return pickle.loads(self._pickle, buffers=self._buffers)


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
