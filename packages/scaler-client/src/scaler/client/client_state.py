"""The client agent's decisions, without I/O.

`ClientState` knows the tasks in flight, the objects being put, the storage
requests awaiting an answer and the cancels awaiting a confirmation. The agent
thread (`agent.py`) feeds it commands from the user thread and messages from
the scheduler and the object storage server, then performs what
`take_effects` returns: messages to send and futures to resolve. Nothing here
touches a socket or a clock; every entry point takes ``now``.

Ordering rules it keeps:

- a task is sent only after every object it needs (function, serializer,
  large arguments) has been acknowledged by the object storage server;
- the large arguments of this client's tasks take at most
  ``argument_bytes_in_storage`` of the storage server's memory at a time (one
  task's, whatever their size, when no other task holds any): the tasks beyond
  wait here, in submission order, holding their arguments where the user's
  data lies, until tasks end and their argument objects are deleted. So a
  burst of large arguments does not make the storage server hold them all (the
  memory it reuses is far cheaper than fresh memory), and no put is ever
  refused for a burst alone;
- tasks that become ready together leave in one TaskBatch (split every
  ``batch_size`` tasks);
- a result whose payload is in object storage is fetched (then deleted there)
  before its future resolves; a task's temporary argument objects are deleted
  once the task ends.
"""

from __future__ import annotations

import collections
import enum
import itertools
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import object_frames
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.errors import (
    DisconnectedError,
    ObjectNotFoundError,
    ObjectStorageRefusedError,
    ProtocolError,
)
from scaler.protocol.ids import show
from scaler.protocol.messages import (
    ClientHeartbeat,
    ClientHeartbeatEcho,
    ClientShutdownRequest,
    ClientShutdownResponse,
    DisconnectRequest,
    DisconnectResponse,
    GraphTask,
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    PeerRole,
    Refusal,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
)
from scaler.protocol.version import PROTOCOL_VERSION

logger = logging.getLogger(__name__)

TASK_BATCH_SIZE = 1000
ARGUMENT_BYTES_IN_STORAGE = 128 * 1024 * 1024  # large arguments of tasks in flight, per client
RELEASE_GRACE_SECONDS = 10.0


class Phase(enum.Enum):
    CONNECTING = "connecting"  # Hello sent, waiting for HelloAck
    READY = "ready"
    CLOSING = "closing"  # DisconnectRequest sent, waiting (bounded) for DisconnectResponse
    STOPPED = "stopped"


class Outcome(enum.Enum):
    """How the shell resolves a target (a ScalerFuture, or a plain Future answering a command)."""

    TASK_RESULT = "task_result"  # value: TaskResult with its payload inline
    TASK_ERROR = "task_error"  # value: the exception
    TASK_CANCELLED = "task_cancelled"
    CANCEL_REFUSED = "cancel_refused"  # the scheduler could not cancel: a result will come
    REPLY_VALUE = "reply_value"
    REPLY_ERROR = "reply_error"


@dataclass(slots=True)
class Submission:
    """One task from the user thread, serialized and ready to go."""

    task: Task
    future: Any
    puts: Sequence[Tuple[bytes, Any]] = ()  # (object ID, payload) to put before the task is sent
    requires: Sequence[bytes] = ()  # object IDs that must be acknowledged before the task is sent
    temporary_objects: Sequence[bytes] = ()  # deleted from storage once the task ends


@dataclass(slots=True)
class GraphSubmission:
    """One graph from the user thread (see graph_builder.py): sent whole once its objects are stored."""

    graph: GraphTask
    futures: Dict[bytes, Any]  # target task ID -> its future
    puts: Sequence[Tuple[bytes, Any]] = ()  # (object ID, payload): large literals and templates
    requires: Sequence[bytes] = ()  # object IDs that must be acknowledged before the graph is sent
    temporary_objects: Sequence[bytes] = ()  # deleted from storage once every target has ended
    function_ids: Sequence[bytes] = ()  # functions the graph's tasks name (kept while the graph runs)


@dataclass(slots=True)
class Effects:
    connect_storage: Optional[str] = None
    to_scheduler: List[Any] = field(default_factory=list)
    to_storage: List[Tuple[Any, Sequence[bytes]]] = field(default_factory=list)
    resolutions: List[Tuple[Any, Outcome, Any]] = field(default_factory=list)
    failed_objects: List[bytes] = field(default_factory=list)  # puts that failed: forget cached IDs
    stop: bool = False


