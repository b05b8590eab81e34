"""Large messages taken a slice at a time, and each peer's messages kept in order behind its own (sans-I/O).

Read and handled whole, one message of 100,000 tasks (a `TaskBatch`, a `GraphTask`, a worker's
`TaskResultBatch`) would keep the scheduler from every other peer for seconds: their heartbeats unanswered,
their tasks and results waiting, its clock stopped. So the core takes every such message `SLICE` items at a
time (`routed.ReceivedItems.read` reads each item only then): the first slice when the message comes, each
next one when the shell hands the core `Continue`, which the shell does after reading every socket once more
(the other peers' messages are handled in between) for as long as the core asks for it (`MoreToDo`). The
peers whose messages wait take turns, one slice each.

Until a peer's message is taken whole, what that peer sends next waits behind it, in order: a cancel comes
after the tasks it cancels, a heartbeat's echo after everything the peer sent before it (a client's `clear`
counts on that). The peer counts as heard meanwhile: each message when it arrives (`SchedulerCore._handle`).

A `GraphTask`'s slices join its graph as the parts of a graph sent in parts do (`graph_tasks.py`), so a node
may name only nodes before it in the message (or in its own slice, or of earlier parts): the order in which
every Scaler client sends them. A slice that is wrong (a node that names a node not before it, a node that
cannot be read) rejects the whole graph, as a wrong part does, and the rest of the message is dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import messages as m
from scaler.protocol.codec import DamagedTask
from scaler.protocol.ids import show
from scaler.protocol.routed import ReceivedItems
from scaler.scheduler.graph_record import GraphActions
from scaler.scheduler.graph_tasks import GraphTasks
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.task_routing import TaskRouting

SLICE = 2_000  # items (tasks, graph nodes, results) taken at once: tens of milliseconds

logger = logging.getLogger(__name__)

PeerHandler = Callable[[bytes, Any, float, Outbox], None]


def read_slice(items: Sequence[Any], start: int, stop: int) -> Tuple[List[Any], List[DamagedTask]]:
    """Items ``start`` to ``stop`` of a message's list: those that can be read, and what is wrong with the others
    (a message built here, not received, holds a plain list)."""
    if type(items) is ReceivedItems:
        return items.read(start, stop)
    return list(items[start:stop]), []


class MessageSlices:
    """The peers' messages that wait, and how each large message is taken a slice at a time.

    ``handlers_of(peer)``: the handlers of a peer's messages, by type (None once the peer is gone);
    ``apply_graph(client, actions, now, out)``: carries out what the graph layer decided."""

    def __init__(
        self,
        routing: TaskRouting,
        graphs: GraphTasks,
        handlers_of: Callable[[bytes], Optional[Dict[type, PeerHandler]]],
        apply_graph: Callable[[bytes, GraphActions, float, Outbox], None],
    ) -> None:
        self._routing = routing
        self._graphs = graphs
        self._handlers_of = handlers_of
        self._apply_graph = apply_graph
        self._waiting: Dict[bytes, Deque[Tuple[Any, int]]] = {}  # peer -> (message, its next item), in order
        self._turns: Deque[bytes] = deque()  # the peers with messages waiting, in the order they take turns
        self._takers: Dict[type, Callable[[bytes, Any, int, int, float, Outbox], int]] = {
            m.TaskBatch: self._take_tasks,
            m.GraphTask: self._take_graph,
            m.TaskResultBatch: self._take_results,
        }

    def __bool__(self) -> bool:
        return bool(self._turns)

    def waits(self, peer_id: bytes) -> bool:
        """Whether messages of ``peer_id`` wait: its next one must wait behind them (`put`)."""
        return peer_id in self._waiting

    def put(self, peer_id: bytes, message: Any) -> None:
        """``message`` of ``peer_id`` waits behind the others it sent."""
        self._line(peer_id).append((message, 0))

    def forget(self, peer_id: bytes) -> None:
        """The peer is gone: what it sent that waits is dropped."""
        if self._waiting.pop(peer_id, None) is not None:
            self._turns.remove(peer_id)

    def take(self, peer_id: bytes, message: Any, now: float, out: Outbox) -> None:
        """A `TaskBatch`, `GraphTask` or `TaskResultBatch` that came (a `SchedulerCore` handler): its first slice
        now, the rest in turn."""
        self._take_from(peer_id, message, 0, now, out)

    def take_turns(self, now: float, out: Outbox) -> None:
        """One slice's worth of what waits: the next peers in turn, each its next message or slice."""
        budget = SLICE
        while budget > 0 and self._turns:
            peer_id = self._turns.popleft()
            line = self._waiting[peer_id]
            message, start = line.popleft()
            if line:
                self._turns.append(peer_id)
            else:
                del self._waiting[peer_id]
            handlers = self._handlers_of(peer_id)
            if handlers is None:  # gone meanwhile
                self.forget(peer_id)
                continue
            try:
                if type(message) in self._takers:
                    budget -= self._take_from(peer_id, message, start, now, out)
                else:
                    handlers[type(message)](peer_id, message, now, out)
                    budget -= 1
            except Exception:  # noqa: BLE001 - one bad message must not stop what waits behind it
                logger.exception(f"Scheduler: failed to handle {type(message).__name__} from {show(peer_id)}")

    # ----------------------------------------------------------------- slices

    def _take_from(self, peer_id: bytes, message: Any, start: int, now: float, out: Outbox) -> int:
        """Items ``start``.. of ``message``, one slice; the rest waits first in the peer's line. How many taken."""
        count = len(message.results if type(message) is m.TaskResultBatch else message.tasks)
        stop = min(start + SLICE, count)
        end = self._takers[type(message)](peer_id, message, start, stop, now, out)
        if end < count:
            self._line(peer_id).appendleft((message, end))
        return max(1, stop - start)

    def _take_tasks(self, peer_id: bytes, batch: m.TaskBatch, start: int, stop: int, now: float, out: Outbox) -> int:
        tasks, damaged = read_slice(batch.tasks, start, stop)
        self._routing.on_client_batch(peer_id, m.TaskBatch(tasks, batch.sequence), now, out)
        if damaged:  # the rest of the batch runs; each of these is refused to its client, saying what is wrong
            self._routing.reject_damaged(peer_id, damaged, out)
        return stop

    def _take_results(
        self, peer_id: bytes, batch: m.TaskResultBatch, start: int, stop: int, now: float, out: Outbox
    ) -> int:
        results, damaged = read_slice(batch.results, start, stop)
        self._routing.on_results(peer_id, m.TaskResultBatch(results), now, out)
        if damaged:  # their tasks run again once the worker's heartbeat says it no longer holds them
            logger.warning(
                f"Scheduler: dropped {len(damaged)} result(s) from worker {show(peer_id)} that cannot be read; "
                f"first, of task {show(damaged[0].task_id)}: {damaged[0].reason}"
            )
        return stop

    def _take_graph(self, peer_id: bytes, graph: m.GraphTask, start: int, stop: int, now: float, out: Outbox) -> int:
        nodes, damaged = read_slice(graph.tasks, start, stop)
        count = len(graph.tasks)
        first = start == 0
        part = m.GraphTask(graph.graph_id, nodes, graph.targets if first else [], graph.more or stop < count,
                           graph.again and first)  # fmt: skip
        problem = f"task {show(damaged[0].task_id)} cannot be read: {damaged[0].reason}" if damaged else None
        known = self._routing.knows
        if graph.again:  # sent again after a reconnect: its client's own tasks are its nodes, released before
            routing = self._routing
            known = lambda task_id: routing.knows_for_another(task_id, peer_id)  # noqa: E731
        self._apply_graph(peer_id, self._graphs.submit(peer_id, part, known, problem), now, out)
        if stop < count and not self._graphs.is_open(graph.graph_id, peer_id):  # rejected: the rest is not read
            return count
        return stop

    def _line(self, peer_id: bytes) -> Deque[Tuple[Any, int]]:
        line = self._waiting.get(peer_id)
        if line is None:
            line = self._waiting[peer_id] = deque()
            self._turns.append(peer_id)
        return line
