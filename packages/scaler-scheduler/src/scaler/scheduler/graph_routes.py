"""Between the graph layer and the scheduler's tasks (sans-I/O): what `graph_tasks.GraphTasks` decides is carried
out, and the results and cancel confirms of graph nodes go through it before they reach a client; so do those of
the inputs of tasks held for other tasks' results (`task_inputs.TaskInputs`), which then decides for those."""

from __future__ import annotations

from collections import defaultdict

from scaler.protocol import messages as m
from scaler.scheduler.graph_record import GraphActions
from scaler.scheduler.graph_tasks import GraphTasks
from scaler.scheduler.outbox import Outbox, add_confirms
from scaler.scheduler.scheduler_events import Send
from scaler.scheduler.storage_link import StorageLink
from scaler.scheduler.task_inputs import TaskInputs
from scaler.scheduler.task_routing import TaskRouting


class GraphRoutes:
    def __init__(self, graphs: GraphTasks, routing: TaskRouting, storage: StorageLink, inputs: TaskInputs) -> None:
        self._graphs = graphs
        self._routing = routing
        self._storage = storage
        self._inputs = inputs
        routing.hold_dependents = inputs.hold

    @property
    def active(self) -> bool:
        """Whether results and confirms bound for clients must go `through` here."""
        return self._graphs.active or self._inputs.active

    def forget_client(self, client_id: bytes) -> None:
        """The client left, cleared or is away: its graphs and its held tasks are dropped."""
        self._graphs.forget_client(client_id)
        self._inputs.forget_client(client_id)

    def on_cancel_request(self, source: bytes, message: m.TaskCancel, now: float, out: Outbox) -> None:
        """A client's TaskCancel: the graph layer answers for graph nodes, the rest is cancelled as usual."""
        task_ids = message.task_ids
        if self._graphs.active:
            task_ids, actions = self._graphs.cancel(source, task_ids)
            self.apply(source, actions, now, out)
        if self._inputs.active:
            task_ids = self._inputs.cancel(source, task_ids, out)
        self._routing.cancel(source, task_ids, out)

    def apply(self, client_id: bytes, actions: GraphActions, now: float, out: Outbox) -> None:
        """Carry out what the graph layer decided for ``client_id``."""
        if actions.kept:  # before the release: a node released now gets its result kept
            self._routing.keep_for(client_id, actions.kept, now)
        if actions.deletes:
            self._storage.send(m.ObjectRequest(0, m.ObjectRequestKind.DELETE, client_id, actions.deletes), out)
        if actions.cancel:  # their confirms come back through `through`, which swallows them
            self._routing.cancel(client_id, actions.cancel, out)
        if actions.release:  # released nodes are queued exactly as if the client had sent them
            self._routing.queue(client_id, actions.release, now, out)
        if actions.results:
            out.last.append(Send(client_id, m.TaskResultBatch(actions.results)))
        if actions.confirm_ids:
            out.last.append(Send(client_id, m.TaskCancelConfirm(actions.confirm_ids, actions.confirm_flags)))

    def through(self, out: Outbox, now: float) -> None:
        """Hand the results and cancel confirms bound for clients to the graph layer first.

        It takes those of graph nodes; what it then decides may produce more of them (released nodes are
        queued, cancels confirmed at once), which it examines in turn. What it sends goes last; what it passed
        waits in the outbox's ``checked_`` side.
        """
        graphs, inputs = self._graphs, self._inputs
        results, confirms = out.checked()
        while out.results or out.confirms:
            new_results, new_confirms = out.results, out.confirms
            out.results, out.confirms = defaultdict(list), {}
            for client_id, batch in new_results.items():
                passed, actions = graphs.on_results(client_id, batch)
                results[client_id].extend(passed)
                self.apply(client_id, actions, now, out)
                if inputs.active:  # what the inputs' ends release is queued (their failures join out.results)
                    released = inputs.on_results(client_id, passed, out)
                    if released:
                        self._routing.queue(client_id, released, now, out)
            for client_id, (task_ids, flags) in new_confirms.items():
                task_ids, flags = graphs.on_confirms(client_id, task_ids, flags)
                add_confirms(confirms, client_id, task_ids, flags)
                if inputs.active:
                    inputs.on_confirms(client_id, task_ids, flags, out)
