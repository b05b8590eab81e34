"""The agent's end of one processor subprocess: start it, hand it tasks, read its results, end it.

The processor is started with the multiprocessing "spawn" context, so it
shares nothing with the agent but the Pipe. The agent's event loop watches two
file descriptors per processor: the Pipe (results) and the process sentinel
(its end). Both are registered by `WorkerAgent`; this class holds the process
and does the blocking-free parts.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any, List, Optional

from scaler.protocol.errors import DisconnectedError
from scaler.worker.processor import processor_exit_cause, run_processor
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    SERIALIZER_CACHE_CAPACITY,
    receive,
    send,
)

logger = logging.getLogger(__name__)

_SPAWN = multiprocessing.get_context("spawn")


class ProcessorLink:
    __slots__ = ("processor_id", "process", "connection", "pid", "sentinel", "_cause")

    def __init__(self, processor_id: int, process: multiprocessing.process.BaseProcess, connection: Connection):
        self.processor_id = processor_id
        self.process = process
        self.connection = connection
        self.pid: Optional[int] = process.pid
        self.sentinel: int = process.sentinel
        self._cause: Optional[str] = None

    @classmethod
    def start(cls, processor_id: int, scheduler_address: str, worker_id: str) -> ProcessorLink:
        """Start a processor (non-daemonic, so that tasks may start processes of their own)."""
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
            ),
            name=f"Processor[{processor_id}]",
            daemon=False,
        )
        process.start()
        processor_end.close()
        return cls(processor_id, process, agent_end)

    def send(self, message: Any) -> None:
        """Hand a task (or an answer) to the processor; raise DisconnectedError when it is gone (its sentinel
        tells why)."""
        try:
            send(self.connection, message)
        except (OSError, ValueError) as error:  # BrokenPipeError, or the connection is already closed
            raise DisconnectedError(f"processor {self.processor_id} is gone: {error}") from None

    def receive(self) -> Any:
        """One result or wait notice, when the Pipe is readable; raise DisconnectedError once it is closed (the
        processor ended)."""
        try:
            return receive(self.connection)
        except (EOFError, OSError) as error:
            why = error or "end of file"
            raise DisconnectedError(f"processor {self.processor_id} closed its pipe: {why}") from None

    def receive_left(self) -> List[Any]:
        """What the processor wrote before it ended (call once it has ended: never blocks then)."""
        left: List[Any] = []
        try:
            while self.connection.poll():
                left.append(receive(self.connection))
        except (EOFError, OSError):
            pass
        return left

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
        self.connection.close()
        self.process.close()
        return self._cause
