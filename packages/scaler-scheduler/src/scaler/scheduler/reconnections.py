"""Peers that come back: what the scheduler keeps for them, and for how long (sans-I/O, part of the core).

A client of protocol 1.8 says in its Hello how long it waits for a lost scheduler (``reconnectSeconds``), and
sends again, once answered, every task and graph it has not seen end (docs/protocol.md, "Reconnecting").
Workers say Hello again naming what they hold (`task_routing.TaskRouting.adopt`). So:

- a client whose connection closes is *away*, not gone, for the wait it said (and `AWAY_MARGIN_SECONDS`): the
  scheduler cannot tell a client that died from one cut off by the network, so its tasks are cancelled on their
  workers at once (a dead client's work stops), but its session and its objects in storage are kept, and
  what the scheduler would send it (`divert`) is kept: its results (`kept_results.py`: those that crossed the
  cancel answer the tasks it sends again), nothing else (cancel confirms, outputs: the client settles those
  itself). It comes back with a Hello from the same identity and key and sends its tasks again, which run
  again; or it is removed as a client that left (objects cleared) once the wait is over;
- its first heartbeat after its Hello says it sent again all it waits for (`client_resent`): what was kept
  for it and not claimed is dropped (a result's object deleted), and tasks a worker said it held for it that
  it did not send again are cancelled there;
- a Client made inside a task (nested) that says Hello again may do so before the worker running its task
  said Hello again: its Hello waits (`defer`), at most the client timeout, until a worker holds that task
  (the only proof of whose objects its tasks read), then is answered;
- a scheduler that restarted sends no task for its first `RESUME_SECONDS` once a peer resumes
  (`peer_resumes`): the workers that reconnect meanwhile say what they hold, so that a task a client sends
  again does not go to another worker than the one that runs it.

What the scheduler does not know survives nowhere: the results it kept in memory for graphs and those sent
on a connection that was lost run again (docs/scheduling.md, "Restarts").
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Container, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.protocol.security import Credential
from scaler.scheduler.graph_record import whole_result
from scaler.scheduler.kept_results import stored_objects
from scaler.scheduler.monitor_events import MonitorEvents
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client
from scaler.scheduler.scheduler_events import Send
from scaler.scheduler.task_routing import TaskRouting

AWAY_MARGIN_SECONDS = 10.0  # an away client is kept this much longer than it waits: it may notice the loss later
UNKNOWN_TASK_SECONDS = 5.0  # a Client made in a task nobody named waits this long for a worker to name it
RESUME_SECONDS = 2.0  # a scheduler that restarted sends no task this long after it serves: its workers say first
# what they hold (they reconnect within a fraction of a second), so that no task they hold runs twice

logger = logging.getLogger(__name__)

_Hello = Tuple[bytes, m.Hello, Credential]
DeleteObjects = Callable[[bytes, List[bytes], Outbox], None]


class Reconnections:
    def __init__(
        self, clients: Dict[bytes, Client], routing: TaskRouting, events: MonitorEvents, defer_seconds: float,
        delete_objects: DeleteObjects,
    ) -> None:  # fmt: skip
        self._clients = clients
        self._routing = routing
        self._events = events
        self._defer_seconds = defer_seconds
        self._delete_objects = delete_objects  # (owner, object IDs, out): a delete request to the storage server
        self._away: Dict[bytes, Client] = {}  # clients whose connection closed, kept for them to come back
        self._deferred: Dict[bytes, List[Tuple[float, _Hello]]] = {}  # task ID -> Hellos made in it, waiting
        self._serving_since: Optional[float] = None  # when the storage server first answered: peers are served

    @property
    def any_away(self) -> bool:
        return bool(self._away)

    @property
    def hellos_may_be_ready(self) -> bool:
        return bool(self._deferred)

    def serving(self, now: float) -> None:
        """The storage server answered: peers are served (from the first time on)."""
        if self._serving_since is None:
            self._serving_since = now

    def peer_resumes(self) -> None:
        """A peer resumes (a worker names what it holds, a client says Hello again): if this scheduler serves since
        a moment only, it restarted, and sends no task before the other workers said what they hold."""
        if self._serving_since is not None:
            self._routing.hold_dispatch(self._serving_since + RESUME_SECONDS)

    # ----------------------------------------------------------------- clients away

    def client_gone(self, client: Client, now: float) -> bool:
        """The client's connection closed: whether it is kept, away, for it to come back (it said it would)."""
        if client.reconnect <= 0:
            return False
        client.away_until = now + client.reconnect + AWAY_MARGIN_SECONDS
        self._away[client.client_id] = client
        self._events.warning(
            "client away", client.client_id,
            f"client {show(client.client_id)} lost its connection: its tasks are cancelled, its session and objects "
            f"kept for it up to {client.reconnect + AWAY_MARGIN_SECONDS:g}s",
        )  # fmt: skip
        return True

    def client_back(self, client: Client) -> None:
        """The client said Hello again (the same identity and key): it sends again what it waits for."""
        client.resent = False
        if self._away.pop(client.client_id, None) is not None:
            client.away_until = 0.0
            self._events.info("client back", client.client_id, f"client {show(client.client_id)} is back")

    def forget(self, client_id: bytes) -> None:
        self._away.pop(client_id, None)

    def client_resent(self, client: Client, graph_nodes: Container[bytes], out: Outbox) -> None:
        """Its first heartbeat since its Hello: it sent again all it waits for. What was kept for it and not
        claimed goes (but for the nodes of its graphs, released later)."""
        client.resent = True
        routing = self._routing
        routing.client_resent(client.client_id, graph_nodes, out)
        if routing.kept:
            dropped = routing.kept.drop_client(client.client_id, graph_nodes.__contains__)
            objects = stored_objects(dropped)
            if objects:
                self._delete_objects(client.client_id, objects, out)

    def divert(self, effects: List[Any]) -> List[Any]:
        """The effects, but what goes to a client away: its results kept for it, the rest dropped."""
        away, kept = self._away, self._routing.kept
        sent = []
        for effect in effects:
            client = away.get(effect.to) if type(effect) is Send else None
            if client is None:
                sent.append(effect)
            elif type(effect.message) is m.TaskResultBatch:
                for result in effect.message.results:
                    kept.keep(client.client_id, whole_result(result), client.away_until)
        return sent

    # ----------------------------------------------------------------- Clients made in tasks

    def defer(self, task_id: bytes, hello: _Hello, now: float) -> None:
        """The Hello of a Client made in ``task_id``, which no worker holds yet: it waits for one to."""
        logger.debug(f"Scheduler: client {show(hello[0])} made in task {task_id.hex()} waits for a worker to hold it")
        self._deferred.setdefault(task_id, []).append((now, hello))

    def ready_hellos(self, now: float) -> List[_Hello]:
        """The deferred Hellos to answer now: their task is held by a worker (however it came to be: claimed,
        queued and taken back, dispatched); or they waited long enough: the client timeout for a task a worker
        said it holds or that is queued here, `UNKNOWN_TASK_SECONDS` for a task nobody named (it ended: the Client
        stands for itself)."""
        ready: List[_Hello] = []
        routing = self._routing
        for task_id, waiting in list(self._deferred.items()):
            if routing.holder(task_id) is not None:
                ready.extend(hello for _, hello in waiting)
                del self._deferred[task_id]
                continue
            bound = self._defer_seconds if routing.awaited(task_id) else UNKNOWN_TASK_SECONDS
            due = [hello for since, hello in waiting if since + bound <= now]
            if due:
                ready.extend(due)
                left = [each for each in waiting if each[0] + bound > now]
                if left:
                    self._deferred[task_id] = left
                else:
                    del self._deferred[task_id]
        return ready

    # ----------------------------------------------------------------- time

    def on_tick(self, now: float, out: Outbox) -> List[Client]:
        """What the passing time ends: kept results past their deadline (objects deleted), tasks a worker holds
        that no client claimed (cancelled there); returns the away clients whose wait is over."""
        routing = self._routing
        if routing.kept:
            for client_id, result in routing.kept.due(now):
                objects = stored_objects([result])
                if objects:
                    self._delete_objects(client_id, objects, out)
        routing.expire_claims(now, out)
        over = [client for client in self._away.values() if client.away_until <= now]
        for client in over:
            del self._away[client.client_id]
            self._events.warning(
                "client left", client.client_id,
                f"client {show(client.client_id)} did not come back within {client.reconnect:g}s",
            )  # fmt: skip
        return over

    def away(self, client_id: bytes) -> bool:
        return client_id in self._away


