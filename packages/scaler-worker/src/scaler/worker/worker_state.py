"""The worker agent's decisions, without I/O.

`WorkerState` owns the task queue, the stack of tasks on the processor, the
function and serializer caches and the storage requests in flight. Its
``on_*`` methods take what happened (a message from the scheduler or the
storage server, a processor's message or death, a timer) and return effects
(`StartProcessor`, `SendToProcessor`, `StartTaskTimer`); what goes to the
scheduler and the storage server is collected and handed out by `flush` once
per event-loop turn (`SendToScheduler`, `SendToStorage`), so that many results
travel in one `TaskResultBatch` and many fetches in one `ObjectRequest`. The
asyncio shell in `worker_agent.py` only carries the effects out; this module is
tested without sockets or processes.

A task goes QUEUED -> STAGED (what it needs is being fetched) -> (SENT: sent
ahead to the processor, not started) -> RUNNING -> (STORING, while a large
result is put in storage) -> done. A few tasks ahead are staged so that their
data is fetched while the processor is busy.

Pipeline: while one task runs at the top level, and the last one there took
less than `PIPELINE_TASK_SECONDS`, up to ``pipeline_depth`` more are sent
ahead (several in one Pipe message) into the processor's FIFO, so that it
starts the next one without waiting for the agent. The agent's model of the
processor is the stack (started tasks) plus the inbox (sent, not started, in
FIFO order). The processor runs the inbox strictly in order at the top level,
so when the result of the only task on the stack arrives, the head of the
inbox has started (its timeout timer starts then). Nothing is sent ahead while
the top of the stack waits or the stack is deeper than one; when a task starts
to wait, the inbox is taken back (``Drop``; the processor answers ``Dropped``)
so that the waiting task's children, maybe among them, can run nested. A
cancelled inbox task is dropped the same way: its `TaskCancelConfirm` waits
for the processor's answer (``Dropped``: cancelled; its result: not). When the
processor is stopped or dies, the inbox tasks were not started: they go back
to the queue and run on the next processor.

The worker has one slot and one processor. A task that waits inside the Scaler
client (on tasks it submitted: a nested task) gives the slot up without leaving
the processor: the processor runs the next task on top of it, on the same stack
(see `processor_protocol`), and the waiting task goes on once that task is done
and what it waits for has arrived. The processor thus holds a stack of tasks:
the top one running (or waiting), the ones beneath waiting. Since a waiting
task never holds the slot its children need, nested tasks cannot deadlock the
cluster, whatever their depth, and cost no process or thread each.

Queue order: the highest priority first; within a priority, first come first
served, except on top of a waiting task, where the newest task runs first (most
likely a child of the waiting task: depth first, so the stack stays shallow and
the waiting task resumes soon). A balance request gives back the tasks that
would run last. Stopping the processor (cancel, timeout, crash) ends every task
on its stack: the others fail with WORKER_DIED, naming what happened, and the
scheduler runs them again; the tasks sent ahead go back to the queue.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pickle import PickleBuffer
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
    TaskTimeoutError,
)
from scaler.protocol.ids import IDGenerator
from scaler.protocol.payload import OUT_OF_BAND_BYTES, writable_buffers
from scaler.worker.function_stats import FunctionStatsTable
from scaler.worker.lru_cache import LRUCache, SizedLRUCache
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    OBJECT_CACHE_BYTES,
    PIPELINE_TASK_SECONDS,
    PROCESSOR_PIPELINE_DEPTH,
    SERIALIZER_CACHE_CAPACITY,
    Drop,
    Dropped,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
    WaitEnded,
)
from scaler.worker.task_failure import failure_payload

DEFAULT_QUEUE_CAPACITY = 1000
DEFAULT_INLINE_THRESHOLD_BYTES = 64 * 1024
DEFAULT_STORAGE_TIMEOUT_SECONDS = 60.0
DEFAULT_PREFETCH_TASKS = 4
# the agent keeps more functions than a processor, so a restarted processor rarely costs a storage round trip
AGENT_FUNCTION_CACHE_CAPACITY = 4 * FUNCTION_CACHE_CAPACITY

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- effects


@dataclass(slots=True)
class SendToScheduler:
    message: Any


@dataclass(slots=True)
class SendToStorage:
    message: Any
    blobs: List[bytes] = field(default_factory=list)


@dataclass(slots=True)
class StartProcessor:
    """Start a processor under this ID in place of the current one, which is killed if it still runs."""

    processor_id: int


@dataclass(slots=True)
class SendToProcessor:
    """A list of `ProcessorTask`s for the processor's FIFO, a single one to run nested on a waiting task, a
    `WaitEnded` answer, or a list of `Drop`s."""

    processor_id: int
    message: Any


@dataclass(slots=True)
class StartTaskTimer:
    """Call `WorkerState.on_task_timer(task_id, run)` after ``seconds``."""

    task_id: bytes
    run: int
    seconds: float


Effect = Any  # one of the classes above


# ----------------------------------------------------------------------------- state


class _Phase(enum.Enum):
    QUEUED = "queued"
    STAGED = "staged"
    SENT = "sent"
    RUNNING = "running"
    STORING = "storing"


_FUNCTION = 1
_SERIALIZER = 2
_OBJECT = 4


class _PendingConfirm:
    """A `TaskCancelConfirm` that waits for the processor's answer to some `Drop`s."""

    __slots__ = ("task_ids", "cancelled", "unresolved")

    def __init__(self, task_ids: List[bytes], cancelled: List[bool], unresolved: int) -> None:
        self.task_ids = task_ids
        self.cancelled = cancelled
        self.unresolved = unresolved


