"""The local processor as a task runner (`task_runner.TaskRunner`), without I/O: the agent's model of its
processor subprocess, and what it sends it.

The worker has one slot and one processor. The model is the tasks that run on the processor (normally one;
two for a moment when a task the agent sent crosses a waiting task the processor resumed), the tasks that
wait there (each in its greenlet, holding no slot), its inbox (tasks sent ahead into its FIFO, not started,
in order), and its copy of the caches (`processor_caches`). `processor_protocol` describes the conversation;
`processor_host.ProcessorHost` carries out the effects (`StartProcessor`, `SendToProcessor`) and delivers
the processor's messages and end (`ProcessorOutput`, `ProcessorEnded`, inside the core's `FromRunner`
events).

The slot is free when no task runs: the next ready task is sent then (the newest first while tasks wait, so
that a waiting task's children run before older work). Pipeline: while one task runs, none waits, and the last
one that ended took less than `PIPELINE_TASK_SECONDS`, up to ``pipeline_depth`` more are sent ahead (several
in one Pipe message; up to ``tiny_tasks_depth`` while it took less than `RESULT_HOLD_TASK_SECONDS`, so that
tiny tasks cross the Pipe dozens per message), so that the processor starts the next one without waiting for
the agent. The processor starts the head of its FIFO whenever no task runs, before it resumes a waiting task,
so when the last running task ends or waits, the head of the inbox has started (its timeout counts from then).
Tasks sent ahead that a higher-priority task arrived after are taken back (``Drop``; the processor answers
``Dropped``) and return to the queue; nothing is sent ahead while one is being taken back. So are the tasks
sent ahead that the scheduler asks back (`take_back`, on a ``BalanceRequest`` the queue cannot answer alone):
the processor answers even while the task before them runs on, once it has run long (`READ_BESIDE_SECONDS`),
so a task that never ends keeps none of them.

Nested tasks: a task that waits inside the Scaler client gives the slot up without leaving the processor
(`TaskWaiting`); the runner tells the core (`RunnerOwner.waiting`, which tells the scheduler: the task no
longer counts against the worker's room) and fills the slot. When its wait is over the processor resumes
it and says so (`TaskWaiting(..., False)`, `RunnerOwner.resumed`). Waiting tasks cost no process or thread
each and resume in any order, so nested tasks cannot deadlock the worker.

Ending tasks: a cancel of a task sent ahead is confirmed at once (reported `returned`), without waiting for
the running one; the task is dropped the same way, kept in the model of the FIFO until the processor
answers, and nothing more is reported of it. Should it be taken for started (the processor took it before
it read the Drop: as the Drop was on its way, or while it held the results of quick tasks before it, which
it sends within `RESULT_HOLD_LIMIT_SECONDS` all the same: `processor_protocol`), the processor is stopped
once that message is read, and its result, if the message brought it, dropped: it never delivers a result,
and runs at most about that long after its cancel was confirmed.
A started task (running or waiting; cancelled, timed out) ends by stopping the processor, which ends every
started task (reported `died`, naming what happened) and returns the ones sent ahead (they had not
started); a new processor takes over. The same when the processor dies on its own.

Each task's life here is one table (`processor_lifecycle`); a message from the processor the table has no
transition for (a bug of the processor, or of this model) is logged with the task's recent events and dropped.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from scaler.protocol.message_limits import show_size
from scaler.protocol.messages import MemoryKill, TaskStatus
from scaler.worker.lru_cache import LRUCache
from scaler.worker.memory_limit import over_limit
from scaler.worker.processor_caches import ProcessorCaches
from scaler.worker.processor_lifecycle import PROCESSOR_TASK_LIFECYCLE, SentAction, SentEvent, SentState
from scaler.worker.processor_memory import MeasureMemory, MemoryMeasured, MemoryWatch
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    OBJECT_CACHE_BYTES,
    PIPELINE_TASK_SECONDS,
    PROCESSOR_PIPELINE_DEPTH,
    RESULT_HOLD_TASK_SECONDS,
    Drop,
    Dropped,
    FunctionLoaded,
    ProcessorResult,
    ProcessorTask,
    TaskOutputText,
    TaskWaiting,
)
from scaler.worker.task_failure import error_line, failure_payload
from scaler.worker.task_runner import ReadyTask, RunnerOwner

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- effects and messages


@dataclass(slots=True)
class StartProcessor:
    """Start a processor under this ID in place of the current one, which is killed if it still runs."""

    processor_id: int


@dataclass(slots=True)
class SendToProcessor:
    """A list of `ProcessorTask`s for the processor's FIFO, or a list of `Drop`s."""

    processor_id: int
    message: Any


