"""What the worker core asks of the object storage server, and what it keeps of the answers.

A task needs its function, its serializer (if its client chose one) and its object-storage arguments, read
for the task's scope (`read_scope`: the client whose objects it may read). The storage server decides what a
scope reaches (a worker of protocol 1.8 names it in its get); what it let this worker read, and for which
scopes, is kept (`_Grants`): what the runner or this agent already holds (`TaskRunner.holds_function`, ...)
is not fetched again for a scope granted it, and is fetched again, for its scope, by any other task (so one
client's task never runs with another client's function or objects, cached or not). The rest is asked for,
many IDs per `ObjectRequest` (one per scope per flush). Functions and serializers stay in LRU caches; an
object argument is kept while a staged task needs it, then released. Large results are put in storage,
owned by the task's client, one request per client per flush (a result with a frame larger than the server
takes fails its task unsent). A request unanswered for the storage timeout fails its tasks.

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
from typing import Any, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.errors import ObjectNotFoundError, ObjectStorageRefusedError, ProtocolError
from scaler.protocol.ids import IDGenerator, show
from scaler.protocol.message_limits import STORAGE_OPTION, too_large_for
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
GRANTS_CAPACITY = 8192  # objects whose readers this worker remembers (the agent's and a processor's caches hold fewer)

# a put in flight: the task, the object ID of its result, the result's size, its profiling
_Put = Tuple[TaskEntry, bytes, int, m.Profiling]
# what a failed fetch concerns: the scope it was for, the object ID
Fetch = Tuple[bytes, bytes]


def read_scope(task: m.Task) -> bytes:
    """The client whose objects a task reads: its scope, set by the scheduler for a Client made in a task (1.8),
    else its client."""
    return task.scope_id or task.client_id


class _Grants:
    """The scopes for which the storage server let this worker read each object, by object ID, for the latest
    `GRANTS_CAPACITY` objects (a forgotten one is fetched again, once, by the next task that needs it)."""

    __slots__ = ("_scopes",)

    def __init__(self) -> None:
        self._scopes: Dict[bytes, Any] = {}  # object ID -> a scope, or a set of them; oldest grant first

    def allows(self, object_id: bytes, scope: bytes) -> bool:
        held = self._scopes.get(object_id)
        return held == scope or (type(held) is set and scope in held)

    def grant(self, object_id: bytes, scope: bytes) -> None:
        scopes = self._scopes
        held = scopes.pop(object_id, None)  # again at the end: the latest
        if held is None or held == scope:
            scopes[object_id] = scope
        elif type(held) is set:
            held.add(scope)
            scopes[object_id] = held
        else:
            scopes[object_id] = {held, scope}
        if len(scopes) > GRANTS_CAPACITY:
            del scopes[next(iter(scopes))]

FULL_RETRY_SECONDS = 0.5  # how long a result refused by a full server waits before it is put again


class StorageRequests:
    def __init__(self, object_ids: IDGenerator) -> None:
        self._functions: LRUCache[bytes, bytes] = LRUCache(AGENT_FUNCTION_CACHE_CAPACITY)
        self._serializers: LRUCache[bytes, bytes] = LRUCache(SERIALIZER_CACHE_CAPACITY)
        self._objects: Dict[bytes, Any] = {}  # object arguments of staged tasks
        self._references: Dict[bytes, int] = defaultdict(int)
        self._request_ids = itertools.count(1)
        self._grants = _Grants()
        self._pending: Dict[Fetch, int] = {}  # (scope, object ID) being fetched -> _FUNCTION | _SERIALIZER | _OBJECT
        self._to_fetch: Dict[bytes, List[bytes]] = {}  # scope -> the object IDs to fetch for it
        self._gets: Dict[int, Tuple[List[bytes], float, bytes]] = {}  # request -> its object IDs, when sent, scope
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
        """What ``entry`` lacks to run: (object ID, kind) of each piece neither here nor held by the runner, or
        not granted to the task's scope."""
        missing: List[Tuple[bytes, int]] = []
        task = entry.task
        scope = read_scope(task)
        allows = self._grants.allows
        function_id = task.function_id
        if not allows(function_id, scope) or (
            function_id not in self._functions and not runner.holds_function(function_id)
        ):
            missing.append((function_id, _FUNCTION))
        serializer_id = task.serializer_id
        if serializer_id and (
            not allows(serializer_id, scope)
            or (serializer_id not in self._serializers and not runner.holds_serializer(serializer_id))
        ):
            missing.append((serializer_id, _SERIALIZER))
        object_ids = entry.object_ids
        # the IDs alone may go only if the runner holds every object (taking one could evict another)
        if object_ids and not (runner.holds_objects(object_ids) and all(allows(each, scope) for each in object_ids)):
            objects = self._objects
            missing.extend(
                (object_id, _OBJECT)
                for object_id in object_ids
                if object_id not in objects or not allows(object_id, scope)
            )
        return missing

    def request_missing(self, entry: TaskEntry, runner: TaskRunner) -> bool:
        """Ask storage for what ``entry`` lacks (once per scope and ID); whether it lacks anything."""
        task = entry.task
        scope = read_scope(task)
        function_id = task.function_id
        if (
            function_id in self._functions
            and not task.serializer_id
            and not entry.object_ids
            and self._grants.allows(function_id, scope)
        ):
            return False  # the usual case, told without building a list
        missing = self.missing(entry, runner)
        pending = self._pending
        for object_id, kind in missing:
            fetch = (scope, object_id)
            kinds = pending.get(fetch)
            if kinds is None:
                pending[fetch] = kind
                self._to_fetch.setdefault(scope, []).append(object_id)
            else:
                pending[fetch] = kinds | kind
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

    def on_get_response(self, response: m.ObjectResponse, blobs: Sequence[Any]) -> Dict[Fetch, Exception]:
        """Keep what arrived, granted to the scope it was read for; what could not be had, by (scope, object
        ID)."""
        request = self._gets.pop(response.request_id, None)
        if request is None:
            logger.warning(f"Worker: dropped storage response to unknown get request {response.request_id}")
            return {}
        asked, _, scope = request
        payloads = object_frames.found(response, blobs)
        found = {
            object_id: payload
            for object_id, payload in zip(response.object_ids, payloads, strict=False)
            if payload is not None
        }
        failed: Dict[Fetch, Exception] = {}
        for object_id in asked:
            fetch = (scope, object_id)
            kinds = self._pending.pop(fetch, 0)
            data = found.get(object_id)
            if data is None:
                failed[fetch] = ObjectNotFoundError(
                    f"object {object_id.hex()} is not in object storage, or not one the tasks of client "
                    f"{show(scope)} may read"
                )
                continue
            if kinds & (_FUNCTION | _SERIALIZER) and type(data) is not bytes:
                if type(data) is list:
                    failed[fetch] = ProtocolError(f"object {object_id.hex()} has several frames: not a function")
                    continue
                data = bytes(data)  # they cross the Pipe inside a pickle
            self._grants.grant(object_id, scope)
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
        gets, puts = self._gets, self._puts  # each kept in the order sent: its first is its oldest
        oldest_get = next(iter(gets.values()))[1] if gets else math.inf
        oldest_put = next(iter(puts.values()))[1] if puts else math.inf
        return min(oldest_get, oldest_put)

    def expire(self, now: float, limit: float) -> Tuple[List[Fetch], List[_Put]]:
        """Forget the requests unanswered for ``limit`` seconds: the fetches and the puts they asked for."""
        fetches: List[Fetch] = []
        puts: List[_Put] = []
        for request_id, (asked, sent, scope) in list(self._gets.items()):
            if now - sent >= limit:
                del self._gets[request_id]
                for object_id in asked:
                    self._pending.pop((scope, object_id), None)
                    fetches.append((scope, object_id))
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
        return fetches, puts

    # ------------------------------------------------------------------------- sending

    @property
    def has_requests(self) -> bool:
        return bool(self._to_fetch or self._to_put)

    def requests(self, now: float, out: List[Any], max_frame: int = 0) -> List[Tuple[_Put, Exception]]:
        """The fetches and puts collected since the last call, as messages to storage; the puts refused unsent, with
        why: a result with a frame larger than ``max_frame``, the most the server takes (0: it says not)."""
        refused: List[Tuple[_Put, Exception]] = []
        if self._to_fetch:
            for scope, object_ids in self._to_fetch.items():  # a get reads for one scope (its ownerId)
                request_id = next(self._request_ids)
                self._gets[request_id] = (object_ids, now, scope)
                out.append(SendToStorage(m.ObjectRequest(request_id, m.ObjectRequestKind.GET, scope, object_ids)))
            self._to_fetch = {}
        if self._to_put:
            by_owner: Dict[bytes, List[Tuple[TaskEntry, bytes, Any, m.Profiling]]] = defaultdict(list)
            for put in self._to_put:
                largest = object_frames.largest_frame(put[2])
                if max_frame and largest > max_frame:
                    what = f"the result of task {put[0].task.task_id.hex()}"
                    error = too_large_for(what, largest, max_frame, "object storage server", STORAGE_OPTION)
                    refused.append(((put[0], put[1], largest, put[3]), ObjectStorageRefusedError(error)))
                    continue
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
        return refused

    # ------------------------------------------------------------------------- observation

    @property
    def held_object_count(self) -> int:
        return len(self._objects)

    @property
    def pending_fetch_count(self) -> int:
        return len(self._pending)
