"""Python mirrors of the Cap'n Proto structs in ``schema/scaler.capnp``.

One dataclass per struct, fields in snake_case (``taskId`` -> ``task_id``).
``codec.py`` converts between these and the wire format; nothing else in the
project touches Cap'n Proto objects.
"""

from __future__ import annotations

import enum
from array import array
from dataclasses import dataclass, field
from typing import Iterable, List, Sequence, Tuple


class PeerRole(enum.IntEnum):
    CLIENT = 0
    WORKER = 1
    SCHEDULER = 2
    MONITOR = 3
    WORKER_MANAGER = 4
    OBJECT_STORAGE = 5  # protocol 1.3


class ArgumentKind(enum.IntEnum):
    INLINE = 0
    OBJECT = 1
    TASK = 2


class TaskStatus(enum.IntEnum):
    SUCCESS = 0
    FAILED = 1
    CANCELLED = 2
    WORKER_DIED = 3
    REJECTED = 4
    INPUTS_GONE = 5


class PayloadKind(enum.IntEnum):
    NONE = 0
    INLINE = 1
    OBJECT = 2


class ObjectRequestKind(enum.IntEnum):
    PUT = 0
    GET = 1
    DELETE = 2
    CLEAR_OWNER = 3
    USAGE = 4  # 1.8: the bytes each owner holds (the scheduler asks, for monitors)
    ADMIT = 5  # 1.8: the scheduler serves this client (docs/protocol.md, "Whose objects a task reads")
    SUMMARY = 6  # 1.8: the largest objects (the scheduler asks, for monitors)