@dataclass(slots=True)
class ProcessorOutput:
    """What a processor wrote: a `ProcessorResult`, `TaskWaiting` or `Dropped`, or a list of them."""

    processor_id: int
    message: Any


@dataclass(slots=True)
class ProcessorEnded:
    """A processor ended on its own (crash, signal, exit) after writing ``last_messages``."""

    processor_id: int
    cause: str
    last_messages: List[Any] = field(default_factory=list)


_TABLE = PROCESSOR_TASK_LIFECYCLE.table
_TERMINAL = PROCESSOR_TASK_LIFECYCLE.terminal
_HISTORY_LENGTH = 8
_SENT = SentState.SENT
_RECALLING = SentState.RECALLING
_DROPPING = SentState.DROPPING
_WAITING = SentState.WAITING
_FINISHED = SentState.FINISHED
_DIED = SentState.DIED
_STOPPING = SentState.STOPPING
_STARTED = frozenset((SentState.RUNNING, SentState.STARTED_DROPPING, SentState.STOPPING, SentState.WAITING))
_CANCELLED = frozenset((SentState.DROPPING, SentState.STOPPING))  # still on the processor, cancel confirmed


class _Sent:
    """A task the processor was given."""

    __slots__ = ("task_id", "priority", "function_id", "state", "history")

    def __init__(self, task_id: bytes, priority: int, function_id: bytes, state: SentState) -> None:
        self.task_id = task_id
        self.priority = priority
        self.function_id = function_id
        self.state = state
        self.history: List[SentEvent] = []


# ----------------------------------------------------------------------------- the runner


