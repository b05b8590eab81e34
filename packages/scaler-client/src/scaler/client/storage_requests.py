"""The client core's conversation with the object storage server, without I/O.

It puts objects (functions, serializers, large arguments, sent objects) and keeps each until its
acknowledgement, reads the results whose payload the workers left in storage (then deletes them there),
deletes what tasks no longer need, and gives every request a deadline: a storage server that does not
answer within the client's timeout fails what waits on it. What a settled put or a read result means for
the tasks is `TasksInFlight`'s business: this module tells it (`object_stored`, `object_failed`,
`result_read`, `result_lost`).

The connection: when it closes (the socket monitor says so), what waits on the server fails at once and the
functions the client put are forgotten (a restarted server holds nothing). A request made while it is down
waits for it, at most `RECONNECT_SECONDS` (or the timeout, if shorter); when the connection is back, the
client says Hello again and sends what waited. A server that refuses us after accepting us restarted and
forgot us: what waited fails, and Hello again.

Requests leave in three kinds per turn of the agent's loop (`flush`): one put, one get, one delete. An object
with a frame larger than the server takes (its HelloAck's ``maxMessageSize``) is refused here, unsent: the
server would disconnect the client.

Back-pressure: a put the server refuses for want of room (``storageFull``: past its memory and disk budgets;
``overQuota``: past this client's share, docs/memory.md) is not a failure yet: the object is put again every
`FULL_RETRY_SECONDS`, as the server, or this client's own tasks as they end, free room, and fails only once it
was refused for the client's whole timeout. Meanwhile the tasks that name it wait.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from scaler.client import received_payloads
from scaler.client.client_events import Effect, HandshakeFailed, ObjectsFailed, Reply, ReplyError, ToStorage
from scaler.protocol import connection_events, object_frames
from scaler.protocol.connection_events import closed_in_handshake, role_name
from scaler.protocol.errors import DisconnectedError, ObjectNotFoundError, ObjectStorageRefusedError, ProtocolError
from scaler.protocol.ids import show
from scaler.protocol.message_limits import STORAGE_OPTION, too_large_for
from scaler.protocol.messages import (
    Hello,
    HelloAck,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PeerRole,
    Refusal,
)

if TYPE_CHECKING:
    from scaler.client.tasks_in_flight import TasksInFlight

logger = logging.getLogger(__name__)

RELEASE_GRACE_SECONDS = 10.0  # a released function may still be named by tasks built before its release
RECONNECT_SECONDS = 5.0  # how long a request made while the server's connection is down waits for it
_NO_ROOM = (ObjectStatus.STORAGE_FULL, ObjectStatus.OVER_QUOTA)  # refusals that end once room is made
FULL_RETRY_SECONDS = 0.5  # how long an object refused by a full server waits before it is put again

PUTTING = object()  # the state of an object whose put is not acknowledged yet


@dataclass(slots=True)
class _Request:
    kind: ObjectRequestKind
    object_ids: List[bytes]
    deadline: float
    waited: float  # how long it may wait for its answer (the time between its making and its deadline)
    payloads: Optional[Dict[bytes, Any]] = None  # a put's, kept to put again what a full server refused


class StorageRequests:
    def __init__(self, client_id: bytes, hello: Hello, timeout_seconds: float, out: List[Effect]) -> None:
        self.address: Optional[str] = None  # named by the scheduler's HelloAck
        self.error: Optional[Exception] = None  # the storage server refused this client
        self._hello = hello
        self._accepted = False  # its HelloAck came (since the last reconnect)
        self._down = False  # its connection is closed: requests wait (unsent) for it to come back
        self._unsent: List[Tuple[int, ToStorage]] = []  # (request ID, the request) made while it was down
        # object ID -> PUTTING, or the error of its failed put; acknowledged objects are not kept
        self.objects: Dict[bytes, Any] = {}
        self.tasks: TasksInFlight  # told what settled puts and reads mean (set by the core)
        self._client_id = client_id
        self._timeout = timeout_seconds
        self._out = out
        self._replies: Dict[bytes, int] = {}  # object ID -> command waiting for its put
        self._reads: Dict[bytes, bytes] = {}  # result object ID -> task ID
        self._requests: Dict[int, _Request] = {}  # awaiting an answer, in deadline order
        self._request_ids = itertools.count(1)
        self._released: Dict[bytes, float] = {}  # function object ID -> when it may be deleted, if unused
        self._puts: List[Tuple[bytes, Any]] = []  # (object ID, payload: a frame or a list of frames)
        # refused by a full server: (object ID, payload, the refusal), put again at _retry_at, failed at _give_up_at
        self._full: List[Tuple[bytes, Any, Exception]] = []
        self._retry_at = math.inf
        self._give_up_at: Dict[bytes, float] = {}  # object ID -> when its refusals fail it
        self._now = 0.0  # of the last flush: refusals are dated by it
        self._max_message_size = 0  # the largest frame the server takes (its HelloAck, 1.8); 0: not said
        self._gets: List[bytes] = []
        self._deletes: List[bytes] = []
        self._kept: Set[bytes] = set()  # results being read that stay in storage (tasks take them as arguments)

    @property
    def next_deadline(self) -> float:
        """The deadline of the oldest request awaiting an answer, or when objects refused by a full server are put
        again, whichever comes first."""
        oldest = next(iter(self._requests.values())).deadline if self._requests else math.inf
        return min(oldest, self._retry_at)

    @property
    def released(self) -> bool:
        """Released functions wait for their deletion (checked at each tick: there are few)."""
        return bool(self._released)

    # --- what the tasks and commands ask for ----------------------------------------------------------------

    def put(self, object_id: bytes, data: Any, command_id: int = 0) -> None:
        if command_id:
            self._replies[object_id] = command_id
        self.objects[object_id] = PUTTING
        self._puts.append((object_id, data))

    def put_for_command(self, object_id: bytes, data: Any, command_id: int) -> None:
        """A put the user asked for (`Client.send_object`, or a function): refused at once if storage refused us."""
        if self.error is None:
            self.put(object_id, data, command_id)
            return
        self.objects[object_id] = self.error  # tasks naming it fail with this error
        if command_id:
            self._out.append(ReplyError(command_id, self.error))

    def read(self, object_id: bytes, task_id: bytes, keep: bool = False) -> None:
        """Get a result's payload (then delete it there, unless ``keep``: tasks take it as an argument):
        `tasks.result_read` or `result_lost` follows."""
        self._reads[object_id] = task_id
        self._gets.append(object_id)
        if keep:
            self._kept.add(object_id)

    def delete(self, object_ids: Sequence[bytes]) -> None:
        self._deletes.extend(object_ids)

    def release(self, object_ids: Sequence[bytes], now: float) -> None:
        """The client forgot these function objects: delete each once no task names it (`delete_released`)."""
        for object_id in object_ids:
            self._released[object_id] = now + RELEASE_GRACE_SECONDS

    def hello(self, address: str) -> None:
        """Connect to the server the scheduler named and say Hello (the requests follow on the connection)."""
        self.address = address
        self._out.append(ToStorage(self._hello))

    # --- answers -----------------------------------------------------------------------------------------------

    def on_hello_ack(self, message: HelloAck, blobs: Sequence[Any]) -> None:
        if message.role in (PeerRole.OBJECT_STORAGE, PeerRole.CLIENT):  # CLIENT: an older server, which does not say
            self._accepted = True
            self._max_message_size = message.max_message_size
            return
        what = f"{self.address}, named by the scheduler, is {role_name(message.role)}, not an object storage server"
        self._refused(DisconnectedError(what))

    def on_refusal(self, message: Union[Refusal, HandshakeFailed], blobs: Sequence[Any]) -> None:
        if self._accepted:  # it accepted us before: it restarted, and knows us no more
            self._accepted = False
            why = f"the object storage server at {self.address} restarted and forgot this client: {message.reason}"
            self._lose_everything(DisconnectedError(why))
            self._out.append(ToStorage(self._hello))
            return
        self._refused(ProtocolError(f"object storage server at {self.address} refused the client: {message.reason}"))

    def on_connection(self, change: str) -> None:
        """What the socket monitor of the connection to the server saw (`connection_events`)."""
        if change == connection_events.UP:
            if self._down:
                self._down = False
                self._accepted = False
                logger.info(f"Client: connected to the object storage server at {self.address} again")
                self._out.append(ToStorage(self._hello))
                unsent, self._unsent = self._unsent, []
                self._out.extend(request for request_id, request in unsent if request_id in self._requests)
        elif change == connection_events.DOWN:
            lost = f"lost the connection to the object storage server at {self.address}"
            logger.warning(f"Client: {lost}")
            self._lose_everything(DisconnectedError(lost))
            self._down = True
        else:
            what = closed_in_handshake(f"{self.address}, named by the scheduler,", "an object storage server")
            self._refused(DisconnectedError(what))

    def _refused(self, error: Exception) -> None:
        """The server will not serve us: what waits fails, and so does every request from now on."""
        self.error = error
        self._requests.clear()
        self._fail_puts([object_id for object_id, state in self.objects.items() if state is PUTTING], error)
        reads, self._reads = self._reads, {}
        for task_id in reads.values():
            self.tasks.result_lost(task_id, error)

    def _lose_everything(self, error: Exception) -> None:
        """The server is gone, or restarted: what waits on it fails, and what it held is gone (the functions
        this client put are put again by the next tasks that need them)."""
        self._out.append(ObjectsFailed(None))
        requests, self._requests = self._requests, {}
        self._unsent = []
        for request in requests.values():
            self._fail(request, error)

    def on_response(self, message: ObjectResponse, blobs: Sequence[Any]) -> None:
        request = self._requests.pop(message.request_id, None)
        if request is None:  # a delete's answer, or one that came after its deadline
            return
        if request.kind == ObjectRequestKind.PUT:
            self._on_put_response(request, message)
        elif request.kind == ObjectRequestKind.GET:
            self._on_get_response(request, message, blobs)

    def _on_put_response(self, request: _Request, message: ObjectResponse) -> None:
        statuses = dict(zip(message.object_ids, message.statuses, strict=False))
        refused: List[Tuple[bytes, Exception]] = []
        for object_id in request.object_ids:
            status = statuses.get(object_id)
            if status in _NO_ROOM and request.payloads is not None and self.error is None:
                reason = f"object storage server at {self.address} had no room for it for {self._timeout:g}s: "
                reason += message.reason
                self._full.append((object_id, request.payloads[object_id], ObjectStorageRefusedError(reason)))
                asked = request.deadline - request.waited  # its refusals fail it a timeout after the first ask
                self._give_up_at.setdefault(object_id, asked + self._timeout)
                self._retry_at = min(self._retry_at, self._now + FULL_RETRY_SECONDS)
                continue
            if status != ObjectStatus.OK:
                what = "gave no status" if status is None else f"answered {status.name.lower()}"
                reason = f": {message.reason}" if message.reason else ""
                text = f"object storage server at {self.address} refused object {show(object_id)} ({what}){reason}"
                refused.append((object_id, ObjectStorageRefusedError(text)))
                continue
            self.objects.pop(object_id, None)
            self._give_up_at.pop(object_id, None)
            command_id = self._replies.pop(object_id, 0)
            if command_id:
                self._out.append(Reply(command_id, object_id))
            self.tasks.object_stored(object_id)
        for object_id, error in refused:
            self._fail_puts([object_id], error)

    def _on_get_response(self, request: _Request, message: ObjectResponse, blobs: Sequence[Any]) -> None:
        payloads = object_frames.found(message, blobs)
        for object_id, status, payload in zip(message.object_ids, message.statuses, payloads, strict=False):
            if payload is not None:
                if self._kept and object_id in self._kept:
                    self._kept.discard(object_id)
                else:
                    self._deletes.append(object_id)
            task_id = self._reads.pop(object_id, None)
            if task_id is None:
                continue
            if payload is None:
                self._lost(task_id, object_id, f"it answered {status.name.lower()}")
            else:  # a frame (or a list of frames), deserialized where it was received; what becomes bytes is copied
                self.tasks.result_read(task_id, received_payloads.own(payload))  # out of it first
        for object_id in request.object_ids:
            task_id = self._reads.pop(object_id, None)
            if task_id is not None:
                self._lost(task_id, object_id, "it gave no answer for it")

    def _lost(self, task_id: bytes, object_id: bytes, what: str) -> None:
        self.tasks.result_lost(
            task_id,
            ObjectNotFoundError(
                f"the result of task {show(task_id)} (object {show(object_id)}) could not be read from "
                f"object storage at {self.address}: {what}"
            ),
        )

    def _fail_puts(self, object_ids: List[bytes], error: Exception) -> None:
        if not object_ids:
            return
        self._out.append(ObjectsFailed(object_ids))
        for object_id in object_ids:
            self.objects[object_id] = error
            command_id = self._replies.pop(object_id, 0)
            if command_id:
                self._out.append(ReplyError(command_id, error))
            self.tasks.object_failed(object_id, error)

    # --- time ----------------------------------------------------------------------------------------------------

    def expire(self, now: float) -> None:
        """Fail what waits on requests storage did not answer in time (the first ones: in deadline order)."""
        requests = self._requests
        while requests:
            request_id, request = next(iter(requests.items()))
            if request.deadline > now:
                return
            del requests[request_id]
            if self._down:
                silent = f"the object storage server at {self.address} was unreachable for {request.waited:g}s"
            else:
                silent = f"object storage server at {self.address} did not answer within {self._timeout:g}s"
            self._fail(request, DisconnectedError(silent))

    def _fail(self, request: _Request, error: Exception) -> None:
        """What waits on ``request`` fails with ``error``."""
        if request.kind == ObjectRequestKind.PUT:
            self._fail_puts([oid for oid in request.object_ids if self.objects.get(oid) is PUTTING], error)
            return
        for object_id in request.object_ids:
            task_id = self._reads.pop(object_id, None)
            if task_id is not None:
                self.tasks.result_lost(task_id, error)

    def delete_released(self, now: float, in_use: Dict[bytes, int]) -> None:
        """Delete the released functions whose grace is over and that no task names any more."""
        for object_id, not_before in list(self._released.items()):
            if now < not_before or object_id in in_use:
                continue
            state = self.objects.get(object_id)
            if state is PUTTING:
                continue
            del self._released[object_id]
            if state is None:  # stored (a failed put left nothing to delete)
                self._deletes.append(object_id)

    def flush(self, now: float) -> None:
        """Send what the turn decided: one put, one get, one delete request at most (and the objects a full server
        refused, once they waited)."""
        self._now = now
        if self._full and now >= self._retry_at:
            self._put_refused_again(now)
        if self._puts:
            puts, self._puts = self._refuse_too_large(self._puts), []
            if puts:
                object_ids = [object_id for object_id, _ in puts]
                blobs, frame_counts = object_frames.pack([data for _, data in puts])
                self._request(ObjectRequestKind.PUT, object_ids, now, blobs, frame_counts, dict(puts))
        if self._gets:
            self._request(ObjectRequestKind.GET, self._gets, now)
            self._gets = []
        if self._deletes:
            if not self._down:  # else they went with the server
                request_id = next(self._request_ids)
                request = ObjectRequest(request_id, ObjectRequestKind.DELETE, self._client_id, self._deletes)
                self._out.append(ToStorage(request))  # its answer is not awaited
            self._deletes = []

    def _put_refused_again(self, now: float) -> None:
        """The objects a full server refused go again, but those refused for the whole timeout, which fail."""
        full, self._full = self._full, []
        self._retry_at = math.inf
        for object_id, data, refusal in full:
            if self.objects.get(object_id) is not PUTTING:  # cleared, or failed meanwhile
                self._give_up_at.pop(object_id, None)
            elif now >= self._give_up_at[object_id]:
                del self._give_up_at[object_id]
                self._fail_puts([object_id], refusal)
            else:
                self._puts.append((object_id, data))

    def _refuse_too_large(self, puts: List[Tuple[bytes, Any]]) -> List[Tuple[bytes, Any]]:
        """The puts the server takes; those with a frame larger than its limit fail here (it would disconnect us)."""
        limit = self._max_message_size
        if not limit:
            return puts
        taken = []
        for object_id, data in puts:
            largest = object_frames.largest_frame(data)
            if largest <= limit:
                taken.append((object_id, data))
                continue
            what = f"object {show(object_id)}"
            error = too_large_for(what, largest, limit, "object storage server", STORAGE_OPTION)
            self._fail_puts([object_id], ObjectStorageRefusedError(error))
        return taken

    def _request(
        self, kind: ObjectRequestKind, object_ids: List[bytes], now: float, blobs: Sequence[Any] = (),
        frame_counts: Sequence[int] = (), payloads: Optional[Dict[bytes, Any]] = None,
    ) -> None:  # fmt: skip
        request_id = next(self._request_ids)
        message = ToStorage(ObjectRequest(request_id, kind, self._client_id, object_ids, list(frame_counts)), blobs)
        if self._down:  # kept until the connection is back, for a while
            waited = min(self._timeout, RECONNECT_SECONDS)
            self._requests[request_id] = _Request(kind, object_ids, now + waited, waited, payloads)
            self._unsent.append((request_id, message))
            return
        self._requests[request_id] = _Request(kind, object_ids, now + self._timeout, self._timeout, payloads)
        self._out.append(message)

    # --- the end of everything ---------------------------------------------------------------------------------

    def clear(self) -> None:
        """Client.clear: storage deletes every object of this client; what waited for a put will not get it."""
        self._forget(ObjectNotFoundError("the object was deleted by Client.clear() before storage acknowledged it"))

    def stop(self, error: Exception) -> None:
        self._forget(error)
        self._requests.clear()
        self._unsent.clear()
        self._puts.clear()
        self._gets.clear()
        self._deletes.clear()

    def _forget(self, error: Exception) -> None:
        for command_id in self._replies.values():
            self._out.append(ReplyError(command_id, error))
        self._replies.clear()
        self.objects.clear()
        self._reads.clear()
        self._released.clear()
        self._full.clear()
        self._give_up_at.clear()
        self._retry_at = math.inf