@dataclass(slots=True)
class _TaskRecord:
    """What the client keeps of a task in flight (one per pending future: keep it small).

    The `Task` message (with its `Argument` objects) is kept only while the task waits for its objects'
    put acknowledgements; once sent, only what its end needs is left: the future to resolve, the
    function whose use count drops, the temporary objects to delete. Nothing resends a task: the
    scheduler owns retries and re-dispatch.
    """

    future: Any
    function_id: bytes
    temporary_objects: Sequence[bytes]
    task: Optional[Task] = None  # the message, until it is sent
    missing: int = 0  # objects still awaiting their put acknowledgement
    sent: bool = False
    fetching: Optional[TaskResult] = None  # result whose payload is being fetched from storage
    held: bool = False  # waiting for room in storage for its large arguments (nothing put yet)
    argument_bytes: int = 0  # of its large arguments in storage


@dataclass(slots=True)
class _GraphRecord:
    message: Optional[GraphTask]  # dropped once sent: a graph of 100,000 tasks is large
    futures: Dict[bytes, Any]
    temporary_objects: Sequence[bytes]
    function_ids: Sequence[bytes]
    targets_left: int
    missing: int = 0
    sent: bool = False


@dataclass(slots=True)
class _StorageRequest:
    kind: ObjectRequestKind
    object_ids: List[bytes]
    deadline: float


_PENDING = object()  # state of an object whose put is not acknowledged yet


