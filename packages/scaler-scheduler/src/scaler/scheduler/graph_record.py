"""What the scheduler keeps of one task graph (`Graph`), what it decides to do (`GraphActions`), and the
checks a graph, or a part of one, must pass (`graph_problem`); `graph_tasks.GraphTasks` makes the decisions."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.scheduler.graph_index import GraphIndex
from scaler.scheduler.graph_node_lifecycle import NodeEvent

_HISTORY_LENGTH = 8  # events kept per graph, for the error of an event a node has no transition for


@dataclass
class GraphActions:
    """What the scheduler must do for one client after a graph decision."""

    release: List[Any] = field(default_factory=list)  # routed.RoutedTask: queue as if the client had submitted them
    cancel: List[bytes] = field(default_factory=list)  # released nodes to cancel (confirms come back here)
    results: List[m.TaskResult] = field(default_factory=list)  # to the client
    confirm_ids: List[bytes] = field(default_factory=list)  # TaskCancelConfirm to the client
    confirm_flags: List[bool] = field(default_factory=list)
    deletes: List[bytes] = field(default_factory=list)  # result objects to delete (owner: the client)
    kept: List[m.TaskResult] = field(default_factory=list)  # results of nodes not released (yet): kept for them

    def __bool__(self) -> bool:
        return bool(self.release or self.cancel or self.results or self.confirm_ids or self.deletes or self.kept)


class Graph:
    """One graph of one client in the scheduler: its nodes' states, what it holds, its index."""

    __slots__ = (
        "graph_id", "client_id", "task_ids", "positions", "tasks", "state", "target", "wanted", "wanted_count",
        "results", "index", "in_flight", "finished", "history", "open", "failures", "awaited",
    )  # fmt: skip

    def __init__(self, graph_id: bytes, client_id: bytes, index: GraphIndex, open: bool) -> None:
        self.graph_id = graph_id
        self.client_id = client_id
        self.task_ids: List[bytes] = []
        self.positions: Dict[bytes, int] = {}  # task ID -> its node
        self.tasks: List[Optional[Any]] = []  # routed.RoutedTask; None once released or finished
        self.state = bytearray()  # each node's state, as its position in NODE_STATES (PENDING is 0)
        self.target = bytearray()
        self.wanted = bytearray()  # a target whose result the client still waits for
        self.wanted_count = 0
        self.results: Dict[int, Any] = {}  # successes held for the nodes that need them (m.TaskResult, HeldPayload)
        self.index = index
        self.in_flight = 0  # released and not returned
        self.finished = 0
        self.history: Deque[Tuple[int, NodeEvent]] = deque(maxlen=_HISTORY_LENGTH)  # (node, event), any node
        self.open = open  # more parts may come: nothing is freed, cancelled or found stuck until the last
        self.failures: Dict[int, Any] = {}  # while open: each failed node's failure, for nodes still to come
        self.awaited: Set[bytes] = set()  # targets the first part named that no part has brought yet

    @property
    def done(self) -> bool:
        return self.finished == len(self.task_ids) and not self.results and not self.open


def graph_problem(
    message: m.GraphTask,
    positions: Dict[bytes, int],
    earlier: Optional[Dict[bytes, int]],
    known: Callable[[bytes], bool],
    live: Callable[[bytes], bool],
) -> Optional[str]:
    """What is wrong with a graph, or a later part of one (``earlier``: the nodes of its earlier parts; None for
    a first part); ``known`` and ``live`` tell whether a task ID is the scheduler's or a live graph's."""
    later = earlier is not None
    earlier = earlier or {}
    tasks: List[Any] = message.tasks  # routed.RoutedTask
    if len(positions) < len(tasks):
        seen: Set[bytes] = set()
        for task in tasks:
            if task.task_id in seen:
                return f"task {show(task.task_id)} appears twice"
            seen.add(task.task_id)
    for task in tasks:
        if known(task.task_id) or live(task.task_id):
            return f"task {show(task.task_id)} is already known to the scheduler"
    for task in tasks:
        for _, needed in task.dependencies:
            if needed == task.task_id:
                return f"task {show(task.task_id)} needs its own result"
            if needed not in positions and needed not in earlier:
                return (
                    f"task {show(task.task_id)} needs task {show(needed)}, which is not in the graph (not in its "
                    "part, nor in an earlier part)"
                )
    if later and message.targets:
        return "a later part names targets: a graph's targets come with its first part"
    if not message.more:  # a target a later part may bring is checked when the last part comes
        for target in message.targets:
            if target not in positions:
                return f"target {show(target)} is not a task of the graph"
    return None


class HeldPayload:
    """What the nodes that need a successful node's result take from it."""

    __slots__ = ("payload_kind", "payload")
    status = m.TaskStatus.SUCCESS

    def __init__(self, payload_kind: m.PayloadKind, payload: bytes) -> None:
        self.payload_kind = payload_kind
        self.payload = payload


def whole_result(result: Any) -> Any:
    """A result as a `m.TaskResult` of its own, copied out of the message it came in (`routed.RoutedResult`)."""
    to_result = getattr(result, "to_result", None)
    return to_result() if to_result is not None else result


def unwant(graph: Graph, i: int) -> None:
    if graph.wanted[i]:
        graph.wanted[i] = 0
        graph.wanted_count -= 1


def rejected_result(task_id: bytes, reason: str) -> m.TaskResult:
    return m.TaskResult(task_id, 0, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", reason)


def drop_result(result: Any, actions: GraphActions) -> None:
    """A result nobody will read: delete its object, if it has one."""
    if result.status == m.TaskStatus.SUCCESS and result.payload_kind == m.PayloadKind.OBJECT and result.payload:
        actions.deletes.append(result.payload)
