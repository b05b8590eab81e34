"""Graphs in the client's core: each is sent whole, as one GraphTask, once its objects are stored.

A graph's targets (the tasks whose results the user asked for) are tasks of `TasksInFlight`, following the
same table; the graph itself only waits for its objects (functions, large literals, templates), then
leaves, and is forgotten when its last target ends (its temporary objects are then deleted). A target
cancelled before its graph leaves is left out of the GraphTask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from scaler.client.client_events import Effect, SubmitGraph, ToScheduler
from scaler.client.client_lifecycles import TaskEvent
from scaler.client.storage_requests import PUTTING, StorageRequests
from scaler.protocol.messages import GraphTask

if TYPE_CHECKING:
    from scaler.client.tasks_in_flight import TasksInFlight


@dataclass(slots=True)
class _GraphRecord:
    message: Optional[GraphTask]  # dropped once sent: a graph of 100,000 tasks is large
    temporary_objects: Sequence[bytes]
    function_ids: Sequence[bytes]
    targets_left: int
    missing: int = 0  # objects it waits for


class GraphSubmissions:
    def __init__(self, tasks: TasksInFlight, storage: StorageRequests, out: List[Effect]) -> None:
        self._tasks = tasks
        self._storage = storage
        self._out = out
        self._graphs: Dict[bytes, _GraphRecord] = {}  # graph ID -> graph whose targets have not all ended
        self.targets: Dict[bytes, bytes] = {}  # target task ID -> graph ID
        self.waiting: Dict[bytes, List[bytes]] = {}  # object ID -> graphs waiting for its put acknowledgement

    def submit(self, event: SubmitGraph, now: float) -> None:
        tasks, storage, graph = self._tasks, self._storage, event.graph
        targets = [(target, tasks.add_target(target)) for target in graph.targets]
        error = storage.error if event.puts else None
        for object_id in event.requires if error is None else ():
            state = storage.objects.get(object_id)
            if state is not None and state is not PUTTING:  # the put of an object it needs failed
                error = state
                break
        if error is not None:
            for target, target_record in targets:
                tasks.step(target, target_record, TaskEvent.FAIL, error)
            return
        for object_id, data in event.puts:
            storage.put(object_id, data)
        graph_id = graph.graph_id
        record = _GraphRecord(graph, event.temporary_objects, event.function_ids, len(targets))
        self._graphs[graph_id] = record
        for target, _ in targets:
            self.targets[target] = graph_id
        for function_id in event.function_ids:
            tasks.function_users[function_id] = tasks.function_users.get(function_id, 0) + 1
        for object_id in event.requires:
            if storage.objects.get(object_id) is PUTTING:
                record.missing += 1
                self.waiting.setdefault(object_id, []).append(graph_id)
        if record.missing:
            for target, target_record in targets:
                tasks.step(target, target_record, TaskEvent.STORE)
        else:
            self._send(record)

    def object_stored(self, object_id: bytes) -> None:
        for graph_id in self.waiting.pop(object_id, ()):
            graph = self._graphs.get(graph_id)
            if graph is None:  # every target ended meanwhile
                continue
            graph.missing -= 1
            if graph.missing == 0:
                self._send(graph)

    def object_failed(self, object_id: bytes, error: Exception) -> None:
        for graph_id in self.waiting.pop(object_id, ()):
            graph = self._graphs.get(graph_id)
            if graph is None:  # every target ended meanwhile
                continue
            assert graph.message is not None  # a graph waiting for objects has not left
            for target in graph.message.targets:
                record = self._tasks.record(target)
                if record is not None:
                    self._tasks.step(target, record, TaskEvent.FAIL, error)

    def target_ended(self, target: bytes, delete_objects: bool) -> None:
        graph_id = self.targets.pop(target, None)
        graph = self._graphs.get(graph_id) if graph_id is not None else None
        if graph is None:
            return
        graph.targets_left -= 1
        if graph.targets_left > 0:
            return
        del self._graphs[graph_id]  # type: ignore[arg-type]  # found above
        if delete_objects:
            self._storage.delete(graph.temporary_objects)
        users = self._tasks.function_users
        for function_id in graph.function_ids:
            count = users.pop(function_id, 1) - 1
            if count > 0:
                users[function_id] = count

    def clear(self) -> None:
        self._graphs.clear()
        self.targets.clear()
        self.waiting.clear()

    def _send(self, graph: _GraphRecord) -> None:
        """Send the GraphTask, without the targets cancelled while its objects were being stored."""
        message, graph.message = graph.message, None
        assert message is not None
        tasks = self._tasks
        message.targets = [target for target in message.targets if tasks.record(target) is not None]
        if not message.targets:
            return
        for target in message.targets:
            tasks.step(target, tasks.record(target), TaskEvent.SENT_IN_GRAPH)  # type: ignore[arg-type]
        self._out.append(ToScheduler(message))