class ObjectStatus(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    TOO_LARGE = 2
    STORAGE_FULL = 3
    OVER_QUOTA = 4  # 1.8


class ObjectInstructionKind(enum.IntEnum):
    CREATE = 0
    DELETE = 1
    CLEAR = 2


class WorkerManagerCommandKind(enum.IntEnum):
    START_WORKERS = 0
    STOP_WORKERS = 1


class WorkerGroupState(enum.IntEnum):
    STARTING = 0
    RUNNING = 1
    RETIRING = 2
    STOPPING = 3


@dataclass(slots=True)
class Version:
    major: int = 0
    minor: int = 0


@dataclass(slots=True)
class Capability:
    name: str = ""
    value: int = 0


@dataclass(slots=True)
class HeldTask:
    """A task a worker holds when it says Hello again (1.8)."""

    task_id: bytes = b""
    client_id: bytes = b""
    scope_id: bytes = b""
    attempt: int = 0
    waiting: bool = False


@dataclass(slots=True)
class WorkerInfo:
    slots: int = 1
    queue_capacity: int = 0
    capabilities: List[Capability] = field(default_factory=list)
    group_id: bytes = b""  # 1.6: the worker group a worker manager started it in
    delegation_key: bytes = b""  # 1.8: the key of the proofs of its tasks' Clients (scaler.protocol.delegation)
    held_tasks: List[HeldTask] = field(default_factory=list)  # 1.8: a worker saying Hello again: what it holds


@dataclass(slots=True)
class Hello:
    version: Version = field(default_factory=Version)
    role: PeerRole = PeerRole.CLIENT
    pid: int = 0
    hostname: str = ""
    worker_info: WorkerInfo = field(default_factory=WorkerInfo)
    made_in: bytes = b""  # 1.8: the task a client was made in (scaler.protocol.delegation)
    made_in_proof: bytes = b""  # 1.8: that it was
    reconnect_seconds: float = 0.0  # 1.8, a client: how long it waits for its scheduler to come back, then resumes
    resuming: bool = False  # 1.8, a client: said again after it lost its scheduler


@dataclass(slots=True)
class HelloAck:
    version: Version = field(default_factory=Version)
    object_storage_address: str = ""
    heartbeat_interval_seconds: float = 0.0
    timeout_seconds: float = 0.0
    role: PeerRole = PeerRole.CLIENT  # who answered (1.5); CLIENT: an older peer, which does not say
    max_message_size: int = 0  # the largest frame the answering daemon takes (1.8); 0: an older one, not said
    client_quota: int = 0  # scheduler: tasks a client may have queued; storage: bytes an owner may hold (1.8)


@dataclass(slots=True)
class Refusal:
    version: Version = field(default_factory=Version)
    reason: str = ""


@dataclass(slots=True)
class ClientHeartbeat:
    cpu: float = 0.0
    rss_bytes: int = 0
    pending_tasks: int = 0
    report_tasks: bool = False  # 1.8: send me the runs of my tasks
    functions: List[Counter] = field(default_factory=list)  # 1.8: its tasks not done, per function


def _equals(column: array, other: object) -> bool:
    """A column equals an array of the same numbers, and the list of its numbers."""
    if isinstance(other, list):
        return column.tolist() == other
    return array.__eq__(column, other)


def _differs(column: array, other: object) -> bool:
    equal = _equals(column, other)
    return equal if equal is NotImplemented else not equal


class UInt32s(array):
    """A column of unsigned 32-bit integers, sent as a packed array (a Data field of the schema)."""

    __slots__ = ()
    __eq__ = _equals  # type: ignore[assignment]
    __ne__ = _differs  # type: ignore[assignment]

    def __new__(cls, values: Iterable[int] = ()) -> UInt32s:
        return super().__new__(cls, "I", values)  # type: ignore[call-arg, return-value]


class Float64s(array):
    """A column of 64-bit floats, sent as a packed array (a Data field of the schema)."""

    __slots__ = ()
    __eq__ = _equals  # type: ignore[assignment]
    __ne__ = _differs  # type: ignore[assignment]

    def __new__(cls, values: Iterable[float] = ()) -> Float64s:
        return super().__new__(cls, "d", values)  # type: ignore[call-arg, return-value]


assert UInt32s().itemsize == 4 and Float64s().itemsize == 8, "the packed columns need 4-byte I and 8-byte d"


@dataclass(slots=True)
class TaskRuns:
    """Task runs as columns (1.8): one entry per run in ``task_ids`` and each column after it (schema: TaskRuns).
    The columns of numbers are `UInt32s` and `Float64s` (lists given for them are made such)."""

    function_names: List[str] = field(default_factory=list)
    client_ids: List[bytes] = field(default_factory=list)
    worker_ids: List[bytes] = field(default_factory=list)
    task_ids: List[bytes] = field(default_factory=list)
    functions: UInt32s = field(default_factory=UInt32s)
    clients: UInt32s = field(default_factory=UInt32s)
    workers: UInt32s = field(default_factory=UInt32s)
    queued_seconds: Float64s = field(default_factory=Float64s)
    run_seconds: Float64s = field(default_factory=Float64s)
    ended_seconds_ago: Float64s = field(default_factory=Float64s)
    failed_runs: List[int] = field(default_factory=list)
    failed_statuses: List[TaskStatus] = field(default_factory=list)
    error_texts: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, column in _PACKED_COLUMNS:
            values = getattr(self, name)
            if type(values) is not column:
                setattr(self, name, column(values))


_PACKED_COLUMNS = (
    ("functions", UInt32s), ("clients", UInt32s), ("workers", UInt32s), ("queued_seconds", Float64s),
    ("run_seconds", Float64s), ("ended_seconds_ago", Float64s),
)  # fmt: skip


@dataclass(slots=True)
class ClientHeartbeatEcho:
    record_tasks: bool = False  # 1.8: a monitor watches: say your tasks per function
    task_runs: TaskRuns = field(default_factory=TaskRuns)  # 1.8: for a client that reports


@dataclass(slots=True)
class WorkerHeartbeat:
    agent_cpu: float = 0.0
    agent_rss_bytes: int = 0
    processor_cpu: float = 0.0
    processor_rss_bytes: int = 0
    queued_tasks: int = 0
    running_tasks: int = 0
    suspended_tasks: int = 0
    functions: List[FunctionStats] = field(default_factory=list)
    last_batch: int = 0  # 1.3: the sequence of the last TaskBatch received
    held_tasks: int = 0  # 1.3: tasks held, in any state
    held_digest: int = 0  # 1.3: digest of their IDs (scaler.protocol.held_tasks)
    held_task_ids: List[bytes] = field(default_factory=list)  # 1.3: only when the echo asked for them
    ended_runs: TaskRuns = field(default_factory=TaskRuns)  # 1.8, while the scheduler records task runs
    current_runs: TaskRuns = field(default_factory=TaskRuns)  # 1.8, idem
    memory_limit_bytes: int = 0  # 1.8: the worker's memory limit, 0: none
    memory_kills: int = 0  # 1.8: tasks stopped for going past it, since the worker started
    memory_killed: List[MemoryKill] = field(default_factory=list)  # 1.8: those since the last heartbeat


@dataclass(slots=True)
class MemoryKill:
    task_id: bytes = b""
    function: str = ""  # module.qualname
    memory_bytes: int = 0  # what its processor reached; 0: unknown
    refused: bool = False  # an allocation past the limit was refused (the processor went on)


@dataclass(slots=True)
class FunctionStats:
    name: str = ""
    succeeded: int = 0
    failed: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class WorkerHeartbeatEcho:
    send_task_ids: bool = False  # 1.3: answer at once with a heartbeat listing held_task_ids
    record_tasks: bool = False  # 1.8: send task runs in the heartbeats


@dataclass(slots=True)
class Argument:
    name: str = ""
    kind: ArgumentKind = ArgumentKind.INLINE
    data: bytes = b""


@dataclass(slots=True)
class Task:
    task_id: bytes = b""
    client_id: bytes = b""
    function_id: bytes = b""
    arguments: List[Argument] = field(default_factory=list)
    priority: int = 0
    capabilities: List[Capability] = field(default_factory=list)
    attempt: int = 0
    timeout_seconds: float = 0.0
    retries: int = 0
    profiling: bool = False
    serializer_id: bytes = b""
    store_result: bool = False
    stream_output: bool = False
    scope_id: bytes = b""  # 1.8, set by the scheduler: the client whose objects the task reads; b"": client_id
    queued_seconds: float = 0.0  # 1.8: how long it waited in the scheduler (set while it records task runs)

    @property
    def dependencies(self) -> Sequence[Tuple[int, bytes]]:
        """The tasks whose results it takes: (position of the argument, task ID), for each argument of kind task
        (as `routed.RoutedTask` reads them)."""
        return [(i, a.data) for i, a in enumerate(self.arguments) if a.kind == ArgumentKind.TASK] or ()


@dataclass(slots=True)
class TaskBatch:
    tasks: List[Task] = field(default_factory=list)
    sequence: int = 0  # 1.3: scheduler -> worker, 1, 2, ... per worker; 0 from clients


@dataclass(slots=True)
class Profiling:
    duration_seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0

    # The earlier engine's names of the same values (its ProfileResult; docs/compatibility.md).
    duration_s = property(lambda self: self.duration_seconds)
    cpu_time_s = property(lambda self: self.cpu_seconds)
    memory_peak = property(lambda self: self.peak_memory_bytes)


@dataclass(slots=True)
class TaskResult:
    task_id: bytes = b""
    attempt: int = 0
    status: TaskStatus = TaskStatus.SUCCESS
    payload_kind: PayloadKind = PayloadKind.NONE
    payload: bytes = b""
    error_text: str = ""
    profiling: Profiling = field(default_factory=Profiling)


@dataclass(slots=True)
class TaskResultBatch:
    results: List[TaskResult] = field(default_factory=list)


@dataclass(slots=True)
class TaskCancel:
    task_ids: List[bytes] = field(default_factory=list)


@dataclass(slots=True)
class TaskCancelConfirm:
    task_ids: List[bytes] = field(default_factory=list)
    cancelled: List[bool] = field(default_factory=list)


@dataclass(slots=True)
class GraphTask:
    graph_id: bytes = b""
    tasks: List[Task] = field(default_factory=list)
    targets: List[bytes] = field(default_factory=list)
    more: bool = False  # further parts of this graph follow (protocol 1.7)
    again: bool = False  # 1.8: the first part of a graph sent again after a reconnect


@dataclass(slots=True)
class ObjectRequest:
    request_id: int = 0
    kind: ObjectRequestKind = ObjectRequestKind.GET
    owner_id: bytes = b""
    object_ids: List[bytes] = field(default_factory=list)
    frame_counts: List[int] = field(default_factory=list)  # put: frames per object; empty: one each
    scope_id: bytes = b""  # 1.8, admit: the client whose objects owner_id's tasks read; b"": owner_id


@dataclass(slots=True)
class ObjectSummary:
    largest_ids: List[bytes] = field(default_factory=list)
    largest_owners: List[bytes] = field(default_factory=list)
    largest_sizes: List[int] = field(default_factory=list)
    largest_spilled: List[bool] = field(default_factory=list)  # whether each is spilled to disk
    memory_bytes: int = 0  # of every object in memory
    spilled_bytes: int = 0  # of every object spilled to disk


@dataclass(slots=True)
class ObjectResponse:
    request_id: int = 0
    kind: ObjectRequestKind = ObjectRequestKind.GET
    object_ids: List[bytes] = field(default_factory=list)
    statuses: List[ObjectStatus] = field(default_factory=list)
    sizes: List[int] = field(default_factory=list)
    reason: str = ""
    frame_counts: List[int] = field(default_factory=list)  # get: frames per found object; empty: one each
    summary: ObjectSummary = field(default_factory=ObjectSummary)  # 1.8: the answer to a summary
    spilled_sizes: List[int] = field(default_factory=list)  # 1.8, usage: of sizes[i], the bytes on disk


@dataclass(slots=True)
class ObjectInstruction:
    kind: ObjectInstructionKind = ObjectInstructionKind.CREATE
    owner_id: bytes = b""
    object_ids: List[bytes] = field(default_factory=list)


@dataclass(slots=True)
class DisconnectRequest:
    reason: str = ""


@dataclass(slots=True)
class DisconnectResponse:
    pass


@dataclass(slots=True)
class ClientShutdownRequest:
    pass


@dataclass(slots=True)
class ClientShutdownResponse:
    accepted: bool = False
    reason: str = ""


@dataclass(slots=True)
class BalanceRequest:
    count: int = 0


@dataclass(slots=True)
class BalanceResponse:
    task_ids: List[bytes] = field(default_factory=list)


@dataclass(slots=True)
class WorkerSnapshot:
    worker_id: bytes = b""
    heartbeat: WorkerHeartbeat = field(default_factory=WorkerHeartbeat)
    slots: int = 0
    assigned_tasks: int = 0
    capabilities: List[Capability] = field(default_factory=list)
    last_seen_seconds_ago: float = 0.0
    group_id: bytes = b""  # 1.6: its worker group
    draining: bool = False  # 1.6: its group is being drained: it takes no new task


@dataclass(slots=True)
class ClientSnapshot:
    client_id: bytes = b""
    heartbeat: ClientHeartbeat = field(default_factory=ClientHeartbeat)
    tasks: int = 0
    last_seen_seconds_ago: float = 0.0
    stored_bytes: int = 0  # 1.8: of the objects it owns in the storage server
    spilled_bytes: int = 0  # 1.8: of those, the bytes spilled to disk


@dataclass(slots=True)
class Counter:
    name: str = ""
    value: int = 0


@dataclass(slots=True)
class StateSnapshot:
    scheduler_cpu: float = 0.0
    scheduler_rss_bytes: int = 0
    task_states: List[Counter] = field(default_factory=list)
    messages_sent: List[Counter] = field(default_factory=list)
    messages_received: List[Counter] = field(default_factory=list)
    workers: List[WorkerSnapshot] = field(default_factory=list)
    clients: int = 0
    objects: int = 0
    client_snapshots: List[ClientSnapshot] = field(default_factory=list)
    managers: List[ManagerSnapshot] = field(default_factory=list)  # 1.6
    client_task_quota: int = 0  # 1.8: the tasks a client may have queued at the scheduler (--max-client-tasks)
    client_memory_quota: int = 0  # 1.8: the bytes an owner may hold in storage (its --max-client-memory)
    events: List[MonitorEvent] = field(default_factory=list)  # 1.8
    object_summary: ObjectSummary = field(default_factory=ObjectSummary)  # 1.8


@dataclass(slots=True)
class MonitorEvent:
    seconds_ago: float = 0.0
    kind: str = ""
    subject: bytes = b""
    text: str = ""


@dataclass(slots=True)
class WorkerGroup:
    group_id: bytes = b""
    state: WorkerGroupState = WorkerGroupState.STARTING
    workers: int = 0
    detail: str = ""


@dataclass(slots=True)
class WorkerManagerHeartbeat:
    max_workers: int = 0
    running_workers: int = 0
    workers_per_group: int = 0  # 1.6, and the fields below
    min_groups: int = 0
    max_groups: int = 0
    capabilities: List[Capability] = field(default_factory=list)
    groups: List[WorkerGroup] = field(default_factory=list)
    kind: str = ""


@dataclass(slots=True)
class ManagerSnapshot:
    manager_id: bytes = b""
    heartbeat: WorkerManagerHeartbeat = field(default_factory=WorkerManagerHeartbeat)
    desired_groups: int = 0
    draining_groups: List[bytes] = field(default_factory=list)
    last_seen_seconds_ago: float = 0.0


@dataclass(slots=True)
class WorkerManagerCommand:
    kind: WorkerManagerCommandKind = WorkerManagerCommandKind.START_WORKERS  # kind, count, worker_ids: unused
    count: int = 0
    worker_ids: List[bytes] = field(default_factory=list)
    desired_groups: int = 0  # 1.6: groups it should have, retiring and stopping ones aside
    stop_groups: List[bytes] = field(default_factory=list)  # 1.6: drained groups to stop now


@dataclass(slots=True)
class WaitingTasks:
    task_ids: List[bytes] = field(default_factory=list)
    waiting: List[bool] = field(default_factory=list)


@dataclass(slots=True)
class SchedulerInfoRequest:
    pass


@dataclass(slots=True)
class SchedulerInfo:
    snapshot: StateSnapshot = field(default_factory=StateSnapshot)  # of the clients, only the one that asked
    monitor_address: str = ""
    dashboard_link: str = ""  # the web monitor's page, when the scheduler was told of one


# calls on every worker (1.8), in a module of their own; WorkerCallKind for their fields' type hints
from scaler.protocol.worker_call_messages import (  # noqa: E402, F401
    WorkerCall,
    WorkerCallAnswer,
    WorkerCallKind,
    WorkerCallResult,
)


# The members of the `Message` union, in schema order.
class OutputStream(enum.IntEnum):
    STDOUT = 0
    STDERR = 1


@dataclass(slots=True)
class TaskOutput:
    task_id: bytes = b""
    client_id: bytes = b""
    stream: OutputStream = OutputStream.STDOUT
    text: str = ""


@dataclass(slots=True)
class TaskOutputBatch:
    outputs: List[TaskOutput] = field(default_factory=list)


MESSAGE_TYPES = (
    Hello,
    HelloAck,
    Refusal,
    ClientHeartbeat,
    ClientHeartbeatEcho,
    WorkerHeartbeat,
    WorkerHeartbeatEcho,
    TaskBatch,
    TaskResultBatch,
    TaskCancel,
    TaskCancelConfirm,
    GraphTask,
    ObjectRequest,
    ObjectResponse,
    ObjectInstruction,
    DisconnectRequest,
    DisconnectResponse,
    ClientShutdownRequest,
    ClientShutdownResponse,
    BalanceRequest,
    BalanceResponse,
    StateSnapshot,
    WorkerManagerHeartbeat,
    WorkerManagerCommand,
    TaskOutputBatch,
    WaitingTasks,
    SchedulerInfoRequest,
    SchedulerInfo,
    WorkerCall,
    WorkerCallResult,
    WorkerCallAnswer,
)
