"""The connections that the `Client`s inside a worker's processor share, one per scope.

A processor installs a `scaler.protocol.task_context.TaskContext`. A Client made there without an address,
or unpickled there (a task received it), does not open a connection of its own: it is a view on the
processor's `SharedConnection` for the scope of the task it is made in (one agent thread, one ZeroMQ context,
one client ID at the scheduler), made by the first such Client. That Client tells the scheduler the task it
was made in, with the worker's proof (`scaler.protocol.delegation`): the connection stands for that task's
client, whose objects its tasks read. However many tasks wait in the processor, each holding Clients, the
processor keeps one connection per client whose tasks hold Clients there (a fixed number of threads each), and
the one used last: a connection no Client holds any more says goodbye (`close_unreferenced`).

A view sends through the shared agent (`ClientView`), except what would reach beyond itself: its
`disconnect` stops only the view (the connection stays, for the other tasks) and its `clear` cancels only
the tasks submitted through it.
"""

from __future__ import annotations

import concurrent.futures
import functools
import weakref
from typing import Any, Callable, Dict, Mapping, Optional

from scaler.client.agent import ClientAgent, close_unreferenced
from scaler.client.client_events import Cancel, Clear, Event, MadeIn
from scaler.client.future import ScalerFuture
from scaler.client.task_builder import TaskBuilder
from scaler.protocol import delegation
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.ids import new_client_id
from scaler.protocol.messages import Version
from scaler.protocol.security import SecurityConfig, peer_keys
from scaler.protocol.task_context import TaskContext


class SharedConnection:
    """The processor's connection: one agent, and the task builders of the Clients that use the default
    serializer (one per profiling choice), so that a function is put in storage once for all of them."""

    def __init__(
        self, address: str, timeout_seconds: float, heartbeat_interval_seconds: float, wait: float,
        made_in: bytes = b"", delegation_key: bytes = b"", reconnect_seconds: float = 0.0,
    ) -> None:  # fmt: skip
        self.client_id = new_client_id()
        self._builders: Dict[bool, TaskBuilder] = {}
        self._delegation_key = delegation_key
        self.made_in = made_in  # the task the last Client of this connection was made in
        proof = delegation.proof(delegation_key, self.client_id, made_in) if made_in and delegation_key else b""
        # the agent holds what it calls back, never this connection: a connection no Client holds is freed at once
        self.agent = ClientAgent(
            self.client_id, address, timeout_seconds, heartbeat_interval_seconds, wait,
            on_objects_failed=functools.partial(_forget, self._builders),
            keys=peer_keys(SecurityConfig.from_environment()),  # the worker's task key, when the cluster has keys
            made_in=(made_in, proof), reconnect_seconds=reconnect_seconds,
        )  # fmt: skip
        self.agent.connect(timeout_seconds, wait)
        weakref.finalize(self, close_unreferenced, self.agent)

    def made_in_task(self, made_in: bytes) -> None:
        """A Client of this connection is made in task ``made_in``: should the connection say Hello again (the
        scheduler restarted), it names that task, running still when the first one may have ended."""
        if made_in and made_in != self.made_in and self._delegation_key:
            self.made_in = made_in
            try:
                self.agent.send(MadeIn(made_in, delegation.proof(self._delegation_key, self.client_id, made_in)))
            except DisconnectedError:  # it closed meanwhile: the next Client makes a new one
                pass

    def builder(self, serializer: Any, profiling: bool) -> TaskBuilder:
        """A Client's task builder: shared for the default serializer, its own for a custom one."""
        if serializer is not None:
            return self._new_builder(serializer, profiling)
        builder = self._builders.get(profiling)
        if builder is None:
            builder = self._builders[profiling] = self._new_builder(None, profiling)
        return builder

    def _new_builder(self, serializer: Any, profiling: bool) -> TaskBuilder:
        builder = TaskBuilder(self.client_id, serializer, profiling)
        builder.send = self.agent.send
        return builder


def _forget(builders: Dict[bool, TaskBuilder], object_ids: Any) -> None:
    """The functions that failed to reach storage: the shared task builders put them again."""
    for builder in builders.values():
        builder.forget(object_ids)


def shared_connection(
    context: TaskContext, timeout_seconds: float, heartbeat: float, wait: float, reconnect_seconds: float = 0.0
) -> SharedConnection:
    """The processor's connection for the scope of the task whose code asks (outside a task's own code: one that
    stands for itself), connected by the first Client of that scope that asks (with its options), or again after
    it closed (the scheduler went away or refused it)."""
    running = context.running_task()
    made_in, scope = running if running is not None else (b"", b"")
    with context.lock:
        connection = context.connections.get(scope)
        if connection is None or connection.agent.closed:
            address = context.scheduler_address
            connection = SharedConnection(
                address, timeout_seconds, heartbeat, wait, made_in, context.delegation_key, reconnect_seconds
            )
            context.connections[scope] = connection
        else:
            connection.made_in_task(made_in)
        context.last_connection = connection  # the others live as long as Clients hold them
        return connection


class ClientView:
    """A Client's agent inside a processor: the shared agent, but for what concerns this Client alone. It holds
    its connection: a connection lives as long as a Client uses it."""

    def __init__(self, connection: SharedConnection) -> None:
        self._connection = connection
        self._shared: ClientAgent = connection.agent
        self._futures: weakref.WeakValueDictionary[bytes, ScalerFuture] = weakref.WeakValueDictionary()
        self._closed = False

    @property
    def scheduler_version(self) -> Version:
        return self._shared.scheduler_version

    def send(self, event: Event, futures: Optional[Mapping[bytes, ScalerFuture]] = None) -> None:
        if self._closed:
            raise DisconnectedError("this client is disconnected")
        if futures:
            self._futures.update(futures)
        self._shared.send(event, futures)

    def ask(self, command: Callable[..., Event], *args: Any) -> concurrent.futures.Future:
        if self._closed:
            raise DisconnectedError("this client is disconnected")
        if command is not Clear:
            return self._shared.ask(command, *args)
        pending = [task_id for task_id, future in list(self._futures.items()) if not future.done()]
        if pending:
            self._shared.send(Cancel(pending))
        return _answered()

    def disconnect(self) -> concurrent.futures.Future:
        self._closed = True
        return _answered()

    def abort(self, error: Exception) -> None:
        self._closed = True

    def join(self, timeout: float) -> None:
        pass

    @property
    def closed(self) -> bool:
        return self._closed or self._shared.closed

    def in_agent_thread(self) -> bool:
        return self._shared.in_agent_thread()


def _answered(value: Any = None) -> concurrent.futures.Future:
    done: concurrent.futures.Future = concurrent.futures.Future()
    done.set_result(value)
    return done
