"""What the client's core (`ClientCore.handle`) takes in and gives back: small typed records.

Events are the user threads' commands (queued by the agent thread, `agent.py`), the messages the agent
receives from the scheduler and from object storage, and `Tick`. Effects are what the agent then does, in
order: sends, and the ends of tasks and commands, named by task ID or command ID. The core holds no
future: the agent maps task IDs to `ScalerFuture` and command IDs to the futures its callers wait on (but the
futures whose results a task takes, opaque to the core, which hands them back to the agent: `ResolveInputs`).

One event per command or received message, never one per task: a `Submit` carries a whole chunk of a
`map`, a `TaskResults` effect every result of one `TaskResultBatch`. `FromScheduler`, `FromStorage`,
`ConnectionChanged`, `HandshakeFailed` and `Tick` are every core's (`scaler.protocol.core_events`), named here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from scaler.protocol.core_events import TICK, ConnectionChanged, FromScheduler, FromStorage, HandshakeFailed, Tick  # noqa: F401
from scaler.protocol.messages import Counter, GraphTask, Task, TaskOutput, TaskResult, TaskRuns

# --- commands from the user threads ------------------------------------------------------------------------
# ``command_id`` names the caller waiting for the reply (`Reply` or `ReplyError`); 0 means nobody waits.


@dataclass(slots=True)
class Connect:
    """Say Hello to the scheduler; the reply is its HelloAck (or the handshake's error)."""

    command_id: int


@dataclass(slots=True)
class Submit:
    """Tasks, serialized; each goes once every object it needs is acknowledged by object storage.

    A task needs its function (``task.function_id``), its serializer (``task.serializer_id``, if any) and its
    arguments too large to travel inline: ``puts`` maps the IDs of the tasks that have some to their
    ``(object ID, payload)`` pairs, put by the core and deleted once the task ends.
    """

    tasks: List[Task]
    puts: Mapping[bytes, Sequence[Tuple[bytes, Any]]]  # a `task_builder.Puts`: also the tasks' inputs (futures)


@dataclass(slots=True)
class InputsEnded:
    """The agent's answer to `ResolveInputs`: the payload of each argument that is an input's result (by position),
    or the first input's error, or that an input was cancelled."""

    task_id: bytes
    payloads: Mapping[int, Any]
    error: Optional[BaseException] = None
    cancelled: bool = False


@dataclass(slots=True)
class SubmitGraph:
    """A graph, or one part of it (see graph_builder.py), sent once its objects are stored and the graph's
    earlier parts have left. Its targets are tasks, named by the first part (its event and its GraphTask)."""

    graph: GraphTask
    puts: Sequence[Tuple[bytes, Any]]  # (object ID, payload): large literals and templates
    requires: Sequence[bytes]  # object IDs that must be acknowledged before this part is sent
    temporary_objects: Sequence[bytes]  # deleted from storage once every target has ended
    function_ids: Sequence[bytes]  # functions the part's tasks name (kept while the graph runs)
    targets: Sequence[bytes] = ()  # the first part's event: every target of the graph; later parts: none


@dataclass(slots=True)
class PutObject:
    """Put one object (a function, a serializer, a sent object); tasks that need it wait for its ack."""

    command_id: int  # replied with the object ID once stored
    object_id: bytes
    data: Any  # a payload: a frame, or a list of frames
    function_name: str = ""  # a function's module.qualname: its tasks are counted by it for monitors


@dataclass(slots=True)
class Release:
    """The client forgot these function objects: delete each once no task names it."""

    object_ids: Sequence[bytes]


@dataclass(slots=True)
class Cancel:
    task_ids: Sequence[bytes]


@dataclass(slots=True)
class Clear:
    """Cancel every task of this client and delete its objects; replied once the scheduler has seen it."""

    command_id: int


@dataclass(slots=True)
class Shutdown:
    """Ask the scheduler to shut down; replied with ``(accepted, reason)``."""

    command_id: int


@dataclass(slots=True)
class AskInfo:
    """Ask the scheduler what it serves (protocol 1.8); replied with its `SchedulerInfo`."""

    command_id: int


@dataclass(slots=True)
class AskWorkers:
    """Send a `WorkerCall` to every worker (protocol 1.8; its call ID is this command's); replied with the
    scheduler's `WorkerCallAnswer`."""

    command_id: int
    call: Any


@dataclass(slots=True)
class Disconnect:
    """Leave the scheduler (bounded wait for its answer); replied once the client has stopped."""

    command_id: int


@dataclass(slots=True)
class ReportTasks:
    """Open (``change`` +1) or close (-1) a task stream, or ask for what came so far (0): a heartbeat goes at once
    (whether a stream is open, protocol 1.8), replied when its echo comes, with the runs gathered since the last."""

    command_id: int
    change: int


@dataclass(slots=True)
class MadeIn:
    """A Client sharing this connection was made in another task (inside a processor): should the connection say
    Hello again, it names that task, with its proof (the first one may have ended since)."""

    task_id: bytes
    proof: bytes


@dataclass(slots=True)
class Abort:
    """Stop at once, without telling the scheduler (it is gone, or shutting down)."""

    error: Exception


# --- what the agent received, and time: `scaler.protocol.core_events` (every core's) ----------------------

Event = Union[
    Connect, Submit, SubmitGraph, PutObject, Release, Cancel, Clear, Shutdown, AskInfo, ReportTasks, Disconnect,
    Abort, MadeIn, FromScheduler, FromStorage, HandshakeFailed, ConnectionChanged, Tick, InputsEnded,
]  # fmt: skip

# --- effects, carried out by the agent in order ----------------------------------------------------------


@dataclass(slots=True)
class ToScheduler:
    message: Any


@dataclass(slots=True)
class ToStorage:
    message: Any
    blobs: Sequence[Any] = ()


@dataclass(slots=True)
class RenewConnection:
    """Close the connection to the scheduler and connect a new socket to it: nothing sent on the lost one (still
    queued in ZeroMQ) may reach the scheduler before the client's next Hello."""


@dataclass(slots=True)
class ConnectStorage:
    """Connect to the object storage server at this address (before the `ToStorage` effects that follow)."""

    address: str


@dataclass(slots=True)
class Heartbeat:
    """Send a ClientHeartbeat; the agent adds its process's CPU share and resident memory."""

    pending_tasks: int
    report_tasks: bool = False  # a task stream is open
    functions: List[Counter] = field(default_factory=list)  # tasks in flight per function, while a monitor watches


@dataclass(slots=True)
class TaskRunsArrived:
    """The runs of this client's tasks (and of the tasks they submitted) the scheduler gathered: for the task
    streams open (`task_stream.py`)."""

    runs: TaskRuns


@dataclass(slots=True)
class TaskResults:
    """These tasks ended with these results (payload inline): each future decodes its own."""

    results: List[TaskResult]


@dataclass(slots=True)
class TaskPrinted:
    """What tasks printed (the client asked for it: ``stream_output``): the agent shows it."""

    outputs: List[TaskOutput]


@dataclass(slots=True)
class TaskFailed:
    """The task ended with this error of the client's side (storage refused, scheduler lost, disconnected).
    One error may end many tasks: the agent raises a fresh copy in each future."""

    task_id: bytes
    error: Exception


@dataclass(slots=True)
class TaskCancelled:
    task_id: bytes


@dataclass(slots=True)
class ResolveInputs:
    """The task takes the results of these futures, and the scheduler will not hold it for them (it does not hold
    one of them, or is older than 1.8): once all have ended, the agent tells the core (`InputsEnded`)."""

    task_id: bytes
    futures: Sequence[Any]  # ScalerFuture


@dataclass(slots=True)
class CancelRefused:
    """The scheduler could not cancel the task (it runs on): not an end, its result will come."""

    task_id: bytes


@dataclass(slots=True)
class Reply:
    command_id: int
    value: Any


@dataclass(slots=True)
class ReplyError:
    command_id: int
    error: Exception


@dataclass(slots=True)
class ObjectsFailed:
    """These puts failed (None: the storage server forgot everything): the client forgets the function IDs it
    cached for them, so they are put again."""

    object_ids: Optional[List[bytes]]


@dataclass(slots=True)
class Stopped:
    """The client stopped: the agent closes its sockets (after this event's other effects).
    ``error`` is why, or None after a disconnect the user asked for."""

    error: Optional[Exception]


Effect = Union[
    ToScheduler, ToStorage, ConnectStorage, RenewConnection, Heartbeat, TaskRunsArrived, TaskResults, TaskPrinted,
    TaskFailed, TaskCancelled, ResolveInputs, CancelRefused, Reply, ReplyError, ObjectsFailed, Stopped,
]  # fmt: skip
