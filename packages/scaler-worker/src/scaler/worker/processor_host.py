"""The local processor's I/O half (`task_runner.RunnerHost`): start, feed, watch and stop the processor
subprocess in the agent's event loop.

It carries out `processor_runner`'s effects (`StartProcessor`: kill the old processor and the processes it
started, start a new one; `SendToProcessor`: write to its Pipe without blocking, the rest once the Pipe is
writable; `MeasureMemory`) and delivers, as `FromRunner` events, every whole message readable on the Pipe
(`ProcessorOutput`, all of one read in one event), the processor's end (`ProcessorEnded`, with the cause and
what it wrote last) and, with a memory limit, the memory of the processor and of the processes it started,
every `memory_limit.POLL_SECONDS` and when asked (`MemoryMeasured`). A processor that
cannot be started is `Broken`: out of processes or memory, a fresh worker (from scaler_cluster) may fare better.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict, Optional, Tuple

from scaler.protocol.errors import DisconnectedError
from scaler.worker.memory_limit import CHILDREN_POLL_SECONDS, POLL_SECONDS
from scaler.worker.processor_link import ProcessorLink
from scaler.worker.processor_memory import MeasureMemory, MemoryMeasured
from scaler.worker.processor_runner import ProcessorEnded, ProcessorOutput, SendToProcessor, StartProcessor
from scaler.worker.resource_usage import ProcessUsage, TreeMemory, kill_descendants
from scaler.worker.worker_events import EXIT_REFUSED, Broken, FromRunner
from scaler.worker.worker_setup import PRELOAD_ENVIRONMENT_VARIABLE, PRELOAD_FAILED_EXIT

logger = logging.getLogger(__name__)

_PROCESSOR_STOP_SECONDS = 2.0


class ProcessorHost:
    def __init__(
        self,
        scheduler_address: str,
        worker_id: str,
        environment: Optional[Dict[str, str]] = None,
        delegation_key: bytes = b"",
        memory_limit: int = 0,
    ) -> None:
        # told to the tasks (in their environment): a task may submit tasks to the same scheduler, with the
        # keys in ``environment`` (security.SecurityConfig.task_environment); its Clients prove the task they are
        # made in with ``delegation_key`` (scaler.protocol.delegation), given to the processor at its start
        self._scheduler_address = scheduler_address
        self._memory_limit = memory_limit  # bytes, 0: none (then memory is not watched)
        self._memory: Optional[TreeMemory] = None
        self._memory_timer: Optional[asyncio.TimerHandle] = None
        self._worker_id = worker_id
        self._environment = environment or {}
        self._delegation_key = delegation_key
        self._worker_name = f"Worker {worker_id}"
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._deliver: Callable[[Any], None] = _not_open
        self._link: Optional[ProcessorLink] = None
        self._usage = ProcessUsage()
        self.effect_handlers: Dict[type, Callable[[Any], None]] = {
            StartProcessor: self._start,
            SendToProcessor: self._send,
            MeasureMemory: self._measure_memory,
        }

    def open(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None]) -> None:
        self._loop = loop
        self._deliver = deliver

    async def close(self) -> None:
        """SIGTERM (the user code's own handlers may clean up), a bounded wait, then SIGKILL."""
        link, self._link = self._link, None
        if link is None:
            return
        self._unwatch(link)
        self._watch_memory(None)
        link.terminate()
        deadline = time.monotonic() + _PROCESSOR_STOP_SECONDS
        while link.reap() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if link.reap() is None:
            link.kill()
            link.reap(_PROCESSOR_STOP_SECONDS)

    def usage(self) -> Tuple[float, int]:
        return self._usage.sample()

    # ------------------------------------------------------------------------- effects

    def _start(self, effect: StartProcessor) -> None:
        loop = self._loop
        assert loop is not None, "open() first"
        old, self._link = self._link, None
        if old is not None:  # it runs tasks that are over (cancelled, timed out): SIGKILL, user code may ignore less
            self._unwatch(old)
            if old.pid is not None:
                kill_descendants(old.pid)
            old.kill()
            self._reap_later(old)
            logger.debug(f"{self._worker_name}: stopped processor {old.processor_id} (pid {old.pid})")
        try:
            link = ProcessorLink.start(
                effect.processor_id, self._scheduler_address, self._worker_id, self._environment,
                self._delegation_key, self._memory_limit,
            )
        except Exception as error:
            loop.call_soon(self._deliver, Broken(f"cannot start a processor: {type(error).__name__}: {error}"))
            return
        self._link = link
        loop.add_reader(link.connection.fileno(), self._on_readable, link)
        loop.add_reader(link.sentinel, self._on_ended, link)
        if link.pid is not None:
            self._usage.watch(link.pid)
        self._watch_memory(link)
        logger.debug(f"{self._worker_name}: started processor {effect.processor_id} (pid {link.pid})")

    def _send(self, effect: SendToProcessor) -> None:
        link = self._link
        if link is None or link.processor_id != effect.processor_id:  # it could not be started: we are stopping
            return
        try:
            if not link.send(effect.message) and self._loop is not None:
                self._loop.add_writer(link.connection.fileno(), self._on_writable, link)
        except DisconnectedError as error:
            logger.warning(f"{self._worker_name}: {error}; waiting for its end to be reported")

    def _measure_memory(self, effect: MeasureMemory) -> None:
        link, memory, loop = self._link, self._memory, self._loop
        if link is None or memory is None or loop is None or link.processor_id != effect.processor_id:
            return
        loop.call_soon(self._deliver, FromRunner(MemoryMeasured(link.processor_id, memory.sample(time.monotonic()))))

    # ------------------------------------------------------------------------- the processor

    def _watch_memory(self, link: Optional[ProcessorLink]) -> None:
        """Measure the memory of ``link``'s processor from now on (None: of none)."""
        if self._memory_timer is not None:
            self._memory_timer.cancel()
            self._memory_timer = None
        self._memory = None
        if link is None or link.pid is None or not self._memory_limit:
            return
        self._memory = TreeMemory(link.pid, CHILDREN_POLL_SECONDS)
        assert self._loop is not None
        self._memory_timer = self._loop.call_later(POLL_SECONDS, self._poll_memory, link)  # (never from an effect)

    def _poll_memory(self, link: ProcessorLink) -> None:
        memory, loop = self._memory, self._loop
        if memory is None or loop is None or self._link is not link:
            return
        self._memory_timer = loop.call_later(POLL_SECONDS, self._poll_memory, link)
        self._deliver(FromRunner(MemoryMeasured(link.processor_id, memory.sample(time.monotonic()))))

    def _on_writable(self, link: ProcessorLink) -> None:
        """The rest of a large message goes once the processor has read the start of it."""
        assert self._loop is not None
        try:
            done = link.flush()
        except DisconnectedError as error:
            logger.warning(f"{self._worker_name}: {error}; waiting for its end to be reported")
            done = True
        if done:
            self._loop.remove_writer(link.connection.fileno())

    def _on_readable(self, link: ProcessorLink) -> None:
        # every whole message readable now, handled as one (a large one may take several calls to arrive)
        try:
            messages = link.receive_all()
        except DisconnectedError:
            assert self._loop is not None
            self._loop.remove_reader(link.connection.fileno())  # its sentinel reports the end
            return
        except Exception:  # a message that does not unpickle: a bug, not a reason to stop serving
            logger.exception(f"{self._worker_name}: dropped unreadable message from processor {link.processor_id}")
            return
        if not messages:
            return
        message: Any = messages[0]
        if len(messages) > 1:
            message = [each for one in messages for each in (one if type(one) is list else (one,))]
        self._deliver(FromRunner(ProcessorOutput(link.processor_id, message)))

    def _on_ended(self, link: ProcessorLink) -> None:
        if self._link is not link:
            return
        last_messages = link.receive_left()  # results it wrote before it ended count
        self._unwatch(link)
        self._watch_memory(None)
        self._link = None
        cause = link.reap(_PROCESSOR_STOP_SECONDS) or "processor ended for an unknown reason"
        preload = self._environment.get(PRELOAD_ENVIRONMENT_VARIABLE)
        if preload and link.exit_code == PRELOAD_FAILED_EXIT:  # no processor of ours can run tasks
            why = f"its --preload {preload!r} failed in its processor (the error is above)"
            self._deliver(Broken(why, EXIT_REFUSED))
            return
        logger.warning(f"{self._worker_name}: {cause} (processor {link.processor_id}, pid {link.pid})")
        self._deliver(FromRunner(ProcessorEnded(link.processor_id, cause, last_messages)))

    def _unwatch(self, link: ProcessorLink) -> None:
        assert self._loop is not None
        try:
            self._loop.remove_reader(link.connection.fileno())
            self._loop.remove_writer(link.connection.fileno())
        except (OSError, ValueError):  # already closed
            pass
        try:
            self._loop.remove_reader(link.sentinel)
        except (OSError, ValueError):
            pass
        if link.pid is not None:
            self._usage.forget(link.pid)

    def _reap_later(self, link: ProcessorLink) -> None:
        """Release a processor we killed once the kernel says it has ended."""
        assert self._loop is not None
        loop = self._loop
        sentinel = link.sentinel

        def reap() -> None:
            loop.remove_reader(sentinel)
            link.reap()

        loop.add_reader(sentinel, reap)


def _not_open(event: Any) -> None:
    raise RuntimeError("ProcessorHost.open() was not called")