class ProcessorRunner:
    def __init__(
        self,
        pipeline_depth: int = PROCESSOR_PIPELINE_DEPTH,
        object_cache_bytes: int = OBJECT_CACHE_BYTES,
        memory_limit: int = 0,
        tiny_tasks_depth: int = 0,
    ) -> None:
        self._pipeline_depth = max(0, pipeline_depth)
        self._tiny_tasks_depth = max(self._pipeline_depth, tiny_tasks_depth)  # the worker: TINY_TASKS_PIPELINE_DEPTH
        self._quick = False  # the last task that ended while no other ran or waited was quick: send ahead
        self._tiny = False  # ... and tiny: send further ahead
        self._processor_ids = itertools.count()
        self._processor_id = -1
        self._tasks: Dict[bytes, _Sent] = {}
        self._running: List[_Sent] = []  # the tasks running on the processor (not waiting)
        self._waiting = 0  # the tasks waiting on the processor
        self._inbox: List[_Sent] = []  # the tasks sent ahead to the processor, not started, in its FIFO order
        self._dropping = 0  # of them, those whose cancel was confirmed (DROPPING)
        self._returning: List[bytes] = []  # to report returned once the event is handled (taken back, cancelled)
        self._drops: List[Drop] = []
        self._to_stop: List[_Sent] = []  # cancelled and started: the processor is stopped once the event is handled
        self._caches: ProcessorCaches[bool] = ProcessorCaches(object_cache_bytes)  # which IDs the processor holds
        self._function_names: LRUCache[bytes, str] = LRUCache(FUNCTION_CACHE_CAPACITY)  # for memory errors
        self._memory = MemoryWatch(memory_limit)
        self._stale = False  # files were uploaded since it started: replaced as soon as no task runs there
        self._message_handlers: Dict[type, Callable[[RunnerOwner, Any, List[Any]], None]] = {
            ProcessorOutput: self._on_output,
            ProcessorEnded: self._on_ended,
            MemoryMeasured: self._on_memory,
        }
        self._output_handlers: Dict[type, Callable[[RunnerOwner, Any, List[Any]], None]] = {
            ProcessorResult: self._on_result,
            TaskWaiting: self._on_waiting,
            Dropped: self._on_dropped,
            TaskOutputText: self._on_task_output,
            FunctionLoaded: self._on_function_loaded,
        }
        A = SentAction
        self._actions: Dict[SentAction, Callable[[_Sent, RunnerOwner, List[Any]], None]] = {
            A.SEND_DROP: self._send_drop,
            A.REPORT_RETURNED: self._report_returned,
            A.LEAVE_INBOX: self._leave_inbox,
            A.LEAVE_RUNNING: self._leave,
            A.STOP_PROCESSOR: self._collect_to_stop,
        }

    # ------------------------------------------------------------------------- TaskRunner

    def start(self, out: List[Any]) -> None:
        self._new_processor(out)

    def fill(self, owner: RunnerOwner, out: List[Any]) -> None:
        """Run the next task if the slot is free (no task runs); keep the processor's FIFO filled while one task
        runs and none waits."""
        running = self._running
        inbox = self._inbox
        if inbox:  # tasks sent ahead must not run before a higher priority one that came later: take them back
            best = owner.best_priority
            if best is not None:
                outranked = [sent for sent in inbox if sent.priority < best and sent.state is _SENT]
                if outranked:
                    self._recall(outranked, owner, out)
        memory = self._memory
        if memory.checking:
            return
        if memory.suspect and not running and not inbox and not self._waiting:
            if memory.must_recycle:
                self._recycle(f"a task of it was refused memory, peak {show_size(memory.peak)}", out)
            else:
                memory.checking = True
                out.append(MeasureMemory(self._processor_id))
                return
        if self._stale and not running and not inbox and not self._waiting:
            self._recycle("files were uploaded (Client.upload_file)", out)
        batch: Optional[List[ProcessorTask]] = None
        if not running and not inbox:
            ready = owner.next_ready(self._waiting > 0)
            if ready is not None:
                batch = [self._caches.outgoing(ready, False)]
                self._run(owner, ready)
        if len(running) == 1 and not self._waiting and self._quick and not memory.suspect and not self._stale:
            depth = self._tiny_tasks_depth if self._tiny else self._pipeline_depth
            if len(inbox) < depth and not (inbox and any(sent.state is _RECALLING for sent in inbox)):
                while len(inbox) < depth:
                    ready = owner.next_ready(False)
                    if ready is None:
                        break
                    if batch is None:
                        batch = []
                    batch.append(self._caches.outgoing(ready, True))
                    task = ready.task
                    sent = _Sent(task.task_id, task.priority, task.function_id, SentState.SENT)
                    self._tasks[task.task_id] = sent
                    inbox.append(sent)
        if batch:
            out.append(SendToProcessor(self._processor_id, batch))

    def cancel(self, owner: RunnerOwner, task_ids: Sequence[bytes], out: List[Any]) -> None:
        """A task sent ahead is cancelled at once and dropped from the processor's FIFO; a started one by
        stopping the processor."""
        tasks = self._tasks
        for task_id in task_ids:
            sent = tasks.get(task_id)
            if sent is not None:
                self._step(sent, SentEvent.CANCEL, owner, out)
        self._stop_for_cancels(owner, out)
        self._end_returning(owner)
        drops, self._drops = self._drops, []
        if drops:
            out.append(SendToProcessor(self._processor_id, drops))

    def take_back(self, owner: RunnerOwner, count: int, out: List[Any]) -> None:
        """Take back up to ``count`` tasks sent ahead (those that would start last first): the processor gives them
        up, if they have not started, even while the task before them runs on (it reads its Pipe beside a task
        that runs long), and they return to the queue (`RunnerOwner.returned`). Nothing more is sent ahead until a
        task ends quickly: the one that runs may never end."""
        taken = [sent for sent in reversed(self._inbox) if sent.state is _SENT][:count]
        if taken:
            self._quick = False
            self._recall(taken, owner, out)

    def abort(self, owner: RunnerOwner, task_id: bytes, why: str, out: List[Any]) -> None:
        if task_id in self._tasks:
            self._stop(owner, f"its processor was stopped: {why}", out)

    def on_message(self, owner: RunnerOwner, message: Any, out: List[Any]) -> None:
        self._message_handlers[type(message)](owner, message, out)

    def restart(self, owner: RunnerOwner, why: str, out: List[Any]) -> None:
        self._stop(owner, why, out)

    def refresh(self, out: List[Any]) -> None:
        self._stale = True

    def holds_function(self, function_id: bytes) -> bool:
        return function_id in self._caches.functions

    def holds_serializer(self, serializer_id: bytes) -> bool:
        return serializer_id in self._caches.serializers

    def holds_objects(self, object_ids: Sequence[bytes]) -> bool:
        objects = self._caches.objects
        return all(object_id in objects for object_id in object_ids)

    @property
    def newest_first(self) -> bool:
        return self._waiting > 0

    @property
    def unstarted(self) -> int:
        """The tasks sent ahead, but those whose cancel was confirmed."""
        return len(self._inbox) - self._dropping

    @property
    def running(self) -> int:
        """The tasks that run on the processor (not waiting): normally 0 or 1."""
        return len(self._running)

    @property
    def suspended(self) -> int:
        """The tasks that wait on the processor for what they submitted."""
        return self._waiting

    @property
    def memory_kills(self) -> int:
        """Tasks stopped for going over the memory limit since the worker started."""
        return self._memory.kills

    def take_memory_kills(self) -> List[MemoryKill]:
        return self._memory.take_killed()

    # ------------------------------------------------------------------------- observation

    @property
    def processor_id(self) -> int:
        return self._processor_id

    @property
    def started_tasks(self) -> List[bytes]:
        """The IDs of the tasks started on the processor (running or waiting)."""
        return [sent.task_id for sent in self._tasks.values() if sent.state in _STARTED]

    @property
    def inbox(self) -> List[bytes]:
        """The IDs of the tasks sent ahead to the processor, not started, in the order they will run."""
        return [sent.task_id for sent in self._inbox]

    @property
    def cancelled_tasks(self) -> List[bytes]:
        """The IDs of the tasks still on the processor (sent ahead, or started after all) whose cancel was
        confirmed."""
        return [sent.task_id for sent in self._tasks.values() if sent.state in _CANCELLED]

    def state_of(self, task_id: bytes) -> Optional[SentState]:
        sent = self._tasks.get(task_id)
        return sent.state if sent is not None else None

    # ------------------------------------------------------------------------- the processor's messages

    def _on_output(self, owner: RunnerOwner, output: ProcessorOutput, out: List[Any]) -> None:
        if output.processor_id != self._processor_id:
            what = type(output.message).__name__
            logger.debug(f"Worker: dropped {what} from stopped processor {output.processor_id}")
            return
        message = output.message
        handlers = self._output_handlers
        if type(message) is list:
            for each in message:
                handlers[type(each)](owner, each, out)
        else:
            handlers[type(message)](owner, message, out)
        self._end_returning(owner)  # the tasks taken back together go back together, in their order
        self._stop_for_cancels(owner, out)  # a cancelled task started, and it did not end in this message

    def _on_ended(self, owner: RunnerOwner, ended: ProcessorEnded, out: List[Any]) -> None:
        """What it wrote before it ended counts, in order (results, and the waits and Dropped between them: a result
        after a wait notice is of the task that started then); every task started there and not ended died with
        it."""
        if ended.processor_id != self._processor_id:
            return
        handlers = self._output_handlers
        for message in ended.last_messages:
            for each in message if type(message) is list else (message,):
                handlers[type(each)](owner, each, out)
        cause = ended.cause
        running = ", ".join(sent.task_id.hex() for sent in self._running)
        reason = f"{cause}, while task {running} ran beside this one" if running else cause
        self._stop(owner, reason, out, running_reason=cause)

    def _on_result(self, owner: RunnerOwner, result: ProcessorResult, out: List[Any]) -> None:
        sent = self._tasks.get(result.task_id)
        if sent is None or sent not in self._running:
            logger.warning(f"Worker: dropped result of task {result.task_id.hex()}: not running on the processor")
            return
        if not self._step(sent, SentEvent.RESULT, owner, out):
            return
        self._memory.task_ran()
        if result.over_memory:
            self._memory.refused_allocation(result.task_id, result.function)
        if len(self._running) == 1 and not self._waiting:
            self._quick = result.seconds < PIPELINE_TASK_SECONDS
            self._tiny = result.seconds < RESULT_HOLD_TASK_SECONDS
        self._leave(sent, owner, out)
        if sent.state is not _FINISHED:  # its cancel was confirmed: it delivers nothing
            logger.debug(f"Worker: dropped result of task {result.task_id.hex()}: cancelled")
            return
        owner.finished(
            result.task_id,
            result.status,
            result.payload,
            result.error_text,
            result.profiling,
            result.function,
            result.seconds,
            result.error_line,
            result.ended,
        )

    def _on_function_loaded(self, owner: RunnerOwner, loaded: FunctionLoaded, out: List[Any]) -> None:
        self._function_names.put(loaded.function_id, loaded.name)

    def _on_memory(self, owner: RunnerOwner, measured: MemoryMeasured, out: List[Any]) -> None:
        """Past the limit: stop what runs (it fails for memory) or replace an idle processor; asked for, a fresh
        measure of an idle processor decides whether it is recycled (`processor_memory`)."""
        if measured.processor_id != self._processor_id:
            return
        memory = self._memory
        memory.measured(measured.resident_bytes)
        started = self._running or self._waiting
        if memory.over_limit:
            if not started:
                self._recycle(f"{show_size(memory.latest)} while idle, over the limit", out)
                return
            reached = f"its processor (with the processes it started) reached {show_size(memory.peak)} and was stopped"
            names = self._function_names
            for sent in self._running:
                memory.killed(sent.task_id, names.get(sent.function_id) or "")
            self._stop(
                owner,
                f"its processor was stopped: it went over the worker's memory limit of {show_size(memory.limit)}",
                out,
                memory_failure=lambda sent: over_limit(
                    names.get(sent.function_id) or "(function not loaded)", memory.limit, reached
                ),
            )
            return
        if memory.checking and not started and not self._inbox:
            memory.checking = False
            if memory.latest > memory.recycle_above:
                self._recycle(f"{show_size(memory.latest)} between tasks, above {show_size(memory.recycle_above)}", out)

    def _recycle(self, why: str, out: List[Any]) -> None:
        """Replace the processor, which runs, waits for and was sent no task."""
        logger.info(f"Worker: replaced processor {self._processor_id}: {why}")
        self._new_processor(out)

    def _on_task_output(self, owner: RunnerOwner, output: TaskOutputText, out: List[Any]) -> None:
        owner.printed(output.task_id, output.stream, output.text)

    def _on_waiting(self, owner: RunnerOwner, notice: TaskWaiting, out: List[Any]) -> None:
        sent = self._tasks.get(notice.task_id)
        if notice.waiting:
            if sent is None or sent not in self._running or not self._step(sent, SentEvent.WAIT, owner, out):
                logger.warning(f"Worker: dropped wait notice of task {notice.task_id.hex()}: not running")
                return
            self._waiting += 1
            self._leave(sent, owner, out)
            if sent.state is _WAITING:  # (not a task whose cancel was confirmed)
                owner.waiting(sent.task_id)
            return
        if sent is None or not self._step(sent, SentEvent.RESUME, owner, out):
            logger.warning(f"Worker: dropped resume notice of task {notice.task_id.hex()}: not waiting")
            return
        self._waiting -= 1
        self._running.append(sent)
        owner.resumed(sent.task_id)

    def _on_dropped(self, owner: RunnerOwner, notice: Dropped, out: List[Any]) -> None:
        """A task sent ahead was taken out of the processor's FIFO unstarted: it goes back to the core, unless its
        cancel was confirmed."""
        sent = self._tasks.get(notice.task_id)
        if sent is None:
            logger.warning(f"Worker: dropped Dropped notice of task {notice.task_id.hex()}: not known here")
            return
        self._step(sent, SentEvent.DROPPED, owner, out)

    # ------------------------------------------------------------------------- transitions and actions

    def _step(self, sent: _Sent, event: SentEvent, owner: RunnerOwner, out: List[Any]) -> bool:
        """Move ``sent`` on ``event`` and carry out the transition's actions; False (logged) if the table has
        no transition: a message from the processor that does not fit what it was told."""
        transition = _TABLE.get((sent.state, event))
        history = sent.history
        if transition is None:
            logger.warning(
                f"Worker: dropped {event.value} of task {sent.task_id.hex()} in the processor: no transition "
                f"from {sent.state.value}; recent events: {' -> '.join(e.value for e in history) or '(none)'}"
            )
            return False
        history.append(event)
        if len(history) > _HISTORY_LENGTH:
            del history[0]
        if sent.state is _DROPPING:
            self._dropping -= 1
        sent.state = transition.next_state
        if sent.state is _DROPPING:  # (only a task in the inbox is)
            self._dropping += 1
        for action in transition.actions:
            self._actions[action](sent, owner, out)
        if sent.state in _TERMINAL:
            del self._tasks[sent.task_id]
        return True

    def _send_drop(self, sent: _Sent, owner: RunnerOwner, out: List[Any]) -> None:
        self._drops.append(Drop(sent.task_id))

    def _report_returned(self, sent: _Sent, owner: RunnerOwner, out: List[Any]) -> None:
        self._returning.append(sent.task_id)

    def _leave_inbox(self, sent: _Sent, owner: RunnerOwner, out: List[Any]) -> None:
        self._inbox.remove(sent)

    def _collect_to_stop(self, sent: _Sent, owner: RunnerOwner, out: List[Any]) -> None:
        self._to_stop.append(sent)

    def _end_returning(self, owner: RunnerOwner) -> None:
        """Report the tasks the event returned, together and in their order."""
        if self._returning:
            returning, self._returning = self._returning, []
            owner.returned(returning)

    def _stop_for_cancels(self, owner: RunnerOwner, out: List[Any]) -> None:
        """Stop the processor if a task it is to be stopped for is still there (cancelled, and started)."""
        to_stop, self._to_stop = self._to_stop, []
        named = ", ".join(sorted({sent.task_id.hex() for sent in to_stop if sent.state not in _TERMINAL}))
        if named:
            self._stop(owner, f"its processor was stopped to cancel task {named}", out)

    def _leave(self, sent: _Sent, owner: RunnerOwner, out: List[Any]) -> None:
        """``sent`` no longer runs (ended, waits, or never started): when none runs, the processor starts the
        head of its FIFO."""
        self._running.remove(sent)
        if not self._running and self._inbox:
            self._start_next(owner, out)

    def _recall(self, sent_ahead: List[_Sent], owner: RunnerOwner, out: List[Any]) -> None:
        """Ask the processor to give back these tasks sent ahead (they return to the queue on `Dropped`)."""
        for sent in list(sent_ahead):
            self._step(sent, SentEvent.RECALL, owner, out)
        drops, self._drops = self._drops, []
        if drops:
            out.append(SendToProcessor(self._processor_id, drops))

    def _run(self, owner: RunnerOwner, ready: ReadyTask) -> None:
        """``ready`` starts now: nothing runs on the processor and its FIFO is empty."""
        task = ready.task
        sent = _Sent(task.task_id, task.priority, task.function_id, SentState.RUNNING)
        self._tasks[task.task_id] = sent
        self._running.append(sent)
        owner.started(task.task_id)

    def _start_next(self, owner: RunnerOwner, out: List[Any]) -> None:
        sent = self._inbox.pop(0)
        self._step(sent, SentEvent.START, owner, out)
        self._running.append(sent)
        if sent.state is not _STOPPING:  # (a task whose cancel was confirmed is the core's no more)
            owner.started(sent.task_id)

    def _stop(
        self,
        owner: RunnerOwner,
        reason: str,
        out: List[Any],
        running_reason: str = "",
        memory_failure: Optional[Callable[[_Sent], BaseException]] = None,
    ) -> None:
        """Replace the processor: every task started there died (the running ones of ``running_reason`` if
        given, the others of ``reason``), but that the running ones fail with ``memory_failure``'s error if
        given; the tasks sent ahead had not started: they are returned. Nothing is reported of those whose
        cancel was confirmed."""
        inbox, self._inbox = self._inbox, []
        running, self._running = self._running, []
        started = [sent for sent in self._tasks.values() if sent.state in _STARTED]
        self._waiting = 0
        self._drops = []
        self._to_stop = []
        for sent in inbox:
            self._step(sent, SentEvent.STOP, owner, out)
        for sent in started:
            self._step(sent, SentEvent.STOP, owner, out)
        self._new_processor(out)
        self._end_returning(owner)
        for sent in started:
            if sent.state is not _DIED:
                continue
            if memory_failure is not None and sent in running:
                error = memory_failure(sent)
                payload, text = failure_payload(error)
                name = self._function_names.get(sent.function_id) or ""
                owner.finished(sent.task_id, TaskStatus.FAILED, payload, text, None, name, 0.0, error_line(error))
            else:
                owner.died(sent.task_id, running_reason if running_reason and sent in running else reason)

    def _new_processor(self, out: List[Any]) -> None:
        self._processor_id = next(self._processor_ids)
        self._stale = False
        self._memory.new_processor()
        self._caches.clear()
        out.append(StartProcessor(self._processor_id))