class ClientState:
    def __init__(
        self,
        client_id: bytes,
        scheduler_address: str,
        timeout_seconds: float,
        heartbeat_interval_seconds: float,
        now: float,
        batch_size: int = TASK_BATCH_SIZE,
        disconnect_wait_seconds: float = 5.0,
        usage: Optional[Callable[[], Tuple[float, int]]] = None,
        argument_bytes_in_storage: int = ARGUMENT_BYTES_IN_STORAGE,
    ) -> None:
        self._client_id = client_id
        self._address = scheduler_address
        self._timeout = timeout_seconds
        self._heartbeat_interval = heartbeat_interval_seconds
        self._batch_size = batch_size
        self._disconnect_wait = disconnect_wait_seconds
        self._usage = usage or (lambda: (0.0, 0))

        self._phase = Phase.CONNECTING
        self._started = now
        self._last_heard = now
        self._next_heartbeat = now + heartbeat_interval_seconds
        self._closing_deadline = 0.0
        self._error: Optional[Exception] = None
        self._ready_reply: Any = None
        self._disconnect_reply: Any = None
        self._storage_address: Optional[str] = None
        self._storage_error: Optional[Exception] = None

        self._tasks: Dict[bytes, _TaskRecord] = {}
        self._objects: Dict[bytes, Any] = {}  # object ID -> _PENDING or the exception of its failed put
        self._blocked: Dict[bytes, List[bytes]] = {}  # object ID -> IDs of tasks waiting for it
        self._put_replies: Dict[bytes, Any] = {}  # object ID -> reply of send_object
        self._fetches: Dict[bytes, bytes] = {}  # result object ID -> task ID
        self._storage_requests: Dict[int, _StorageRequest] = {}
        self._request_ids = itertools.count(1)
        self._cancelling: set = set()
        self._heartbeats_sent = 0
        self._echoes_received = 0
        self._echo_barriers: List[Tuple[int, Any]] = []
        self._shutdown_replies: List[Any] = []
        self._function_users: Dict[bytes, int] = {}  # function object ID -> tasks in flight naming it
        self._released: Dict[bytes, float] = {}  # function object ID -> when it may be deleted, if unused
        self._graphs: Dict[bytes, _GraphRecord] = {}  # graph ID -> graph whose targets are not all done
        self._target_graphs: Dict[bytes, bytes] = {}  # target task ID -> graph ID
        self._argument_bytes_limit = argument_bytes_in_storage
        self._argument_bytes = 0  # of the large arguments put for tasks in flight, not deleted yet
        self._held: Deque[Tuple[Submission, int]] = collections.deque()  # (task, its arguments' bytes) waiting

        self._out_tasks: List[Task] = []
        self._out_cancels: List[bytes] = []
        self._out_puts: List[Tuple[bytes, Any]] = []  # (object ID, payload: a frame or a list of frames)
        self._out_gets: List[bytes] = []
        self._out_deletes: List[bytes] = []
        self._effects = Effects()

        self._scheduler_handlers: Dict[type, Callable[[Any, float], None]] = {
            HelloAck: self._on_hello_ack,
            Refusal: self._on_scheduler_refusal,
            ClientHeartbeatEcho: self._on_heartbeat_echo,
            TaskResultBatch: self._on_task_results,
            TaskCancelConfirm: self._on_cancel_confirm,
            ClientShutdownResponse: self._on_shutdown_response,
            DisconnectResponse: self._on_disconnect_response,
            DisconnectRequest: self._on_scheduler_leaving,
        }
        self._storage_handlers: Dict[type, Callable[[Any, Sequence[bytes], float], None]] = {
            HelloAck: lambda message, blobs, now: None,
            Refusal: self._on_storage_refusal,
            ObjectResponse: self._on_object_response,
        }

    # --- what the shell and the tests read ---------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def stopped(self) -> bool:
        return self._phase is Phase.STOPPED

    @property
    def error(self) -> Optional[Exception]:
        """Why the client stopped, when it stopped on an error."""
        return self._error

    @property
    def storage_address(self) -> Optional[str]:
        return self._storage_address

    @property
    def pending_tasks(self) -> int:
        return len(self._tasks)

    def take_effects(self, now: float) -> Effects:
        """Everything decided since the last call; the shell performs it in order."""
        self._flush(now)
        effects, self._effects = self._effects, Effects()
        return effects

    # --- commands from the user thread ---------------------------------------------------------------

    def start(self, reply: Any, now: float) -> None:
        self._ready_reply = reply
        self._started = now
        self._last_heard = now
        self._to_scheduler(
            Hello(version=PROTOCOL_VERSION, role=PeerRole.CLIENT, pid=os.getpid(), hostname=socket.gethostname())
        )

    def submit(self, submissions: Sequence[Submission], now: float) -> None:
        for submission in submissions:
            self._submit_one(submission)

    def submit_graph(self, submission: GraphSubmission, now: float) -> None:
        """A graph: its targets are tracked like tasks; the GraphTask leaves once its objects are stored."""
        futures = submission.futures
        error: Optional[Exception] = None
        if self._phase is not Phase.READY:
            error = self._closed_error()
        elif submission.puts and self._storage_error is not None:
            error = self._storage_error
        for object_id, data in submission.puts if error is None else ():
            self._objects[object_id] = _PENDING
            self._out_puts.append((object_id, data))
        for object_id in submission.requires if error is None else ():
            state = self._objects.get(object_id)
            if state is not None and state is not _PENDING:  # the put of a needed object failed
                error = state
                self._out_deletes.extend(submission.temporary_objects)
                break
        if error is not None:
            for future in futures.values():
                self._resolve(future, Outcome.TASK_ERROR, _copy(error))
            return
        graph_id = submission.graph.graph_id
        record = _GraphRecord(
            submission.graph, futures, submission.temporary_objects, submission.function_ids, len(futures)
        )
        for target_id, future in futures.items():
            self._tasks[target_id] = _TaskRecord(future, b"", ())
            self._target_graphs[target_id] = graph_id
        for function_id in submission.function_ids:
            self._function_users[function_id] = self._function_users.get(function_id, 0) + 1
        for object_id in submission.requires:
            if self._objects.get(object_id) is _PENDING:
                record.missing += 1
                self._blocked.setdefault(object_id, []).append(graph_id)
        self._graphs[graph_id] = record
        if record.missing == 0:
            self._send_graph(record)

    def put_object(self, object_id: bytes, data: Any, reply: Any, now: float) -> None:
        """Put one object (a function, a serializer, a sent object); tasks that require it wait for its ack."""
        if self._refuse_reply(reply):
            return
        if self._storage_error is not None:
            self._objects[object_id] = self._storage_error
            self._resolve(reply, Outcome.REPLY_ERROR, _copy(self._storage_error))
            return
        if reply is not None:
            self._put_replies[object_id] = reply
        self._objects[object_id] = _PENDING
        self._out_puts.append((object_id, data))

    def release(self, object_ids: Sequence[bytes], now: float) -> None:
        """The client forgot these function objects: delete each once no task names it.

        The grace period covers tasks built before the release but queued after it.
        """
        for object_id in object_ids:
            self._released[object_id] = now + RELEASE_GRACE_SECONDS

    def cancel(self, task_ids: Sequence[bytes], now: float) -> None:
        for task_id in task_ids:
            record = self._tasks.get(task_id)
            if record is None or record.fetching is not None:
                continue
            if not record.sent:
                self._end_task(task_id, Outcome.TASK_CANCELLED, None)
            elif task_id not in self._cancelling:
                self._cancelling.add(task_id)
                self._out_cancels.append(task_id)

    def clear(self, reply: Any, now: float) -> None:
        """Cancel every task of this client and delete its objects; reply once the scheduler has seen it."""
        if self._refuse_reply(reply):
            return
        self._to_scheduler(ObjectInstruction(kind=ObjectInstructionKind.CLEAR, owner_id=self._client_id))
        self._held.clear()  # first: no held task may start while the others end
        for task_id in list(self._tasks):
            self._end_task(task_id, Outcome.TASK_CANCELLED, None, delete_objects=False)
        self._argument_bytes = 0
        cleared = ObjectNotFoundError("the object was deleted by Client.clear() before storage acknowledged it")
        for put_reply in self._put_replies.values():
            self._resolve(put_reply, Outcome.REPLY_ERROR, cleared)
        self._put_replies.clear()
        self._objects.clear()
        self._blocked.clear()
        self._fetches.clear()
        self._cancelling.clear()
        self._function_users.clear()
        self._released.clear()
        self._graphs.clear()
        self._target_graphs.clear()
        self._out_tasks.clear()
        self._out_cancels.clear()
        # A heartbeat after the instruction: its echo tells that the scheduler has handled the clear.
        self._send_heartbeat(now)
        self._echo_barriers.append((self._heartbeats_sent, reply))

    def shutdown(self, reply: Any, now: float) -> None:
        if self._refuse_reply(reply):
            return
        self._to_scheduler(ClientShutdownRequest())
        self._shutdown_replies.append(reply)

    def disconnect(self, reply: Any, now: float) -> None:
        """Send DisconnectRequest and wait (bounded) for DisconnectResponse; then fail what is left."""
        if self._phase is Phase.STOPPED:
            self._resolve(reply, Outcome.REPLY_VALUE, None)
            return
        if self._phase is Phase.CLOSING:
            if self._disconnect_reply is None:
                self._disconnect_reply = reply
            else:
                self._resolve(reply, Outcome.REPLY_VALUE, None)
            return
        self._disconnect_reply = reply
        if self._phase is Phase.CONNECTING:
            self._stop(DisconnectedError("the client disconnected before the scheduler answered"))
            return
        self._to_scheduler(DisconnectRequest(reason="client disconnects"))
        self._phase = Phase.CLOSING
        self._closing_deadline = now + self._disconnect_wait

    def abort(self, error: Exception, now: float) -> None:
        """Stop at once, without telling the scheduler (it is gone, or shutting down)."""
        if self._phase is not Phase.STOPPED:
            self._stop(error)

    # --- time ---------------------------------------------------------------------------------------------

    def tick(self, now: float) -> float:
        """Heartbeats and every deadline; returns the seconds until the next call is due."""
        if self._phase is Phase.STOPPED:
            return 0.0
        if self._phase is Phase.CONNECTING:
            if now - self._started >= self._timeout:
                self._stop(DisconnectedError(f"no scheduler answered at {self._address} within {self._timeout:g}s"))
                return 0.0
            return max(0.0, self._started + self._timeout - now)
        if now - self._last_heard >= self._timeout:
            self._stop(
                DisconnectedError(f"the scheduler at {self._address} sent nothing for {self._timeout:g}s: lost it")
            )
            return 0.0
        if self._phase is Phase.CLOSING and now >= self._closing_deadline:
            logger.debug(f"Client: no DisconnectResponse from {self._address}; closing anyway")
            self._finish_disconnect()
            return 0.0
        if self._phase is Phase.READY and now >= self._next_heartbeat:
            self._send_heartbeat(now)
        self._expire_storage_requests(now)
        if self._released:
            self._delete_released(now)
        deadlines = [self._last_heard + self._timeout, self._next_heartbeat]
        if self._phase is Phase.CLOSING:
            deadlines.append(self._closing_deadline)
        if self._storage_requests:
            deadlines.append(min(request.deadline for request in self._storage_requests.values()))
        return max(0.0, min(deadlines) - now)

    # --- messages from the peers ----------------------------------------------------------------------

    def on_scheduler_message(self, message: Any, blobs: Sequence[bytes], now: float) -> None:
        if self._phase is Phase.STOPPED:
            return
        self._last_heard = now
        handler = self._scheduler_handlers.get(type(message))
        if handler is None:
            logger.warning(f"Client: dropped unexpected {type(message).__name__} from scheduler {self._address}")
            return
        handler(message, now)

    def on_storage_message(self, message: Any, blobs: Sequence[bytes], now: float) -> None:
        if self._phase is Phase.STOPPED:
            return
        handler = self._storage_handlers.get(type(message))
        if handler is None:
            logger.warning(
                f"Client: dropped unexpected {type(message).__name__} from object storage {self._storage_address}"
            )
            return
        handler(message, blobs, now)

    # --- scheduler handlers -------------------------------------------------------------------------------

    def _on_hello_ack(self, message: HelloAck, now: float) -> None:
        if self._phase is not Phase.CONNECTING:
            return
        self._phase = Phase.READY
        if message.timeout_seconds > 0:  # be heard well within the scheduler's own patience
            self._heartbeat_interval = min(self._heartbeat_interval, message.timeout_seconds / 3)
        self._next_heartbeat = now + self._heartbeat_interval
        address = message.object_storage_address
        if not address:
            address = default_storage_address(self._address)
            logger.warning(f"Client: scheduler named no object storage server; using {address}")
        self._storage_address = address
        self._effects.connect_storage = address
        self._to_storage(
            Hello(version=PROTOCOL_VERSION, role=PeerRole.CLIENT, pid=os.getpid(), hostname=socket.gethostname())
        )
        reply, self._ready_reply = self._ready_reply, None
        self._resolve(reply, Outcome.REPLY_VALUE, message)

    def _on_scheduler_refusal(self, message: Refusal, now: float) -> None:
        if self._phase is Phase.CONNECTING:
            self._stop(ProtocolError(f"scheduler at {self._address} refused the client: {message.reason}"))
        else:
            self._stop(DisconnectedError(f"scheduler at {self._address} refused the client: {message.reason}"))

    def _on_heartbeat_echo(self, message: ClientHeartbeatEcho, now: float) -> None:
        self._echoes_received += 1
        while self._echo_barriers and self._echo_barriers[0][0] <= self._echoes_received:
            _, reply = self._echo_barriers.pop(0)
            self._resolve(reply, Outcome.REPLY_VALUE, None)

    def _on_task_results(self, message: TaskResultBatch, now: float) -> None:
        for result in message.results:
            record = self._tasks.get(result.task_id)
            if record is None or record.fetching is not None:
                logger.debug(f"Client: dropped result of unknown or finished task {show(result.task_id)}")
                if result.payload_kind == PayloadKind.OBJECT and result.payload:
                    self._out_deletes.append(result.payload)
                continue
            if self._cancelling:
                self._cancelling.discard(result.task_id)
            if result.payload_kind == PayloadKind.OBJECT:
                if self._storage_error is not None:
                    self._end_task(result.task_id, Outcome.TASK_ERROR, _copy(self._storage_error))
                    continue
                record.fetching = result
                self._fetches[result.payload] = result.task_id
                self._out_gets.append(result.payload)
                continue
            self._end_task(result.task_id, Outcome.TASK_RESULT, result)

    def _on_cancel_confirm(self, message: TaskCancelConfirm, now: float) -> None:
        for task_id, cancelled in zip(message.task_ids, message.cancelled, strict=False):
            self._cancelling.discard(task_id)
            record = self._tasks.get(task_id)
            if record is None or record.fetching is not None:
                continue
            if cancelled:
                self._end_task(task_id, Outcome.TASK_CANCELLED, None)
            else:
                self._resolve(record.future, Outcome.CANCEL_REFUSED, None)

    def _on_shutdown_response(self, message: ClientShutdownResponse, now: float) -> None:
        if not self._shutdown_replies:
            logger.warning(f"Client: dropped unexpected ClientShutdownResponse from scheduler {self._address}")
            return
        self._resolve(self._shutdown_replies.pop(0), Outcome.REPLY_VALUE, (message.accepted, message.reason))

    def _on_disconnect_response(self, message: DisconnectResponse, now: float) -> None:
        if self._phase is Phase.CLOSING:
            self._finish_disconnect()

    def _on_scheduler_leaving(self, message: DisconnectRequest, now: float) -> None:
        reason = f": {message.reason}" if message.reason else ""
        self._stop(DisconnectedError(f"the scheduler at {self._address} closed the connection{reason}"))

    # --- storage handlers -------------------------------------------------------------------------------

    def _on_storage_refusal(self, message: Refusal, blobs: Sequence[bytes], now: float) -> None:
        error = ProtocolError(f"object storage server at {self._storage_address} refused the client: {message.reason}")
        self._storage_error = error
        for object_id, state in list(self._objects.items()):
            if state is _PENDING:
                self._fail_object(object_id, _copy(error))
        for object_id in list(self._fetches):
            self._fail_fetch(object_id, _copy(error))
        self._storage_requests.clear()

    def _on_object_response(self, message: ObjectResponse, blobs: Sequence[bytes], now: float) -> None:
        request = self._storage_requests.pop(message.request_id, None)
        if request is None:  # a delete's answer, or one that came after its deadline
            return
        if request.kind == ObjectRequestKind.PUT:
            self._on_put_response(request, message)
        elif request.kind == ObjectRequestKind.GET:
            self._on_get_response(request, message, blobs)

    def _on_put_response(self, request: _StorageRequest, message: ObjectResponse) -> None:
        statuses = dict(zip(message.object_ids, message.statuses, strict=False))
        for object_id in request.object_ids:
            status = statuses.get(object_id)
            if status == ObjectStatus.OK:
                self._object_ready(object_id)
                continue
            what = "gave no status" if status is None else f"answered {status.name.lower()}"
            reason = f": {message.reason}" if message.reason else ""
            self._fail_object(
                object_id,
                ObjectStorageRefusedError(
                    f"object storage server at {self._storage_address} refused object {show(object_id)} "
                    f"({what}){reason}"
                ),
            )

    def _on_get_response(self, request: _StorageRequest, message: ObjectResponse, blobs: Sequence[Any]) -> None:
        answered = set()
        payloads = object_frames.found(message, blobs)
        for object_id, status, blob in zip(message.object_ids, message.statuses, payloads, strict=False):
            answered.add(object_id)
            if blob is not None:
                self._out_deletes.append(object_id)
            task_id = self._fetches.pop(object_id, None)
            if task_id is None:
                continue
            if blob is None:
                self._fail_fetch_of(task_id, object_id, status)
                continue
            record = self._tasks.get(task_id)
            if record is None or record.fetching is None:
                continue
            result = record.fetching
            result.payload = blob  # a frame (or a list of frames), deserialized from where it was received
            result.payload_kind = PayloadKind.INLINE
            self._end_task(task_id, Outcome.TASK_RESULT, result)
        for object_id in request.object_ids:
            if object_id not in answered and object_id in self._fetches:
                task_id = self._fetches.pop(object_id)
                self._fail_fetch_of(task_id, object_id, None)

    # --- internals -----------------------------------------------------------------------------------------

    def _submit_one(self, submission: Submission) -> None:
        future = submission.future
        if self._phase is not Phase.READY:
            self._resolve(future, Outcome.TASK_ERROR, self._closed_error())
            return
        if submission.puts and self._storage_error is not None:
            self._resolve(future, Outcome.TASK_ERROR, _copy(self._storage_error))
            return
        task = submission.task
        record = _TaskRecord(future, task.function_id, submission.temporary_objects or (), task)
        self._tasks[task.task_id] = record
        self._function_users[record.function_id] = self._function_users.get(record.function_id, 0) + 1
        size = sum(object_frames.size(data) for _, data in submission.puts) if submission.puts else 0
        if size and (self._held or not self._room_for(size)):
            record.held = True
            self._held.append((submission, size))
            return
        self._start(submission, record, size)

    def _room_for(self, size: int) -> bool:
        return self._argument_bytes == 0 or self._argument_bytes + size <= self._argument_bytes_limit

    def _start(self, submission: Submission, record: _TaskRecord, size: int) -> None:
        """Put the task's large arguments; send it once every object it needs is acknowledged."""
        record.argument_bytes = size
        self._argument_bytes += size
        for object_id, data in submission.puts:
            self._objects[object_id] = _PENDING
            self._out_puts.append((object_id, data))
        task_id = submission.task.task_id
        for object_id in submission.requires:
            state = self._objects.get(object_id)
            if state is not None and state is not _PENDING:  # the put of a needed object failed
                self._end_task(task_id, Outcome.TASK_ERROR, _copy(state))
                return
        for object_id in submission.requires:
            if self._objects.get(object_id) is _PENDING:
                record.missing += 1
                self._blocked.setdefault(object_id, []).append(task_id)
        if record.missing == 0:
            record.sent = True
            self._out_tasks.append(submission.task)
            record.task = None

    def _start_held(self) -> None:
        """Start the tasks held for room in storage, in order, as far as the room now goes."""
        held = self._held
        while held:
            submission, size = held[0]
            record = self._tasks.get(submission.task.task_id)
            if record is None or not record.held:  # it ended (cancelled) while held
                held.popleft()
                continue
            if not self._room_for(size):
                return
            held.popleft()
            record.held = False
            self._start(submission, record, size)

    def _object_ready(self, object_id: bytes) -> None:
        self._objects.pop(object_id, None)
        reply = self._put_replies.pop(object_id, None)
        if reply is not None:
            self._resolve(reply, Outcome.REPLY_VALUE, object_id)
        for task_id in self._blocked.pop(object_id, ()):
            graph = self._graphs.get(task_id)
            if graph is not None:  # a graph ID
                graph.missing -= 1
                if graph.missing == 0:
                    self._send_graph(graph)
                continue
            record = self._tasks.get(task_id)
            if record is None or record.sent:
                continue
            record.missing -= 1
            if record.missing == 0 and record.task is not None:
                record.sent = True
                self._out_tasks.append(record.task)
                record.task = None

    def _fail_object(self, object_id: bytes, error: Exception) -> None:
        self._objects[object_id] = error
        self._effects.failed_objects.append(object_id)
        reply = self._put_replies.pop(object_id, None)
        if reply is not None:
            self._resolve(reply, Outcome.REPLY_ERROR, error)
        for task_id in self._blocked.pop(object_id, ()):
            graph = self._graphs.get(task_id)
            for target_id in graph.futures if graph is not None and not graph.sent else ():
                self._end_task(target_id, Outcome.TASK_ERROR, _copy(error))
            if task_id in self._tasks:
                self._end_task(task_id, Outcome.TASK_ERROR, _copy(error))

    def _fail_fetch(self, object_id: bytes, error: Exception) -> None:
        task_id = self._fetches.pop(object_id, None)
        if task_id is not None and task_id in self._tasks:
            self._end_task(task_id, Outcome.TASK_ERROR, error)

    def _fail_fetch_of(self, task_id: bytes, object_id: bytes, status: Optional[ObjectStatus]) -> None:
        if task_id not in self._tasks:
            return
        what = "gave no answer for it" if status is None else f"answered {status.name.lower()}"
        self._end_task(
            task_id,
            Outcome.TASK_ERROR,
            ObjectNotFoundError(
                f"the result of task {show(task_id)} (object {show(object_id)}) could not be read from "
                f"object storage at {self._storage_address}: it {what}"
            ),
        )

    def _end_task(self, task_id: bytes, outcome: Outcome, value: Any, delete_objects: bool = True) -> None:
        record = self._tasks.pop(task_id, None)
        if record is None:
            return
        function_id = record.function_id
        if function_id:  # graph targets count their functions per graph
            users = self._function_users.pop(function_id, 1) - 1
            if users > 0:
                self._function_users[function_id] = users
        if self._cancelling:
            self._cancelling.discard(task_id)
        if delete_objects and record.temporary_objects and not record.held:  # a held task put nothing yet
            self._out_deletes.extend(record.temporary_objects)
        if record.argument_bytes:
            self._argument_bytes -= record.argument_bytes
            if self._held:
                self._start_held()
        self._effects.resolutions.append((record.future, outcome, value))
        if self._target_graphs:
            graph_id = self._target_graphs.pop(task_id, None)
            if graph_id is not None:
                self._target_ended(graph_id, delete_objects)

    def _send_graph(self, graph: _GraphRecord) -> None:
        """Send the GraphTask, without the targets cancelled while its objects were being stored."""
        graph.sent = True
        message, graph.message = graph.message, None
        assert message is not None
        message.targets = [target for target in message.targets if target in self._tasks]
        if not message.targets:
            return
        for target in message.targets:
            self._tasks[target].sent = True
        self._to_scheduler(message)

    def _target_ended(self, graph_id: bytes, delete_objects: bool) -> None:
        graph = self._graphs.get(graph_id)
        if graph is None:
            return
        graph.targets_left -= 1
        if graph.targets_left > 0:
            return
        del self._graphs[graph_id]
        if delete_objects:
            self._out_deletes.extend(graph.temporary_objects)
        for function_id in graph.function_ids:
            users = self._function_users.pop(function_id, 1) - 1
            if users > 0:
                self._function_users[function_id] = users

    def _expire_storage_requests(self, now: float) -> None:
        expired = [rid for rid, request in self._storage_requests.items() if request.deadline <= now]
        for request_id in expired:
            request = self._storage_requests.pop(request_id)
            error = DisconnectedError(
                f"object storage server at {self._storage_address} did not answer within {self._timeout:g}s"
            )
            for object_id in request.object_ids:
                if request.kind == ObjectRequestKind.PUT:
                    if self._objects.get(object_id) is _PENDING:
                        self._fail_object(object_id, _copy(error))
                else:
                    self._fail_fetch(object_id, _copy(error))

    def _delete_released(self, now: float) -> None:
        for object_id, not_before in list(self._released.items()):
            if now < not_before or object_id in self._function_users:
                continue
            state = self._objects.get(object_id)
            if state is _PENDING:
                continue
            del self._released[object_id]
            if state is None:  # stored (a failed put left nothing to delete)
                self._out_deletes.append(object_id)

    def _send_heartbeat(self, now: float) -> None:
        cpu, rss = self._usage()
        self._to_scheduler(ClientHeartbeat(cpu=cpu, rss_bytes=rss, pending_tasks=len(self._tasks)))
        self._heartbeats_sent += 1
        self._next_heartbeat = now + self._heartbeat_interval

    def _finish_disconnect(self) -> None:
        self._stop(DisconnectedError("the client disconnected before the task finished"), error_is_cause=False)

    def _stop(self, error: Exception, error_is_cause: bool = True) -> None:
        """Resolve everything still pending with ``error`` and stop."""
        self._phase = Phase.STOPPED
        if error_is_cause:
            self._error = error
        self._held.clear()  # first: no held task may start while the others end
        for task_id in list(self._tasks):
            self._end_task(task_id, Outcome.TASK_ERROR, _copy(error), delete_objects=False)
        replies = [self._ready_reply, *self._put_replies.values(), *self._shutdown_replies]
        replies.extend(reply for _, reply in self._echo_barriers)
        for reply in replies:
            self._resolve(reply, Outcome.REPLY_ERROR, _copy(error))
        self._resolve(self._disconnect_reply, Outcome.REPLY_VALUE, None)
        self._ready_reply = self._disconnect_reply = None
        self._put_replies.clear()
        self._shutdown_replies.clear()
        self._echo_barriers.clear()
        self._objects.clear()
        self._blocked.clear()
        self._fetches.clear()
        self._cancelling.clear()
        self._function_users.clear()
        self._released.clear()
        self._graphs.clear()
        self._target_graphs.clear()
        self._storage_requests.clear()
        self._out_tasks.clear()
        self._out_cancels.clear()
        self._out_puts.clear()
        self._out_gets.clear()
        self._out_deletes.clear()
        self._effects.stop = True

    def _closed_error(self) -> Exception:
        if self._error is not None:
            return _copy(self._error)
        if self._phase is Phase.CONNECTING:
            return DisconnectedError("the client is not connected yet")
        return DisconnectedError("the client is disconnected")

    def _refuse_reply(self, reply: Any) -> bool:
        if self._phase is Phase.READY:
            return False
        self._resolve(reply, Outcome.REPLY_ERROR, self._closed_error())
        return True

    def _resolve(self, target: Any, outcome: Outcome, value: Any) -> None:
        if target is not None:
            self._effects.resolutions.append((target, outcome, value))

    def _to_scheduler(self, message: Any) -> None:
        self._effects.to_scheduler.append(message)

    def _to_storage(self, message: Any, blobs: Sequence[bytes] = ()) -> None:
        self._effects.to_storage.append((message, blobs))

    def _flush(self, now: float) -> None:
        if self._out_puts:
            object_ids = [object_id for object_id, _ in self._out_puts]
            blobs, frame_counts = object_frames.pack([data for _, data in self._out_puts])
            self._storage_request(ObjectRequestKind.PUT, object_ids, now, blobs, frame_counts=frame_counts)
            self._out_puts = []
        if self._out_gets:
            self._storage_request(ObjectRequestKind.GET, self._out_gets, now)
            self._out_gets = []
        if self._out_deletes:
            self._storage_request(ObjectRequestKind.DELETE, self._out_deletes, now, track=False)
            self._out_deletes = []
        if self._out_tasks:
            tasks, size = self._out_tasks, self._batch_size
            for start in range(0, len(tasks), size):
                self._to_scheduler(TaskBatch(tasks=tasks[start : start + size]))
            self._out_tasks = []
        if self._out_cancels:
            self._to_scheduler(TaskCancel(task_ids=self._out_cancels))
            self._out_cancels = []

    def _storage_request(
        self,
        kind: ObjectRequestKind,
        object_ids: List[bytes],
        now: float,
        blobs: Sequence[Any] = (),
        track=True,
        frame_counts: Sequence[int] = (),
    ) -> None:
        request_id = next(self._request_ids)
        if track:
            self._storage_requests[request_id] = _StorageRequest(kind, object_ids, now + self._timeout)
        request = ObjectRequest(request_id, kind, self._client_id, object_ids, list(frame_counts))
        self._to_storage(request, blobs)


def _copy(error: Exception) -> Exception:
    """A fresh exception of the same type and message: one object raised in many threads grows tracebacks."""
    try:
        return type(error)(*error.args)
    except Exception:
        return error
