"""What the worker core asks of the object storage server, and what it keeps of the answers.

A task needs its function, its serializer (if its client chose one) and its object-storage arguments. What
the runner already holds (`TaskRunner.holds_function`, ...) is not fetched; the rest is asked for, many IDs
per `ObjectRequest` (one per flush). Functions and serializers stay in LRU caches; an object argument is
kept while a staged task needs it, then released. Large results are put in storage, owned by the task's
client, one request per client per flush. A request unanswered for the storage timeout fails its tasks.

Back-pressure: a result the server refuses because it is full (``storageFull``: past its memory and disk
budgets) is held and put again every `FULL_RETRY_SECONDS`; it fails only once refused for the storage timeout.
While results wait for room (`waiting_for_room`), the core starts no new task, so what the worker holds stays
bounded by the tasks it had started.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.errors import ObjectNotFoundError, ObjectStorageRefusedError, ProtocolError
from scaler.protocol.ids import IDGenerator
from scaler.worker.lru_cache import LRUCache
from scaler.worker.processor_protocol import FUNCTION_CACHE_CAPACITY, SERIALIZER_CACHE_CAPACITY
from scaler.worker.task_lifecycle import TaskEntry
from scaler.worker.task_runner import ReadyTask, TaskRunner
from scaler.worker.worker_events import SendToStorage

# the agent keeps more functions than a processor, so a restarted processor rarely costs a storage round trip
AGENT_FUNCTION_CACHE_CAPACITY = 4 * FUNCTION_CACHE_CAPACITY

_FUNCTION = 1
_SERIALIZER = 2
_OBJECT = 4

logger = logging.getLogger(__name__)

_INLINE_ARGUMENT = m.ArgumentKind.INLINE

# a put in flight: the task, the object ID of its result, the result's size, its profiling
_Put = Tuple[TaskEntry, bytes, int, m.Profiling]

FULL_RETRY_SECONDS = 0.5  # how long a result refused by a full server waits before it is put again


class StorageRequests:
    def __init__(self, object_ids: IDGenerator) -> None:
        self._functions: LRUCache[bytes, bytes] = LRUCache(AGENT_FUNCTION_CACHE_CAPACITY)
        self._serializers: LRUCache[bytes, bytes] = LRUCache(SERIALIZER_CACHE_CAPACITY)
        self._objects: Dict[bytes, Any] = {}  # object arguments of staged tasks
        self._references: Dict[bytes, int] = defaultdict(int)
        self._request_ids = itertools.count(1)
        self._pending: Dict[bytes, int] = {}  # object ID being fetched -> _FUNCTION | _SERIALIZER | _OBJECT
        self._to_fetch: List[bytes] = []
        self._gets: Dict[int, Tuple[List[bytes], float]] = {}
        self._to_put: List[Tuple[TaskEntry, bytes, Any, m.Profiling]] = []
        self._puts: Dict[int, Tuple[List[_Put], float]] = {}
        self._payloads: Dict[bytes, Any] = {}  # the payload of each put in flight, by object ID: kept to put again
        self._refused: List[Tuple[TaskEntry, bytes, Any, m.Profiling]] = []  # by a full server, to put again
        self._give_up_at: Dict[bytes, float] = {}  # object ID -> when its refusals fail its task
        self.retry_at = math.inf  # when the refused results are put again
        self._object_ids = object_ids

    # ------------------------------------------------------------------------- what tasks need

    def hold(self, entry: TaskEntry) -> None:
        """Keep the object arguments of ``entry`` (staged) once they arrive."""
        references = self._references
        for object_id in entry.object_ids:
            references[object_id] += 1

    def release(self, entry: TaskEntry) -> None:
        references = self._references
        for object_id in entry.object_ids:
            count = references[object_id] - 1
            if count > 0:
                references[object_id] = count
            else:
                del references[object_id]
                self._objects.pop(object_id, None)

    def missing(self, entry: TaskEntry, runner: TaskRunner) -> List[Tuple[bytes, int]]:
        """What ``entry`` lacks to run: (object ID, kind) of each piece neither here nor held by the runner."""
        missing: List[Tuple[bytes, int]] = []
        task = entry.task
        function_id = task.function_id
        if function_id not in self._functions and not runner.holds_function(function_id):
            missing.append((function_id, _FUNCTION))
        serializer_id = task.serializer_id
        if serializer_id and serializer_id not in self._serializers and not runner.holds_serializer(serializer_id):
            missing.append((serializer_id, _SERIALIZER))
        object_ids = entry.object_ids
        # the IDs alone may go only if the runner holds every object (taking one could evict another)
        if object_ids and not runner.holds_objects(object_ids):
            objects = self._objects
            missing.extend((object_id, _OBJECT) for object_id in object_ids if object_id not in objects)
        return missing

    def request_missing(self, entry: TaskEntry, runner: TaskRunner) -> bool:
        """Ask storage for what ``entry`` lacks (once per ID); whether it lacks anything."""
        task = entry.task
        if task.function_id in self._functions and not task.serializer_id and not entry.object_ids:
            return False  # the usual case, told without building a list
        missing = self.missing(entry, runner)
        pending = self._pending
        for object_id, kind in missing:
            kinds = pending.get(object_id)
            if kinds is None:
                pending[object_id] = kind
                self._to_fetch.append(object_id)
            else:
                pending[object_id] = kinds | kind
        return bool(missing)

    def ready_task(self, entry: TaskEntry) -> ReadyTask:
        """What the runner gets for ``entry`` (call when it lacks nothing): the data held here, None where the
        runner holds it."""
        task = entry.task
        function = self._functions.get(task.function_id)
        serializer = self._serializers.get(task.serializer_id) if task.serializer_id else None
        arguments: List[Tuple[str, Any, bytes]]
        if not entry.object_ids:
            arguments = [(argument.name, argument.data, b"") for argument in task.arguments]
            return ReadyTask(task, function, serializer, arguments, 0)
        objects = self._objects
        arguments = [
            (argument.name, argument.data, b"")
            if argument.kind == _INLINE_ARGUMENT
            else (argument.name, objects.get(argument.data), argument.data)
            for argument in task.arguments
        ]
        return ReadyTask(task, function, serializer, arguments, len(entry.object_ids))

    # ------------------------------------------------------------------------- results

    def put(self, entry: TaskEntry, payload: Any, profiling: m.Profiling) -> None:
        """Put ``payload``, the result of ``entry``, in storage, owned by the task's client (at the next flush)."""
        self._to_put.append((entry, self._object_ids.next_id(), payload, profiling))

    # ------------------------------------------------------------------------- answers

    def on_get_response(self, response: m.ObjectResponse, blobs: List[Any]) -> Dict[bytes, Exception]:
        """Keep what arrived; what could not be had, by object ID."""
        request = self._gets.pop(response.request_id, None)
        if request is None:
            logger.warning(f"Worker: dropped storage response to unknown get request {response.request_id}")
            return {}
        payloads = object_frames.found(response, blobs)
        found = {
            object_id: payload
            for object_id, payload in zip(response.object_ids, payloads, strict=False)
            if payload is not None
        }
        failed: Dict[bytes, Exception] = {}
        for object_id in request[0]:
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
            if kinds & _OBJECT and object_id in self._references:
                self._objects[object_id] = data
        return failed

    def on_put_response(
        self, response: m.ObjectResponse, now: float, limit: float
    ) -> List[Tuple[_Put, Optional[Exception]]]:
        """The puts answered: each with None if stored, else why not; but those a full server refused, kept to be
        put again (for ``limit`` seconds since their first refusal)."""
        request = self._puts.pop(response.request_id, None)
        if request is None:
            logger.warning(f"Worker: dropped storage response to unknown put request {response.request_id}")
            return []
        statuses = dict(zip(response.object_ids, response.statuses, strict=False))
        answered: List[Tuple[_Put, Optional[Exception]]] = []
        for put in request[0]:
            entry, object_id, size, profiling = put
            status = statuses.get(object_id)
            payload = self._payloads.pop(object_id, None)
            if status == m.ObjectStatus.STORAGE_FULL and now < self._give_up_at.setdefault(object_id, now + limit):
                self._refused.append((entry, object_id, payload, profiling))
                self.retry_at = min(self.retry_at, now + FULL_RETRY_SECONDS)
                continue
            self._give_up_at.pop(object_id, None)
            if status == m.ObjectStatus.OK:
                answered.append((put, None))
                continue
            why = status.name.lower() if status is not None else "no status for it in the answer"
            if response.reason:
                why = f"{why}: {response.reason}"
            error = ObjectStorageRefusedError(
                f"object storage refused the result of task {entry.task.task_id.hex()} ({size} bytes): {why}"
            )
            answered.append((put, error))
        return answered

    @property
    def waiting_for_room(self) -> bool:
        """Whether results refused by a full server wait to be put again."""
        return bool(self._refused) or bool(self._give_up_at)

    def put_refused_again(self) -> None:
        """The results a full server refused go again at the next flush."""
        self.retry_at = math.inf
        self._to_put.extend(self._refused)
        self._refused = []

    def waiting(self, request_id: int) -> bool:
        """Whether this request still waits for its answer (it did not time out)."""
        return request_id in self._gets or request_id in self._puts

    @property
    def oldest_request(self) -> float:
        """When the oldest request still unanswered was sent (inf: none is)."""
        gets, puts = self._gets, self._puts
        if not gets and not puts:
            return math.inf
        oldest = math.inf
        for requests in (gets, puts):
            if requests:
                oldest = min(oldest, next(iter(requests.values()))[1])  # they are kept in the order sent
        return oldest

    def expire(self, now: float, limit: float) -> Tuple[List[bytes], List[_Put]]:
        """Forget the requests unanswered for ``limit`` seconds: the object IDs and the puts they asked for."""
        object_ids: List[bytes] = []
        puts: List[_Put] = []
        for request_id, (asked, sent) in list(self._gets.items()):
            if now - sent >= limit:
                del self._gets[request_id]
                for object_id in asked:
                    self._pending.pop(object_id, None)
                object_ids.extend(asked)
        for request_id, (put, sent) in list(self._puts.items()):
            if now - sent >= limit:
                del self._puts[request_id]
                puts.extend(put)
        for _, object_id, _, _ in puts:
            self._payloads.pop(object_id, None)
            self._give_up_at.pop(object_id, None)
        if limit == 0.0:  # every request fails (the connection closed): so do the results waiting for room
            puts.extend((entry, object_id, object_frames.size(payload), profiling)
                        for entry, object_id, payload, profiling in self._refused)  # fmt: skip
            self._refused = []
            self._give_up_at.clear()
            self.retry_at = math.inf
        return object_ids, puts

    # ------------------------------------------------------------------------- sending

    @property
    def has_requests(self) -> bool:
        return bool(self._to_fetch or self._to_put)

    def requests(self, now: float, out: List[Any]) -> None:
        """The fetches and puts collected since the last call, as messages to storage."""
        if self._to_fetch:
            request_id = next(self._request_ids)
            self._gets[request_id] = (self._to_fetch, now)
            out.append(SendToStorage(m.ObjectRequest(request_id, m.ObjectRequestKind.GET, b"", self._to_fetch)))
            self._to_fetch = []
        if self._to_put:
            by_owner: Dict[bytes, List[Tuple[TaskEntry, bytes, Any, m.Profiling]]] = defaultdict(list)
            for put in self._to_put:
                by_owner[put[0].task.client_id].append(put)
            self._to_put = []
            for owner_id, puts in by_owner.items():
                request_id = next(self._request_ids)
                sizes = [(e, oid, object_frames.size(payload), p) for e, oid, payload, p in puts]
                self._puts[request_id] = (sizes, now)
                self._payloads.update((oid, payload) for _, oid, payload, _ in puts)
                frames, counts = object_frames.pack([put[2] for put in puts])
                object_ids = [put[1] for put in puts]
                request = m.ObjectRequest(request_id, m.ObjectRequestKind.PUT, owner_id, object_ids, counts)
                out.append(SendToStorage(request, frames))

    # ------------------------------------------------------------------------- observation

    @property
    def held_object_count(self) -> int:
        return len(self._objects)

    @property
    def pending_fetch_count(self) -> int:
        return len(self._pending)
