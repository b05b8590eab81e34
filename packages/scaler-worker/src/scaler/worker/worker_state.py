"""The worker agent's decisions, without I/O.

`WorkerState` owns the task queue, the task running on each processor, the
function and serializer caches and the storage requests in flight. Its
``on_*`` methods take what happened (a message from the scheduler or the
storage server, a processor's result or death, a timer) and return effects
(`StartProcessor`, `RunTask`, `StartTaskTimer`); what goes to the scheduler and
the storage server is collected and handed out by `flush` once per event-loop
turn (`SendToScheduler`, `SendToStorage`), so that many results travel in one
`TaskResultBatch` and many fetches in one `ObjectRequest`. The asyncio shell in
`worker_agent.py` only carries the effects out; this module is tested without
sockets or processes.

A task goes QUEUED -> STAGED (what it needs is being fetched) -> RUNNING ->
(STORING, while a large result is put in storage) -> done. The queue runs the
highest priority first, then first come first served. A few tasks ahead are
staged so that their data is fetched while the processor is busy.

The worker has one slot: one task runs at a time. A task that waits inside the
Scaler client (on tasks it submitted: a nested task) is "blocked" and does not
hold the slot: another processor is started for the next queued task, up to
`MAX_PROCESSORS`. Since a waiting parent never holds the slot its children
need, nested tasks cannot deadlock the cluster, whatever their depth. Idle
processors beyond the one kept warm are stopped.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError, ObjectNotFoundError, ObjectStorageRefusedError, ProtocolError
from scaler.protocol.ids import IDGenerator
from scaler.worker.lru_cache import LRUCache
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    SERIALIZER_CACHE_CAPACITY,
    ProcessorBlocked,
    ProcessorResult,
    ProcessorTask,
)
from scaler.worker.task_failure import failure_payload

DEFAULT_QUEUE_CAPACITY = 1000
DEFAULT_INLINE_THRESHOLD_BYTES = 64 * 1024
DEFAULT_STORAGE_TIMEOUT_SECONDS = 60.0
DEFAULT_PREFETCH_TASKS = 4
# the agent keeps more functions than a processor, so a restarted processor rarely costs a storage round trip
AGENT_FUNCTION_CACHE_CAPACITY = 4 * FUNCTION_CACHE_CAPACITY
# processors of one worker at most: 1 running + blocked ones (nested tasks waiting for their children)
MAX_PROCESSORS = 64

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
    """Start a processor under this ID, killing the one that is there, if any."""

    processor_id: int


@dataclass(slots=True)
class StopProcessor:
    """End the processor with this ID and forget it: SIGKILL when ``kill`` (it runs a task), else a polite stop."""

    processor_id: int
    kill: bool


@dataclass(slots=True)
class RunTask:
    processor_id: int
    task: ProcessorTask


@dataclass(slots=True)
class StartTaskTimer:
    """Call `WorkerState.on_task_timer(processor_id, run)` after ``seconds``."""

    processor_id: int
    run: int
    seconds: float


Effect = Any  # one of the classes above
ProcessorMessage = Union[ProcessorResult, ProcessorBlocked]


# ----------------------------------------------------------------------------- state


class _Phase(enum.Enum):
    QUEUED = "queued"
    STAGED = "staged"
    RUNNING = "running"
    STORING = "storing"


_FUNCTION = 1
_SERIALIZER = 2
_OBJECT = 4


class _Entry:
    __slots__ = ("task", "order", "phase", "processor_id")

    def __init__(self, task: m.Task, order: int) -> None:
        self.task = task
        self.order = order
        self.phase = _Phase.QUEUED
        self.processor_id = -1

    @property
    def run_order(self) -> Tuple[int, int]:
        return -self.task.priority, self.order

    def object_ids(self) -> Iterator[bytes]:
        for argument in self.task.arguments:
            if argument.kind == m.ArgumentKind.OBJECT:
                yield argument.data


class _Slot:
    """A processor as the agent sees it: what runs there, and a mirror of its caches."""

    __slots__ = ("processor_id", "task_id", "blocked", "run", "functions", "serializers")

    def __init__(self, processor_id: int) -> None:
        self.processor_id = processor_id
        self.task_id: Optional[bytes] = None
        self.blocked = False  # its task waits inside the Scaler client
        self.run = 0  # counts dispatches and restarts, so a stale timer is recognised
        self.functions: LRUCache[bytes, bool] = LRUCache(FUNCTION_CACHE_CAPACITY)
        self.serializers: LRUCache[bytes, bool] = LRUCache(SERIALIZER_CACHE_CAPACITY)


class WorkerState:
    def __init__(
        self,
        *,
        inline_threshold_bytes: int = DEFAULT_INLINE_THRESHOLD_BYTES,
        storage_timeout_seconds: float = DEFAULT_STORAGE_TIMEOUT_SECONDS,
        prefetch_tasks: int = DEFAULT_PREFETCH_TASKS,
        max_processors: int = MAX_PROCESSORS,
    ) -> None:
        self._inline_threshold = inline_threshold_bytes
        self._storage_timeout = storage_timeout_seconds
        self._prefetch = max(1, prefetch_tasks)
        self._max_processors = max(1, max_processors)
        self._processor_ids = itertools.count()
        self._slots: Dict[int, _Slot] = {}

        self._tasks: Dict[bytes, _Entry] = {}
        self._queue: List[Tuple[int, int, bytes]] = []  # (-priority, order, task_id), lazily pruned
        self._order = itertools.count()
        self._staged: Dict[bytes, _Entry] = {}
        self._waiting_count = 0  # QUEUED + STAGED

        self._functions: LRUCache[bytes, bytes] = LRUCache(AGENT_FUNCTION_CACHE_CAPACITY)
        self._serializers: LRUCache[bytes, bytes] = LRUCache(SERIALIZER_CACHE_CAPACITY)
        self._objects: Dict[bytes, bytes] = {}  # object arguments of staged tasks
        self._object_references: Dict[bytes, int] = defaultdict(int)

        self._request_ids = itertools.count(1)
        self._pending: Dict[bytes, int] = {}  # object ID being fetched -> _FUNCTION | _SERIALIZER | _OBJECT
        self._to_fetch: List[bytes] = []
        self._gets: Dict[int, Tuple[List[bytes], float]] = {}
        self._to_put: List[Tuple[_Entry, bytes, bytes, m.Profiling]] = []
        self._puts: Dict[int, Tuple[List[Tuple[_Entry, bytes, int, m.Profiling]], float]] = {}
        self._object_ids = IDGenerator()

        self._results: List[m.TaskResult] = []
        self._to_scheduler: List[Any] = []

        self._scheduler_handlers: Dict[type, Callable[[Any], List[Effect]]] = {
            m.TaskBatch: self.on_task_batch,
            m.TaskCancel: self.on_task_cancel,
            m.BalanceRequest: self.on_balance_request,
        }

    # ------------------------------------------------------------------------- entry points

    def start(self) -> List[Effect]:
        out: List[Effect] = []
        self._new_slot(out)
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
            entry = _Entry(task, next(self._order))
            self._tasks[task.task_id] = entry
            heapq.heappush(self._queue, (-task.priority, entry.order, task.task_id))
            self._waiting_count += 1
        out: List[Effect] = []
        self._fill(out)
        return out

    def on_task_cancel(self, cancel: m.TaskCancel) -> List[Effect]:
        out: List[Effect] = []
        cancelled: List[bool] = []
        for task_id in cancel.task_ids:
            entry = self._tasks.get(task_id)
            if entry is None or entry.phase is _Phase.STORING:  # unknown, or finished: its result is on the way
                cancelled.append(False)
                continue
            if entry.phase is _Phase.RUNNING:
                self._end_processor(self._slots[entry.processor_id], out)
            self._remove(entry)
            cancelled.append(True)
        self._to_scheduler.append(m.TaskCancelConfirm(list(cancel.task_ids), cancelled))
        self._fill(out)
        return out

    def on_balance_request(self, request: m.BalanceRequest) -> List[Effect]:
        """Give back up to ``count`` waiting tasks: the lowest priority, then the newest, first."""
        waiting = [entry for entry in self._tasks.values() if entry.phase in (_Phase.QUEUED, _Phase.STAGED)]
        waiting.sort(key=lambda entry: (entry.task.priority, -entry.order))
        given = waiting[: request.count]
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

    def on_processor_message(self, processor_id: int, message: ProcessorMessage) -> List[Effect]:
        """A `ProcessorResult` or a `ProcessorBlocked` notice from a processor."""
        if isinstance(message, ProcessorBlocked):
            return self.on_processor_blocked(processor_id, message.task_id, message.blocked)
        return self.on_processor_result(processor_id, message)

    def on_processor_result(self, processor_id: int, result: ProcessorResult) -> List[Effect]:
        out: List[Effect] = []
        self._take_result(processor_id, result)
        self._fill(out)
        return out

    def on_processor_died(
        self, processor_id: int, cause: str, last_results: Iterable[ProcessorMessage] = ()
    ) -> List[Effect]:
        """The processor ended on its own (crash, signal, exit) after writing ``last_results``: the task it was
        running, if any, died with it."""
        out: List[Effect] = []
        for result in last_results:
            if type(result) is ProcessorResult:
                self._take_result(processor_id, result)
        slot = self._slots.get(processor_id)
        if slot is None:
            return out
        task_id = slot.task_id
        self._end_processor(slot, out)
        if task_id is not None:
            entry = self._tasks[task_id]
            self._finish(entry, m.TaskStatus.WORKER_DIED, m.PayloadKind.NONE, b"", cause, m.Profiling())
        self._fill(out)
        return out

    def on_processor_blocked(self, processor_id: int, task_id: bytes, blocked: bool) -> List[Effect]:
        """The task on this processor waits inside the Scaler client (``blocked``), or runs again."""
        out: List[Effect] = []
        slot = self._slots.get(processor_id)
        if slot is None or slot.task_id != task_id:
            return out  # it finished meanwhile
        slot.blocked = blocked
        self._fill(out)
        return out

    def on_task_timer(self, processor_id: int, run: int) -> List[Effect]:
        out: List[Effect] = []
        slot = self._slots.get(processor_id)
        if slot is None or slot.run != run or slot.task_id is None:
            return out  # the task finished, or was cancelled, in time
        entry = self._tasks[slot.task_id]
        self._end_processor(slot, out)
        timeout = entry.task.timeout_seconds
        self._fail(entry, TimeoutError(f"task {entry.task.task_id.hex()} exceeded its timeout of {timeout:g} seconds"))
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
            by_owner: Dict[bytes, List[Tuple[_Entry, bytes, bytes, m.Profiling]]] = defaultdict(list)
            for put in self._to_put:
                by_owner[put[0].task.client_id].append(put)
            self._to_put = []
            for owner_id, puts in by_owner.items():
                request_id = next(self._request_ids)
                self._puts[request_id] = ([(e, oid, len(payload), p) for e, oid, payload, p in puts], now)
                request = m.ObjectRequest(request_id, m.ObjectRequestKind.PUT, owner_id, [put[1] for put in puts])
                out.append(SendToStorage(request, [put[2] for put in puts]))
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
        return self._waiting_count

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
        return sum(1 for slot in self._slots.values() if slot.task_id is not None)

    @property
    def blocked_count(self) -> int:
        return sum(1 for slot in self._slots.values() if slot.blocked)

    @property
    def processor_ids(self) -> List[int]:
        return list(self._slots)

    def running_task(self, processor_id: int) -> Optional[bytes]:
        slot = self._slots.get(processor_id)
        return slot.task_id if slot is not None else None

    def phase_of(self, task_id: bytes) -> Optional[str]:
        entry = self._tasks.get(task_id)
        return entry.phase.value if entry is not None else None

    @property
    def cached_object_count(self) -> int:
        return len(self._objects)

    @property
    def pending_fetch_count(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------------- scheduling

    def _fill(self, out: List[Effect]) -> None:
        """Run the next task if no task holds the slot; stop surplus idle processors; stage tasks ahead."""
        slots = self._slots
        idle: Optional[_Slot] = None
        for slot in slots.values():
            if slot.task_id is None:
                idle = idle or slot
            elif not slot.blocked:
                break  # a running task holds the slot
        else:
            if idle is None and len(slots) < self._max_processors and (self._staged or self._peek_queue()):
                idle = self._new_slot(out)
            if idle is not None:
                self._run_next(idle, out)
        if len(slots) > 1:
            surplus = [slot for slot in slots.values() if slot.task_id is None][1:]  # one idle one is kept warm
            for slot in surplus:
                del slots[slot.processor_id]
                out.append(StopProcessor(slot.processor_id, kill=False))
        while len(self._staged) < self._prefetch:
            entry = self._peek_queue()
            if entry is None:
                break
            heapq.heappop(self._queue)
            self._stage(entry)

    def _run_next(self, slot: _Slot, out: List[Effect]) -> bool:
        """Dispatch the best waiting task to ``slot`` if it has all it needs; whether it did."""
        while True:
            entry = self._best_candidate()
            if entry is None:
                return False
            if entry.phase is not _Phase.STAGED:  # failed while staging
                continue
            if self._request_missing(entry, slot):
                return False  # strict priority order: wait for what the best task needs
            self._dispatch(entry, slot, out)
            return True

    def _new_slot(self, out: List[Effect]) -> _Slot:
        slot = _Slot(next(self._processor_ids))
        self._slots[slot.processor_id] = slot
        out.append(StartProcessor(slot.processor_id))
        return slot

    def _best_candidate(self) -> Optional[_Entry]:
        best = min(self._staged.values(), key=_run_order, default=None)
        top = self._peek_queue()
        if top is not None and (best is None or top.run_order < best.run_order):
            heapq.heappop(self._queue)
            self._stage(top)
            return top
        return best

    def _peek_queue(self) -> Optional[_Entry]:
        queue = self._queue
        tasks = self._tasks
        while queue:
            _, order, task_id = queue[0]
            entry = tasks.get(task_id)
            if entry is not None and entry.order == order and entry.phase is _Phase.QUEUED:
                return entry
            heapq.heappop(queue)
        return None

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
        self._request_missing(entry, None)

    def _missing(self, entry: _Entry, slot: Optional[_Slot]) -> List[Tuple[bytes, int]]:
        """What ``entry`` lacks to run on ``slot`` (on any processor when None)."""
        missing: List[Tuple[bytes, int]] = []
        task = entry.task
        slots = (slot,) if slot is not None else tuple(self._slots.values())
        function_id = task.function_id
        if function_id not in self._functions and not any(function_id in s.functions for s in slots):
            missing.append((function_id, _FUNCTION))
        serializer_id = task.serializer_id
        if serializer_id and serializer_id not in self._serializers:
            if not any(serializer_id in s.serializers for s in slots):
                missing.append((serializer_id, _SERIALIZER))
        objects = self._objects
        for object_id in entry.object_ids():
            if object_id not in objects:
                missing.append((object_id, _OBJECT))
        return missing

    def _request_missing(self, entry: _Entry, slot: Optional[_Slot]) -> bool:
        missing = self._missing(entry, slot)
        pending = self._pending
        for object_id, kind in missing:
            kinds = pending.get(object_id)
            if kinds is None:
                pending[object_id] = kind
                self._to_fetch.append(object_id)
            else:
                pending[object_id] = kinds | kind
        return bool(missing)

    def _dispatch(self, entry: _Entry, slot: _Slot, out: List[Effect]) -> None:
        task = entry.task
        # the same get/put sequence as the processor applies to its own caches (processor.py)
        function: Optional[bytes] = None
        if not slot.functions.get(task.function_id):
            function = self._functions.get(task.function_id)
            slot.functions.put(task.function_id, True)
        serializer: Optional[bytes] = None
        if task.serializer_id and not slot.serializers.get(task.serializer_id):
            serializer = self._serializers.get(task.serializer_id)
            slot.serializers.put(task.serializer_id, True)
        objects = self._objects
        arguments = [
            (argument.name, argument.data if argument.kind == m.ArgumentKind.INLINE else objects[argument.data])
            for argument in task.arguments
        ]
        self._unstage(entry)
        self._waiting_count -= 1
        entry.phase = _Phase.RUNNING
        entry.processor_id = slot.processor_id
        slot.task_id = task.task_id
        slot.blocked = False
        slot.run += 1
        out.append(
            RunTask(
                slot.processor_id,
                ProcessorTask(
                    task.task_id, task.function_id, function, task.serializer_id, serializer, arguments, task.profiling
                ),
            )
        )
        if task.timeout_seconds > 0:
            out.append(StartTaskTimer(slot.processor_id, slot.run, task.timeout_seconds))

    def _end_processor(self, slot: _Slot, out: List[Effect]) -> None:
        """The processor in ``slot`` is killed (or already dead): replace it if it was the last one."""
        slot.task_id = None
        slot.blocked = False
        slot.run += 1
        if len(self._slots) > 1:
            del self._slots[slot.processor_id]
            out.append(StopProcessor(slot.processor_id, kill=True))
            return
        slot.functions.clear()
        slot.serializers.clear()
        out.append(StartProcessor(slot.processor_id))

    def _take_result(self, processor_id: int, result: ProcessorResult) -> None:
        slot = self._slots.get(processor_id)
        if slot is None or slot.task_id != result.task_id:
            logger.warning(f"Worker: dropped result of task {result.task_id.hex()}: not running on that processor")
            return
        entry = self._tasks[result.task_id]
        slot.task_id = None
        slot.blocked = False
        profiling = m.Profiling(*result.profiling) if result.profiling else m.Profiling()
        status = m.TaskStatus(result.status)
        stored = entry.task.store_result or len(result.payload) > self._inline_threshold
        if status == m.TaskStatus.SUCCESS and stored:
            entry.phase = _Phase.STORING
            self._to_put.append((entry, self._object_ids.next_id(), result.payload, profiling))
        else:
            kind = m.PayloadKind.INLINE if result.payload else m.PayloadKind.NONE
            self._finish(entry, status, kind, result.payload, result.error_text, profiling)

    # ------------------------------------------------------------------------- storage answers

    def _on_get_response(self, asked: List[bytes], response: m.ObjectResponse, blobs: List[bytes]) -> None:
        found: Dict[bytes, bytes] = {}
        blob_index = 0
        for object_id, status in zip(response.object_ids, response.statuses, strict=False):
            if status == m.ObjectStatus.OK and blob_index < len(blobs):
                found[object_id] = blobs[blob_index]
                blob_index += 1
        failed: Dict[bytes, Exception] = {}
        for object_id in asked:
            kinds = self._pending.pop(object_id, 0)
            data = found.get(object_id)
            if data is None:
                failed[object_id] = ObjectNotFoundError(f"object {object_id.hex()} not found in object storage")
                continue
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
            for object_id, _ in self._missing(entry, None):
                error = failed.get(object_id)
                if error is not None:
                    self._fail(entry, error)
                    break

    # ------------------------------------------------------------------------- endings

    def _unstage(self, entry: _Entry) -> None:
        del self._staged[entry.task.task_id]
        references = self._object_references
        for object_id in entry.object_ids():
            count = references[object_id] - 1
            if count > 0:
                references[object_id] = count
            else:
                del references[object_id]
                self._objects.pop(object_id, None)

    def _remove(self, entry: _Entry) -> None:
        """Forget ``entry``, wherever it is (its processor, if any, is the caller's business)."""
        del self._tasks[entry.task.task_id]
        phase = entry.phase
        if phase is _Phase.STAGED:
            self._unstage(entry)
        if phase is _Phase.QUEUED or phase is _Phase.STAGED:
            self._waiting_count -= 1
        elif phase is _Phase.RUNNING:
            slot = self._slots.get(entry.processor_id)
            if slot is not None and slot.task_id == entry.task.task_id:
                slot.task_id = None
                slot.blocked = False

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


def _run_order(entry: _Entry) -> Tuple[int, int]:
    return entry.run_order
