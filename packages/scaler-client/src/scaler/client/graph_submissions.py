"""Graphs in the client's core: each leaves as one GraphTask, or in parts, each part once its objects are stored.

A graph's targets (the tasks whose results the user asked for) are tasks of `TasksInFlight`, following the
same table: named by the first part's `SubmitGraph`, they are storing until the first part leaves with them.
The parts leave in order: a part waits for its objects (functions, large literals, templates) and for the
parts before it. The graph is forgotten when its last target ends (its temporary objects are then deleted);
if that happens before its last part left (its targets cancelled, or an object a part needs failed to
store), an empty last part closes what the scheduler holds of it, and its other parts are dropped. A target
cancelled before the first part leaves is left out of it. A part larger than the scheduler takes (its
``maxMessageSize``) leaves as several; a node that cannot fit in any message fails the graph.

The parts sent are kept until the graph is forgotten: when the scheduler answers again after the connection
was lost (it restarted, or the network failed), each graph goes again (`resend`), its first part marked
``again`` and naming only the targets still waited for; the scheduler drops what it held of the graph and
runs what those targets need (docs/graphs.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Sequence

from scaler.client.client_events import Effect, SubmitGraph, ToScheduler
from scaler.client.client_lifecycles import TaskEvent, TaskState
from scaler.client.storage_requests import PUTTING, StorageRequests
from scaler.protocol.ids import show
from scaler.protocol.message_limits import batches, task_size
from scaler.protocol.messages import GraphTask

if TYPE_CHECKING:
    from scaler.client.tasks_in_flight import TasksInFlight


@dataclass(slots=True)
class _Part:
    message: GraphTask
    missing: int = 0  # objects it waits for


@dataclass(slots=True)
class _GraphRecord:
    targets: Sequence[bytes]
    targets_left: int
    parts: Deque[_Part] = field(default_factory=deque)  # submitted, not sent yet, in order
    sent: List[GraphTask] = field(default_factory=list)  # the parts sent, in order (to send them again)
    temporary_objects: List[bytes] = field(default_factory=list)
    function_ids: List[bytes] = field(default_factory=list)
    sent_any: bool = False  # the scheduler holds a part of it
    closed: bool = False  # its last part was sent


class GraphSubmissions:
    def __init__(self, tasks: TasksInFlight, storage: StorageRequests, out: List[Effect]) -> None:
        self._tasks = tasks
        self._storage = storage
        self._out = out
        self._graphs: Dict[bytes, _GraphRecord] = {}  # graph ID -> graph whose targets have not all ended
        self.targets: Dict[bytes, bytes] = {}  # target task ID -> graph ID
        self.waiting: Dict[bytes, List[_Part]] = {}  # object ID -> parts waiting for its put acknowledgement

    def submit(self, event: SubmitGraph, now: float) -> None:
        tasks, storage, graph_id = self._tasks, self._storage, event.graph.graph_id
        record = self._graphs.get(graph_id)
        if record is None:
            if not event.targets:
                return  # a later part of a graph whose targets all ended: it is not sent
            record = _GraphRecord(event.targets, len(event.targets))
            for target in event.targets:
                tasks.step(target, tasks.add_target(target), TaskEvent.STORE)  # until the first part leaves
                self.targets[target] = graph_id
            self._graphs[graph_id] = record
        error = storage.error if event.puts else None
        for object_id in event.requires if error is None else ():
            state = storage.objects.get(object_id)
            if state is not None and state is not PUTTING:  # the put of an object it needs failed
                error = state
                break
        if error is not None:
            self._fail(record, error)
            return
        for object_id, data in event.puts:
            storage.put(object_id, data)
        record.temporary_objects.extend(event.temporary_objects)
        record.function_ids.extend(event.function_ids)
        for function_id in event.function_ids:
            tasks.function_users[function_id] = tasks.function_users.get(function_id, 0) + 1
        part = _Part(event.graph)
        for object_id in event.requires:
            if storage.objects.get(object_id) is PUTTING:
                part.missing += 1
                self.waiting.setdefault(object_id, []).append(part)
        record.parts.append(part)
        self._send_ready(record)

    def object_stored(self, object_id: bytes) -> None:
        for part in self.waiting.pop(object_id, ()):
            part.missing -= 1
            record = self._graphs.get(part.message.graph_id)
            if record is not None:  # else every target ended meanwhile
                self._send_ready(record)

    def object_failed(self, object_id: bytes, error: Exception) -> None:
        for part in self.waiting.pop(object_id, ()):
            record = self._graphs.get(part.message.graph_id)
            if record is not None:  # else every target ended meanwhile
                self._fail(record, error)

    def target_ended(self, target: bytes, delete_objects: bool) -> None:
        graph_id = self.targets.pop(target, None)
        if graph_id is None:
            return
        graph = self._graphs.get(graph_id)
        if graph is None:
            return
        graph.targets_left -= 1
        if graph.targets_left > 0:
            return
        del self._graphs[graph_id]
        if graph.sent_any and not graph.closed:  # the scheduler holds an open graph: closed with no target
            self._out.append(ToScheduler(GraphTask(graph_id=graph_id, more=False)))
        if delete_objects:
            self._storage.delete(graph.temporary_objects)
        users = self._tasks.function_users
        for function_id in graph.function_ids:
            count = users.pop(function_id, 1) - 1
            if count > 0:
                users[function_id] = count

    def resend(self) -> int:
        """The scheduler answered again after the connection was lost: each graph it may hold goes again (the
        first part marked ``again``, with the targets still waited for), then the parts not sent yet, as their
        objects are stored. A graph whose targets are no longer waited for at the scheduler (their results are
        being read) goes no further. Returns how many graphs went again."""
        tasks, count = self._tasks, 0
        for graph in self._graphs.values():
            if not graph.sent:
                continue
            targets = [target for target in graph.targets if _waited_for(tasks.record(target))]
            if not targets:
                graph.parts.clear()
                continue
            count += 1
            for position, part in enumerate(graph.sent):
                first = position == 0
                message = GraphTask(part.graph_id, part.tasks, targets if first else [], part.more, again=first)
                runs, _ = batches(message.tasks, task_size, tasks.message_budget, len(message.tasks) + 1)
                self._emit(message, runs)
            self._send_ready(graph)
        return count

    def clear(self) -> None:
        self._graphs.clear()
        self.targets.clear()
        self.waiting.clear()

    def _fail(self, graph: _GraphRecord, error: Exception) -> None:
        tasks = self._tasks
        for target in graph.targets:
            record = tasks.record(target)
            if record is not None:
                tasks.step(target, record, TaskEvent.FAIL, error)

    def _send_ready(self, graph: _GraphRecord) -> None:
        """Send the parts whose objects are stored, in order; the first without the targets cancelled meanwhile.
        A part larger than the scheduler takes leaves as several (``more``); a node that alone is larger fails
        the graph."""
        tasks, parts = self._tasks, graph.parts
        while parts and parts[0].missing == 0:
            message = parts.popleft().message
            runs, too_large = batches(message.tasks, task_size, tasks.message_budget, len(message.tasks) + 1)
            if too_large:
                node, size = too_large[0]
                self._fail(graph, tasks.too_large(f"graph node task {show(node.task_id)}", size))
                return
            if not graph.sent_any:
                message.targets = [target for target in message.targets if tasks.record(target) is not None]
                if not message.targets:
                    return  # every target ended: the graph is forgotten
                for target in message.targets:
                    tasks.step(target, tasks.record(target), TaskEvent.SENT_IN_GRAPH)  # type: ignore[arg-type]
                graph.sent_any = True
            graph.closed = not message.more
            if tasks.keeps_sent:
                graph.sent.append(message)
            self._emit(message, runs)

    def _emit(self, message: GraphTask, runs: List[List[Any]]) -> None:
        """A part, in several messages if one is larger than the scheduler takes (``runs``: its nodes in each)."""
        if len(runs) < 2:
            self._out.append(ToScheduler(message))
            return
        for position, run in enumerate(runs):
            more = message.more or position < len(runs) - 1
            first = position == 0
            targets = message.targets if first else []
            self._out.append(ToScheduler(GraphTask(message.graph_id, run, targets, more, message.again and first)))


def _waited_for(record: Any) -> bool:
    """Whether a target's result is still to come from the scheduler."""
    return record is not None and record.state is TaskState.SENT