class _Entry:
    __slots__ = ("task", "phase", "waiting", "run", "dropping", "confirms")

    def __init__(self, task: m.Task) -> None:
        self.task = task
        self.phase = _Phase.QUEUED
        self.waiting = False  # RUNNING: it waits inside the Scaler client, the processor may run another task
        self.run = 0  # which dispatch this is, so that a stale timer is recognised
        self.dropping = False  # SENT: a Drop is on its way to the processor
        # cancels waiting for the processor's answer to the Drop: (confirm, position of this task in it)
        self.confirms: Optional[List[Tuple[_PendingConfirm, int]]] = None

    def object_ids(self) -> Iterator[bytes]:
        for argument in self.task.arguments:
            if argument.kind == m.ArgumentKind.OBJECT:
                yield argument.data


class WorkerState:
    def __init__(
        self,
        *,
        inline_threshold_bytes: int = DEFAULT_INLINE_THRESHOLD_BYTES,
        storage_timeout_seconds: float = DEFAULT_STORAGE_TIMEOUT_SECONDS,
        prefetch_tasks: int = DEFAULT_PREFETCH_TASKS,
        pipeline_depth: int = PROCESSOR_PIPELINE_DEPTH,
        object_cache_bytes: int = OBJECT_CACHE_BYTES,
    ) -> None:
        self._inline_threshold = inline_threshold_bytes
        self._storage_timeout = storage_timeout_seconds
        self._prefetch = max(1, prefetch_tasks)
        self._pipeline_depth = max(0, pipeline_depth)
        self._quick = False  # the last task that ended at the top of the stack was quick: send ahead
        self.function_stats = FunctionStatsTable()  # what ran, per function, for the heartbeat

        self._processor_ids = itertools.count()
        self._processor_id = -1
        self._stack: List[_Entry] = []  # the tasks started on the processor, the top one last
        self._inbox: List[_Entry] = []  # the tasks sent ahead to the processor, not started, in its FIFO order
        self._recalled: List[_Entry] = []  # taken back from the processor by the message being handled
        # mirrors of the processor's caches (same capacity, same get/put sequence)
        self._processor_functions: LRUCache[bytes, bool] = LRUCache(FUNCTION_CACHE_CAPACITY)
        self._processor_serializers: LRUCache[bytes, bool] = LRUCache(SERIALIZER_CACHE_CAPACITY)
        self._processor_objects: SizedLRUCache[bytes, bool] = SizedLRUCache(object_cache_bytes)
        self._runs = itertools.count(1)

        self._tasks: Dict[bytes, _Entry] = {}
        self._queue: Dict[int, Dict[bytes, _Entry]] = {}  # priority -> QUEUED and STAGED tasks, oldest first
        self._queued_count = 0
        self._staged: Dict[bytes, _Entry] = {}

        self._functions: LRUCache[bytes, bytes] = LRUCache(AGENT_FUNCTION_CACHE_CAPACITY)
        self._serializers: LRUCache[bytes, bytes] = LRUCache(SERIALIZER_CACHE_CAPACITY)
        self._objects: Dict[bytes, bytes] = {}  # object arguments of staged tasks
        self._object_references: Dict[bytes, int] = defaultdict(int)

        self._request_ids = itertools.count(1)
        self._pending: Dict[bytes, int] = {}  # object ID being fetched -> _FUNCTION | _SERIALIZER | _OBJECT
        self._to_fetch: List[bytes] = []
        self._gets: Dict[int, Tuple[List[bytes], float]] = {}
        self._to_put: List[Tuple[_Entry, bytes, Any, m.Profiling]] = []
        self._puts: Dict[int, Tuple[List[Tuple[_Entry, bytes, int, m.Profiling]], float]] = {}
        self._object_ids = IDGenerator()

        self._results: List[m.TaskResult] = []
        self._to_scheduler: List[Any] = []

        self._scheduler_handlers: Dict[type, Callable[[Any], List[Effect]]] = {
            m.TaskBatch: self.on_task_batch,
            m.TaskCancel: self.on_task_cancel,
            m.BalanceRequest: self.on_balance_request,
        }
        self._processor_handlers: Dict[type, Callable[[Any, List[Effect]], None]] = {
            ProcessorResult: self._on_result,
            TaskWaiting: self._on_waiting,
            Dropped: self._on_dropped,
        }

    # ------------------------------------------------------------------------- entry points

    def start(self) -> List[Effect]:
        out: List[Effect] = []
        self._new_processor(out)
        return out

    def handles(self, message_type: type) -> bool:
        return message_type in self._scheduler_handlers

    def on_scheduler_message(self, message: Any) -> List[Effect]:
        """A TaskBatch, TaskCancel or BalanceRequest from the scheduler."""
        return self._scheduler_handlers[type(message)](message)

    def on_task_batch(self, batch: m.TaskBatch) -> List[Effect]:
        for task in batch.tasks:
            known = self._tasks.get(task.task_id)
            if known is not None:
                logger.warning(
                    f"Worker: task {task.task_id.hex()} assigned again (attempt {known.task.attempt} -> "
                    f"{task.attempt}) while {known.phase.value} here; its result will answer the new attempt"
                )
                known.task.attempt = task.attempt
                continue
            entry = _Entry(task)
            self._tasks[task.task_id] = entry
            self._queue.setdefault(task.priority, {})[task.task_id] = entry
            self._queued_count += 1
        out: List[Effect] = []
        if self._inbox and self._queue:
            # tasks sent ahead must not run before a higher priority one that came later: take them back
            best = max(self._queue)
            self._recall([sent for sent in self._inbox if sent.task.priority < best], out)
        self._fill(out)
        return out

    def on_task_cancel(self, cancel: m.TaskCancel) -> List[Effect]:
        """Cancel queued tasks at once; a running one (anywhere on the processor's stack) by stopping the
        processor; one sent ahead by a `Drop`, confirmed once the processor answers. Every ID is confirmed,
        cancelled or not (unknown, or finished: its result is on the way), in one confirm per cancel."""
        out: List[Effect] = []
        task_ids = list(cancel.task_ids)
        cancelled: List[bool] = []
        on_stack: Set[bytes] = set()
        sent: List[Tuple[_Entry, int]] = []
        for position, task_id in enumerate(task_ids):
            entry = self._tasks.get(task_id)
            if entry is None or entry.phase is _Phase.STORING:
                cancelled.append(False)
            elif entry.phase is _Phase.RUNNING:
                on_stack.add(task_id)
                cancelled.append(not entry.confirms)  # an earlier cancel waiting for a Drop gets the True
            elif entry.phase is _Phase.SENT:
                sent.append((entry, position))
                cancelled.append(False)  # until the processor answers
            else:
                self._remove(entry)
                cancelled.append(True)
        if sent:
            confirm = _PendingConfirm(task_ids, cancelled, len(sent))
            drops = []
            for entry, position in sent:
                if entry.confirms is None:
                    entry.confirms = []
                entry.confirms.append((confirm, position))
                if not entry.dropping:
                    entry.dropping = True
                    drops.append(Drop(entry.task.task_id))
            if drops and not on_stack:
                out.append(SendToProcessor(self._processor_id, drops))
        else:
            self._to_scheduler.append(m.TaskCancelConfirm(task_ids, cancelled))
        if on_stack:
            named = ", ".join(sorted(task_id.hex() for task_id in on_stack))
            self._stop_processor(out, on_stack, None, f"its processor was stopped to cancel task {named}")
        self._fill(out)
        return out

    def on_balance_request(self, request: m.BalanceRequest) -> List[Effect]:
        """Give back up to ``count`` queued tasks (never one on the processor): those that would run last."""
        given: List[_Entry] = []
        if request.count > 0:
            order = list(self._in_run_order(self._nesting()))
            given = order[len(order) - min(request.count, len(order)) :][::-1]
        for entry in given:
            self._remove(entry)
        self._to_scheduler.append(m.BalanceResponse([entry.task.task_id for entry in given]))
        out: List[Effect] = []
        self._fill(out)
        return out

    def on_object_response(self, response: m.ObjectResponse, blobs: List[bytes]) -> List[Effect]:
        out: List[Effect] = []
        if response.kind == m.ObjectRequestKind.GET:
            request = self._gets.pop(response.request_id, None)
            if request is None:
                logger.warning(f"Worker: dropped storage response to unknown get request {response.request_id}")
                return out
            self._on_get_response(request[0], response, blobs)
        elif response.kind == m.ObjectRequestKind.PUT:
            put = self._puts.pop(response.request_id, None)
            if put is None:
                logger.warning(f"Worker: dropped storage response to unknown put request {response.request_id}")
                return out
            self._on_put_response(put[0], response)
        else:
            logger.warning(f"Worker: dropped storage response of unexpected kind {response.kind.name}")
            return out
        self._fill(out)
        return out

    def on_processor_message(self, processor_id: int, message: Any) -> List[Effect]:
        """A `ProcessorResult`, a `TaskWaiting` or `Dropped` notice, or a list of them, from the processor."""
        out: List[Effect] = []
        if processor_id != self._processor_id:
            logger.debug(f"Worker: dropped {type(message).__name__} from stopped processor {processor_id}")
            return out
        handlers = self._processor_handlers
        if type(message) is list:
            for each in message:
                handlers[type(each)](each, out)
        else:
            handlers[type(message)](message, out)
        if self._recalled:  # the tasks taken back together go back together, in their order
            self._requeue(self._recalled)
            self._recalled = []
        self._fill(out)
        return out

    def on_processor_died(self, processor_id: int, cause: str, last_messages: Iterable[Any] = ()) -> List[Effect]:
        """The processor ended on its own (crash, signal, exit) after writing ``last_messages``: the results
        among them count; every task still on its stack died with it."""
        out: List[Effect] = []
        if processor_id != self._processor_id:
            return out
        for message in last_messages:
            for each in message if type(message) is list else (message,):
                if type(each) is ProcessorResult:
                    self._on_result(each, out)
        top = self._stack[-1].task.task_id.hex() if self._stack else ""
        self._stop_processor(out, set(), None, f"{cause}, while task {top} ran above this one", top_reason=cause)
        self._fill(out)
        return out

    def on_task_timer(self, task_id: bytes, run: int) -> List[Effect]:
        out: List[Effect] = []
        entry = self._tasks.get(task_id)
        if entry is None or entry.run != run or entry.phase is not _Phase.RUNNING:
            return out  # the task finished, or was cancelled, in time
        timeout = entry.task.timeout_seconds
        error = TaskTimeoutError(f"task {task_id.hex()} exceeded its timeout of {timeout:g} seconds")
        self._stop_processor(out, set(), (entry, error), f"its processor was stopped: {error}")
        self._fill(out)
        return out

    def on_tick(self, now: float) -> List[Effect]:
        """Fail the tasks whose storage requests went unanswered for too long."""
        out: List[Effect] = []
        limit = self._storage_timeout
        problem = DisconnectedError(f"object storage did not answer within {limit:g} seconds")
        expired = False
        for request_id, (object_ids, sent) in list(self._gets.items()):
            if now - sent >= limit:
                del self._gets[request_id]
                expired = True
                for object_id in object_ids:
                    self._pending.pop(object_id, None)
                self._fail_staged_needing({object_id: problem for object_id in object_ids})
        for request_id, (puts, sent) in list(self._puts.items()):
            if now - sent >= limit:
                del self._puts[request_id]
                expired = True
                for entry, _, _, profiling in puts:
                    self._fail(entry, problem, profiling)
        if expired:
            logger.error(f"Worker: {problem}")
            self._fill(out)
        return out

    def flush(self, now: float) -> List[Effect]:
        """What to send now: the fetches, puts, results and scheduler messages collected since the last flush."""
        out: List[Effect] = []
        if self._to_fetch:
            request_id = next(self._request_ids)
            self._gets[request_id] = (self._to_fetch, now)
            out.append(SendToStorage(m.ObjectRequest(request_id, m.ObjectRequestKind.GET, b"", self._to_fetch)))
            self._to_fetch = []
        if self._to_put:
            by_owner: Dict[bytes, List[Tuple[_Entry, bytes, Any, m.Profiling]]] = defaultdict(list)
            for put in self._to_put:
                by_owner[put[0].task.client_id].append(put)
            self._to_put = []
            for owner_id, puts in by_owner.items():
                request_id = next(self._request_ids)
                self._puts[request_id] = (
                    [(e, oid, object_frames.size(payload), p) for e, oid, payload, p in puts],
                    now,
                )
                frames, counts = object_frames.pack([put[2] for put in puts])
                request = m.ObjectRequest(
                    request_id, m.ObjectRequestKind.PUT, owner_id, [put[1] for put in puts], counts
                )
                out.append(SendToStorage(request, frames))
        if self._results:
            out.append(SendToScheduler(m.TaskResultBatch(self._results)))
            self._results = []
        if self._to_scheduler:
            out.extend(SendToScheduler(message) for message in self._to_scheduler)
            self._to_scheduler = []
        return out

    # ------------------------------------------------------------------------- observation

    @property
    def queued_count(self) -> int:
        """Tasks held here that have not started: queued, and sent ahead to the processor."""
        return self._queued_count + len(self._inbox)

    @property
    def has_output(self) -> bool:
        """Whether `flush` has something to send."""
        return bool(self._results or self._to_scheduler or self._to_fetch or self._to_put)

    @property
    def has_only_results(self) -> bool:
        return not (self._to_scheduler or self._to_fetch or self._to_put)

    @property
    def pending_result_count(self) -> int:
        return len(self._results)

    @property
    def running_count(self) -> int:
        """1 when the task on top of the processor's stack runs (does not wait), else 0."""
        return 1 if self._stack and not self._stack[-1].waiting else 0

    @property
    def suspended_count(self) -> int:
        """Tasks on the processor's stack that wait (for what they submitted, or for the tasks above them)."""
        return len(self._stack) - self.running_count

    @property
    def processor_id(self) -> int:
        return self._processor_id

    @property
    def stack(self) -> List[bytes]:
        """The IDs of the tasks started on the processor, the top one last."""
        return [entry.task.task_id for entry in self._stack]

    @property
    def inbox(self) -> List[bytes]:
        """The IDs of the tasks sent ahead to the processor, not started, in the order they will run."""
        return [entry.task.task_id for entry in self._inbox]

    def phase_of(self, task_id: bytes) -> Optional[str]:
        entry = self._tasks.get(task_id)
        return entry.phase.value if entry is not None else None

    @property
    def cached_object_count(self) -> int:
        return len(self._objects)

    @property
    def pending_fetch_count(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------------- the processor

    def _on_result(self, result: ProcessorResult, out: List[Effect]) -> None:
        stack = self._stack
        if not stack or stack[-1].task.task_id != result.task_id:
            logger.warning(f"Worker: dropped result of task {result.task_id.hex()}: not on top of the processor")
            return
        entry = stack.pop()  # the task beneath, if any, is back in its wait: the slot is free again
        if not stack:
            self._quick = result.seconds < PIPELINE_TASK_SECONDS
        self.function_stats.record(result.function, result.status == m.TaskStatus.SUCCESS, result.seconds)
        if entry.confirms:
            self._resolve_cancel(entry, False)  # a cancel crossed it: its result answers
        if not stack and self._inbox:
            self._start(self._inbox.pop(0), out)  # the processor starts the next one in its FIFO at once
        profiling = m.Profiling(*result.profiling) if result.profiling else m.Profiling()
        status = m.TaskStatus(result.status)
        # a result of several frames (large buffers kept out of its pickle) never goes inline
        stored = entry.task.store_result or type(result.payload) is list or len(result.payload) > self._inline_threshold
        if status == m.TaskStatus.SUCCESS and stored:
            entry.phase = _Phase.STORING
            self._to_put.append((entry, self._object_ids.next_id(), result.payload, profiling))
        else:
            kind = m.PayloadKind.INLINE if result.payload else m.PayloadKind.NONE
            self._finish(entry, status, kind, result.payload, result.error_text, profiling)

    def _on_waiting(self, notice: TaskWaiting, out: List[Effect]) -> None:
        entry = self._tasks.get(notice.task_id)
        on_stack = entry is not None and entry.phase is _Phase.RUNNING and entry in self._stack
        if notice.waiting:
            if on_stack and self._stack[-1] is entry:
                entry.waiting = True  # type: ignore[union-attr]
                # take back what was sent ahead: it would not run before this task ends, and may be its child
                self._recall(self._inbox, out)
            else:
                logger.warning(f"Worker: dropped wait notice of task {notice.task_id.hex()}: not on top of the stack")
            return
        # it wants to resume: a task already sent runs above it first; nothing more is sent until it waits again
        if on_stack:
            entry.waiting = False  # type: ignore[union-attr]
        out.append(SendToProcessor(self._processor_id, WaitEnded(notice.task_id)))

    def _recall(self, entries: List[_Entry], out: List[Effect]) -> None:
        """Ask the processor to give back these tasks sent ahead (they return to the queue on `Dropped`)."""
        drops = []
        for entry in entries:
            if not entry.dropping:
                entry.dropping = True
                drops.append(Drop(entry.task.task_id))
        if drops:
            out.append(SendToProcessor(self._processor_id, drops))

    def _on_dropped(self, notice: Dropped, out: List[Effect]) -> None:
        """A task sent ahead was taken out of the processor's FIFO unstarted: cancelled, or back to the queue."""
        entry = self._tasks.get(notice.task_id)
        if entry is None or not entry.dropping:
            logger.warning(f"Worker: dropped Dropped notice of task {notice.task_id.hex()}: no drop was asked")
            return
        stack = self._stack
        if entry.phase is _Phase.SENT:
            self._inbox.remove(entry)
        elif len(stack) == 1 and stack[0] is entry:  # taken for started when the task before it ended
            stack.pop()
            if self._inbox:
                self._start(self._inbox.pop(0), out)
        else:
            logger.warning(f"Worker: dropped Dropped notice of task {notice.task_id.hex()}: not sent ahead")
            return
        if entry.confirms:
            self._resolve_cancel(entry, True)
            self._remove(entry)
        else:
            self._recalled.append(entry)

    def _resolve_cancel(self, entry: _Entry, cancelled: bool) -> None:
        """The processor answered the Drop of a cancelled task: complete the confirms waiting for it (a task
        is cancelled once: a repeated cancel reads as one of a task already gone)."""
        for confirm, position in entry.confirms or ():
            confirm.cancelled[position] = cancelled
            cancelled = False
            confirm.unresolved -= 1
            if confirm.unresolved == 0:
                self._to_scheduler.append(m.TaskCancelConfirm(confirm.task_ids, confirm.cancelled))
        entry.confirms = None

    def _requeue(self, entries: List[_Entry]) -> None:
        """Put tasks taken back from the processor (not started) at the head of the queue, in their order."""
        by_priority: Dict[int, List[_Entry]] = defaultdict(list)
        for entry in entries:
            entry.phase = _Phase.QUEUED
            entry.dropping = False
            entry.waiting = False
            by_priority[entry.task.priority].append(entry)
        for priority, group in by_priority.items():
            queued = {entry.task.task_id: entry for entry in group}
            queued.update(self._queue.get(priority, {}))
            self._queue[priority] = queued
        self._queued_count += len(entries)

    def _new_processor(self, out: List[Effect]) -> None:
        self._processor_id = next(self._processor_ids)
        self._processor_functions.clear()
        self._processor_serializers.clear()
        self._processor_objects.clear()
        out.append(StartProcessor(self._processor_id))

    def _stop_processor(
        self,
        out: List[Effect],
        cancelled: Set[bytes],
        failed: Optional[Tuple[_Entry, BaseException]],
        reason: str,
        top_reason: str = "",
    ) -> None:
        """Replace the processor; every task on its stack ends: those in ``cancelled`` (or whose cancel waits
        for a Drop) without a result, the ``failed`` one with its error, the top one with WORKER_DIED
        ``top_reason`` if given, the others with WORKER_DIED ``reason``. The tasks sent ahead had not started:
        the cancelled ones end without a result, the others go back to the queue."""
        stack, self._stack = self._stack, []
        inbox, self._inbox = self._inbox, []
        back = []
        for entry in inbox:
            if entry.confirms:
                self._resolve_cancel(entry, True)
                self._remove(entry)
            else:
                back.append(entry)
        if back:
            self._requeue(back)
        for position, entry in enumerate(stack):
            if entry.confirms:
                self._resolve_cancel(entry, True)
                self._remove(entry)
            elif entry.task.task_id in cancelled:
                self._remove(entry)
            elif failed is not None and entry is failed[0]:
                self._fail(entry, failed[1])
            else:
                why = top_reason if top_reason and position == len(stack) - 1 else reason
                self._finish(entry, m.TaskStatus.WORKER_DIED, m.PayloadKind.NONE, b"", why, m.Profiling())
        self._new_processor(out)

    # ------------------------------------------------------------------------- scheduling

    def _nesting(self) -> bool:
        """Whether the next task will run on top of a waiting one."""
        stack = self._stack
        return bool(stack) and (stack[-1].waiting or len(stack) > 1)

    def _in_run_order(self, newest_first: bool) -> Iterator[_Entry]:
        for priority in sorted(self._queue, reverse=True):
            entries = self._queue[priority].values()
            yield from (reversed(entries) if newest_first else entries)

    def _fill(self, out: List[Effect]) -> None:
        """Run the next task if the slot is free (no task, or the top one waits); keep the processor's FIFO
        filled while one task runs at the top level; stage tasks ahead."""
        stack = self._stack
        batch: Optional[List[ProcessorTask]] = None
        if not stack:
            entry = self._next_ready(False)
            if entry is not None:
                batch = [self._dispatch(entry)]
                self._start(entry, out)
        elif stack[-1].waiting:
            entry = self._next_ready(True)
            if entry is not None:
                nested = self._dispatch(entry)  # a single task: it runs nested, on the waiting one
                self._start(entry, out)
                out.append(SendToProcessor(self._processor_id, nested))
        if len(stack) == 1 and not stack[0].waiting and self._quick:
            inbox = self._inbox
            depth = self._pipeline_depth
            if len(inbox) < depth and not any(entry.dropping and not entry.confirms for entry in inbox):
                while len(inbox) < depth:
                    entry = self._next_ready(False)
                    if entry is None:
                        break
                    if batch is None:
                        batch = []
                    batch.append(self._dispatch(entry))
                    entry.phase = _Phase.SENT
                    inbox.append(entry)
        if batch:
            out.append(SendToProcessor(self._processor_id, batch))
        missing = self._prefetch - len(self._staged)
        if missing > 0 and self._queued_count > len(self._staged):
            ahead = []
            for entry in self._in_run_order(self._nesting()):
                if entry.phase is _Phase.QUEUED:
                    ahead.append(entry)
                    if len(ahead) == missing:
                        break
            for entry in ahead:
                self._stage(entry)

    def _next_ready(self, newest_first: bool) -> Optional[_Entry]:
        """The first task in run order if it has all it needs (else fetch what it lacks: None)."""
        while True:
            entry = next(self._in_run_order(newest_first), None)
            if entry is None:
                return None
            if entry.phase is _Phase.QUEUED:
                self._stage(entry)
                if entry.phase is not _Phase.STAGED:  # failed while staging
                    continue
            if self._request_missing(entry):
                return None  # strict priority order: wait for what the best task needs
            return entry

    def _stage(self, entry: _Entry) -> None:
        for argument in entry.task.arguments:
            if argument.kind == m.ArgumentKind.TASK:
                self._fail(
                    entry,
                    ProtocolError(
                        f"argument {argument.name or '(positional)'} refers to task {argument.data.hex()}: "
                        "the scheduler must replace task references before assigning a task to a worker"
                    ),
                )
                return
        entry.phase = _Phase.STAGED
        self._staged[entry.task.task_id] = entry
        references = self._object_references
        for object_id in entry.object_ids():
            references[object_id] += 1
        self._request_missing(entry)

    def _missing(self, entry: _Entry) -> List[Tuple[bytes, int]]:
        """What ``entry`` lacks to run on the processor."""
        missing: List[Tuple[bytes, int]] = []
        task = entry.task
        function_id = task.function_id
        if function_id not in self._functions and function_id not in self._processor_functions:
            missing.append((function_id, _FUNCTION))
        serializer_id = task.serializer_id
        if serializer_id and serializer_id not in self._serializers:
            if serializer_id not in self._processor_serializers:
                missing.append((serializer_id, _SERIALIZER))
        objects = self._objects
        in_processor = self._processor_objects
        # the IDs alone may go only if the processor holds every object (a put could evict another one)
        sent_as_ids = all(object_id in in_processor for object_id in entry.object_ids())
        if not sent_as_ids:
            for object_id in entry.object_ids():
                if object_id not in objects:
                    missing.append((object_id, _OBJECT))
        return missing

    def _request_missing(self, entry: _Entry) -> bool:
        missing = self._missing(entry)
        pending = self._pending
        for object_id, kind in missing:
            kinds = pending.get(object_id)
            if kinds is None:
                pending[object_id] = kind
                self._to_fetch.append(object_id)
            else:
                pending[object_id] = kinds | kind
        return bool(missing)

    def _dispatch(self, entry: _Entry) -> ProcessorTask:
        """Take ``entry`` out of the queue and build what the processor gets for it."""
        task = entry.task
        # the same get/put sequence as the processor applies to its own caches when it reads the task
        function: Optional[bytes] = None
        if not self._processor_functions.get(task.function_id):
            function = self._functions.get(task.function_id)
            self._processor_functions.put(task.function_id, True)
        serializer: Optional[bytes] = None
        if task.serializer_id and not self._processor_serializers.get(task.serializer_id):
            serializer = self._serializers.get(task.serializer_id)
            self._processor_serializers.put(task.serializer_id, True)
        arguments: List[Tuple[str, Any, bytes]] = []
        for argument in task.arguments:
            if argument.kind == m.ArgumentKind.INLINE:
                arguments.append((argument.name, argument.data, b""))
                continue
            object_id = argument.data
            if self._processor_objects.get(object_id) is None:
                data = self._objects[object_id]
                self._processor_objects.put(object_id, True, object_frames.size(data))
                arguments.append((argument.name, _out_of_band(data), object_id))
            else:
                arguments.append((argument.name, None, object_id))
        self._dequeue(entry)
        return ProcessorTask(
            task.task_id, task.function_id, function, task.serializer_id, serializer, arguments, task.profiling
        )

    def _start(self, entry: _Entry, out: List[Effect]) -> None:
        """``entry`` starts on the processor, on top of its stack: its timeout counts from now."""
        entry.phase = _Phase.RUNNING
        entry.waiting = False
        entry.run = next(self._runs)
        self._stack.append(entry)
        timeout = entry.task.timeout_seconds
        if timeout > 0:
            out.append(StartTaskTimer(entry.task.task_id, entry.run, timeout))

    # ------------------------------------------------------------------------- storage answers

    def _on_get_response(self, asked: List[bytes], response: m.ObjectResponse, blobs: List[Any]) -> None:
        payloads = object_frames.found(response, blobs)
        found = {
            object_id: payload
            for object_id, payload in zip(response.object_ids, payloads, strict=False)
            if payload is not None
        }
        failed: Dict[bytes, Exception] = {}
        for object_id in asked:
            kinds = self._pending.pop(object_id, 0)
            data = found.get(object_id)
            if data is None:
                failed[object_id] = ObjectNotFoundError(f"object {object_id.hex()} not found in object storage")
                continue
            if kinds & (_FUNCTION | _SERIALIZER) and type(data) is not bytes:
                if type(data) is list:
                    failed[object_id] = ProtocolError(f"object {object_id.hex()} has several frames: not a function")
                    continue
                data = bytes(data)  # they cross the Pipe inside a pickle
            if kinds & _FUNCTION:
                self._functions.put(object_id, data)
            if kinds & _SERIALIZER:
                self._serializers.put(object_id, data)
            if kinds & _OBJECT and object_id in self._object_references:
                self._objects[object_id] = data
        if failed:
            self._fail_staged_needing(failed)

    def _on_put_response(self, puts: List[Tuple[_Entry, bytes, int, m.Profiling]], response: m.ObjectResponse):
        statuses = dict(zip(response.object_ids, response.statuses, strict=False))
        for entry, object_id, size, profiling in puts:
            status = statuses.get(object_id)
            if status == m.ObjectStatus.OK:
                self._finish(entry, m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT, object_id, "", profiling)
                continue
            why = status.name.lower() if status is not None else "no status for it in the answer"
            if response.reason:
                why = f"{why}: {response.reason}"
            error = ObjectStorageRefusedError(
                f"object storage refused the result of task {entry.task.task_id.hex()} ({size} bytes): {why}"
            )
            self._fail(entry, error, profiling)

    def _fail_staged_needing(self, failed: Dict[bytes, Exception]) -> None:
        for entry in list(self._staged.values()):
            for object_id, _ in self._missing(entry):
                error = failed.get(object_id)
                if error is not None:
                    self._fail(entry, error)
                    break

    # ------------------------------------------------------------------------- endings

    def _dequeue(self, entry: _Entry) -> None:
        """Take a QUEUED or STAGED task out of the queue."""
        task = entry.task
        if entry.phase is _Phase.STAGED:
            del self._staged[task.task_id]
            references = self._object_references
            for object_id in entry.object_ids():
                count = references[object_id] - 1
                if count > 0:
                    references[object_id] = count
                else:
                    del references[object_id]
                    self._objects.pop(object_id, None)
        same_priority = self._queue[task.priority]
        del same_priority[task.task_id]
        if not same_priority:
            del self._queue[task.priority]
        self._queued_count -= 1

    def _remove(self, entry: _Entry) -> None:
        """Forget ``entry``, wherever it is (a task on the stack is the caller's business)."""
        del self._tasks[entry.task.task_id]
        if entry.phase is _Phase.QUEUED or entry.phase is _Phase.STAGED:
            self._dequeue(entry)

    def _finish(
        self,
        entry: _Entry,
        status: m.TaskStatus,
        payload_kind: m.PayloadKind,
        payload: bytes,
        error_text: str,
        profiling: m.Profiling,
    ) -> None:
        self._remove(entry)
        task = entry.task
        self._results.append(
            m.TaskResult(task.task_id, task.attempt, status, payload_kind, payload, error_text, profiling)
        )

    def _fail(self, entry: _Entry, error: BaseException, profiling: Optional[m.Profiling] = None) -> None:
        payload, error_text = failure_payload(error)
        kind = m.PayloadKind.INLINE if payload else m.PayloadKind.NONE
        self._finish(entry, m.TaskStatus.FAILED, kind, payload, error_text, profiling or m.Profiling())


def _out_of_band(payload: Any) -> Any:
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
