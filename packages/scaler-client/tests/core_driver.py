"""Driving `ClientCore` in the unit tests: a core, the effects of a turn, and how each task and command ended."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from scaler.client.client_core import ClientCore
from scaler.client.client_events import (
    TICK,
    CancelRefused,
    Connect,
    FromScheduler,
    FromStorage,
    PutObject,
    Reply,
    ReplyError,
    Submit,
    TaskCancelled,
    TaskFailed,
    TaskResults,
    ToScheduler,
    ToStorage,
)
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    HelloAck,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    Task,
    TaskBatch,
    TaskResult,
    TaskResultBatch,
)
from scaler.protocol.version import PROTOCOL_VERSION

CLIENT_ID = b"C|test|1|abc"
ADDRESS = "tcp://127.0.0.1:2345"
STORAGE = "tcp://127.0.0.1:2346"
TIMEOUT = 10.0
INTERVAL = 1.0
FUNCTION = b"f" * 16
SERIALIZER = b"s" * 16
# command IDs, named in `outcomes`
READY, PUT, BYE, CLEAR, SHUTDOWN, INFO = 1, 2, 3, 4, 5, 6
COMMANDS = {READY: "ready", PUT: "put", BYE: "bye", CLEAR: "clear", SHUTDOWN: "shutdown", INFO: "info"}
RESULT, ERROR, CANCELLED, CANCEL_REFUSED, REPLY, REPLY_ERROR = (
    "result", "error", "cancelled", "cancel_refused", "reply", "reply_error"
)  # fmt: skip


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def new_core(timeout: float = TIMEOUT, argument_bytes: int = 1 << 30, reconnect: float = 0.0) -> ClientCore:
    return ClientCore(
        CLIENT_ID, ADDRESS, timeout, INTERVAL, 4242, "test-host", batch_size=1000, disconnect_wait_seconds=2.0,
        argument_bytes_in_storage=argument_bytes, reconnect_seconds=reconnect,
    )  # fmt: skip


def run(core: ClientCore, now: float, *events: Any) -> List[Any]:
    """The effects of ``events``, then of the `Tick` that ends the agent's turn (it sends the batches)."""
    effects: List[Any] = []
    for event in (*events, TICK):
        effects.extend(core.handle(event, now))
    return effects


def connected(now: float = 0.0, argument_bytes: int = 1 << 30, reconnect: float = 0.0, **ack_fields: Any) -> ClientCore:
    """A core the scheduler accepted (its HelloAck with ``ack_fields``: its limit and quota); one that waits up to
    ``reconnect`` seconds for a lost scheduler."""
    core = new_core(argument_bytes=argument_bytes, reconnect=reconnect)
    ack = HelloAck(version=PROTOCOL_VERSION, object_storage_address=STORAGE, **ack_fields)
    run(core, now, Connect(READY), FromScheduler(ack))
    return core


def task(n: int, arguments=(), serializer_id: bytes = b"") -> Task:
    return Task(
        task_id=tid(n), client_id=CLIENT_ID, function_id=FUNCTION, arguments=list(arguments),
        serializer_id=serializer_id,
    )  # fmt: skip


def submit(*numbers: int, puts=None) -> Submit:
    return Submit([task(n) for n in numbers], puts or {})


def large(n: int, size: int) -> Tuple[Task, List[Tuple[bytes, bytes]]]:
    """Task ``n`` with one large argument of ``size`` bytes, put by the core."""
    argument = b"a%015d" % n
    return task(n, [Argument("", ArgumentKind.OBJECT, argument)]), [(argument, b"x" * size)]


def submit_large(*tasks: Tuple[Task, List[Tuple[bytes, bytes]]]) -> Submit:
    return Submit([t for t, _ in tasks], {t.task_id: puts for t, puts in tasks if puts})


def sent_tasks(effects) -> List[bytes]:
    return [t.task_id for e in to_scheduler(effects) if isinstance(e, TaskBatch) for t in e.tasks]


def to_scheduler(effects) -> List[Any]:
    return [effect.message for effect in effects if isinstance(effect, ToScheduler)]


def storage_requests(effects, kind: ObjectRequestKind) -> List[Tuple[ObjectRequest, Any]]:
    return [
        (e.message, e.blobs)
        for e in effects
        if isinstance(e, ToStorage) and isinstance(e.message, ObjectRequest) and e.message.kind == kind
    ]


def outcomes(effects) -> Dict[str, Tuple[str, Any]]:
    """How each task (``task<n>``) or command (by its name in COMMANDS) ended in ``effects``."""
    found: Dict[str, Tuple[str, Any]] = {}

    def name(task_id: bytes) -> str:
        return f"task{int.from_bytes(task_id, 'big')}"

    for effect in effects:
        if isinstance(effect, TaskResults):
            found.update((name(result.task_id), (RESULT, result)) for result in effect.results)
        elif isinstance(effect, TaskFailed):
            found[name(effect.task_id)] = (ERROR, effect.error)
        elif isinstance(effect, TaskCancelled):
            found[name(effect.task_id)] = (CANCELLED, None)
        elif isinstance(effect, CancelRefused):
            found[name(effect.task_id)] = (CANCEL_REFUSED, None)
        elif isinstance(effect, Reply):
            found[COMMANDS[effect.command_id]] = (REPLY, effect.value)
        elif isinstance(effect, ReplyError):
            found[COMMANDS[effect.command_id]] = (REPLY_ERROR, effect.error)
    return found


def put_ack(request: ObjectRequest, status: ObjectStatus = ObjectStatus.OK, reason: str = "") -> FromStorage:
    response = ObjectResponse(
        request_id=request.request_id,
        kind=ObjectRequestKind.PUT,
        object_ids=list(request.object_ids),
        statuses=[status] * len(request.object_ids),
        reason=reason,
    )
    return FromStorage(response, [])


def acknowledge_function(core: ClientCore, now: float = 0.0):
    ((request, blobs),) = storage_requests(run(core, now, PutObject(0, FUNCTION, b"function")), ObjectRequestKind.PUT)
    return run(core, now, put_ack(request))


def results(*results: TaskResult) -> FromScheduler:
    return FromScheduler(TaskResultBatch(results=list(results)))
