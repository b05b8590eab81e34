"""What the scheduler reads of the tasks and results it routes: only what routing needs, and only when it needs it.

`decode_routed` decodes as `codec.decode` does, except that the tasks of a `TaskBatch` and of a `GraphTask` and
the results of a `TaskResultBatch` are `ReceivedItems`: nothing of them is read until asked for. The scheduler
takes a large message a slice at a time (`ReceivedItems.read`: each item read then, a damaged one named
instead), so a message of 100,000 tasks costs it nothing before its first slice and never keeps it from its
other peers for longer than a slice. Each item is read as a `RoutedTask` (what routing needs: ID, client,
priority, capabilities, attempt, timeout, retries, the graph nodes it needs; every other field checked
readable) or a `RoutedResult`, which keep a reference to their struct in the received frame: encoding one
for a worker or a client copies that struct through in C++ and writes the changed fields over the copy.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union, overload

from scaler.protocol import messages
from scaler.protocol.codec import (
    DamagedTask,
    damaged_item,
    problem,
    read_member,
    read_message,
    schema,
    struct_reader,
)
from scaler.protocol.errors import ProtocolError


def decode_routed(frames: Sequence[Any]) -> Tuple[Any, List[Any]]:
    """`codec.decode`, except that a `TaskBatch`'s and a `GraphTask`'s tasks and a `TaskResultBatch`'s results are
    `ReceivedItems` (of `RoutedTask`, of `RoutedResult`), read when taken."""
    reader, which, segments, limit = read_message(frames)
    try:
        if which == "taskBatch":
            batch = reader.taskBatch
            tasks = ReceivedItems(Received(segments, limit, which, "tasks", batch.tasks), RoutedTask, messages.Task)
            message: Any = messages.TaskBatch(tasks, batch.sequence)  # type: ignore[arg-type]
        elif which == "graphTask":
            graph = reader.graphTask
            nodes = ReceivedItems(Received(segments, limit, which, "tasks", graph.tasks), RoutedTask, messages.Task)
            targets = list(graph.targets)
            message = messages.GraphTask(graph.graphId, nodes, targets, graph.more, graph.again)  # type: ignore[arg-type]
        elif which == "taskResultBatch":
            received = Received(segments, limit, which, "results", reader.taskResultBatch.results)
            results = ReceivedItems(received, RoutedResult, messages.TaskResult)
            message = messages.TaskResultBatch(results)  # type: ignore[arg-type]
        else:
            message = read_member(reader, which, segments, limit)
    except ProtocolError:
        raise
    except Exception as error:  # capnp raises KjException, ValueError, ... on bad input
        raise ProtocolError(f"cannot decode message: {problem(error)}") from None
    return message, list(frames[1:])


class Received:
    """A received message that routed items still refer to: its segments, and the list of their structs.

    Every read, copies included, counts against the message's traversal limit (which keeps a malicious
    message from expanding without bound). An item copied more times than the limit allows (a task
    retried or moved many times) reads the message again with a fresh limit."""

    __slots__ = ("segments", "limit", "union", "field", "items")

    def __init__(self, segments: List[memoryview], limit: int, union: str, field: str, items: Any) -> None:
        self.segments = segments
        self.limit = limit
        self.union = union
        self.field = field
        self.items = items

    def copy(self, index: int, items: Any, i: int) -> Any:
        """Copy our struct ``index`` into ``items[i]`` (a list builder); return that builder."""
        self.use(index, lambda item: items.__setitem__(i, item))
        return items[i]

    def use(self, index: int, action: Callable[[Any], Any]) -> Any:
        """``action(struct index)``; past the traversal limit, read the message again (once) and retry."""
        try:
            return action(self.items[index])
        except Exception:  # noqa: BLE001 - the traversal limit: read the message again, once
            reader = schema.Message.from_segments(self.segments, traversal_limit_in_words=self.limit)
            self.items = getattr(getattr(reader, self.union), self.field)
            try:
                return action(self.items[index])
            except Exception as error:
                raise ProtocolError(f"item {index} of a received {self.union} cannot be read: {error}") from None


_TASK_FIELDS = schema.Task.schema.fields
_F_TASK_ID, _F_CLIENT_ID, _F_PRIORITY, _F_CAPABILITIES, _F_ATTEMPT, _F_TIMEOUT, _F_RETRIES = (
    _TASK_FIELDS[name]
    for name in ("taskId", "clientId", "priority", "capabilities", "attempt", "timeoutSeconds", "retries")
)
_TASK_ARGUMENT = messages.ArgumentKind.TASK.value
_F_FUNCTION_ID, _F_SERIALIZER_ID, _F_ARGUMENTS, _F_STORE_RESULT, _F_STREAM_OUTPUT, _F_SCOPE_ID = (
    _TASK_FIELDS[name]
    for name in ("functionId", "serializerId", "arguments", "storeResult", "streamOutput", "scopeId")
)
_F_QUEUED_SECONDS = _TASK_FIELDS["queuedSeconds"]
_ARGUMENT_FIELDS = schema.Argument.schema.fields
_F_ARGUMENT_NAME, _F_ARGUMENT_KIND, _F_ARGUMENT_DATA = (_ARGUMENT_FIELDS[name] for name in ("name", "kind", "data"))
_ARGUMENT_KINDS = frozenset(kind.value for kind in messages.ArgumentKind)


class RoutedTask:
    """A received `Task` as the scheduler holds it: the fields it routes by, and a reference to the rest.

    Every field a worker reads is read once here too, so that a task a worker could not read is refused when
    it is taken (`ReceivedItems.read` names it damaged), not found out by its worker. ``client_id`` and
    ``attempt`` may be changed, and ``scope_id`` (the scheduler sets it, whatever the client sent); they are
    written over the copy when the task is sent. A node of a graph names
    the nodes whose results it needs (``dependencies``: the position of each such argument, kind ``task``, and
    the task ID it names); the scheduler replaces those arguments (`set_argument`) and may ask for the result
    to be stored (``store_result``), written over the copy too, as is ``queued_seconds`` when it is set."""

    __slots__ = (
        "task_id", "client_id", "priority", "capabilities", "attempt", "timeout_seconds", "retries", "dependencies",
        "store_result", "scope_id", "queued_seconds", "_received_scope", "_arguments", "_received", "_index",
    )  # fmt: skip

    def __init__(self, received: Received, index: int, reader: Any) -> None:
        get = reader._get_by_field
        self.task_id: bytes = get(_F_TASK_ID)
        self.client_id: bytes = get(_F_CLIENT_ID)
        self.priority: int = get(_F_PRIORITY)
        capabilities = get(_F_CAPABILITIES)
        self.capabilities: Sequence[messages.Capability] = (
            [struct_reader(messages.Capability)(c) for c in capabilities] if len(capabilities) else ()
        )
        self.attempt: int = get(_F_ATTEMPT)
        self.timeout_seconds: float = get(_F_TIMEOUT) or 0.0  # (a zero of its own would cost 24 bytes a task)
        self.retries: int = get(_F_RETRIES)
        self.dependencies: Sequence[Tuple[int, bytes]] = ()
        self.store_result: Optional[bool] = None  # None: as received
        self.scope_id: bytes = get(_F_SCOPE_ID)
        self._received_scope = self.scope_id  # the scope is written over the copy when it is not this object
        self.queued_seconds = 0.0  # 0: as received
        self._arguments: Optional[List[Tuple[int, messages.ArgumentKind, bytes]]] = None  # written over the copy
        self._received = received
        self._index = index
        # the rest, read only to know it can be read (the worker reads it); by index: faster than iterating
        get(_F_FUNCTION_ID)
        get(_F_SERIALIZER_ID)
        arguments = get(_F_ARGUMENTS)
        for position in range(len(arguments)):
            get_argument = arguments[position]._get_by_field
            get_argument(_F_ARGUMENT_NAME)
            data = get_argument(_F_ARGUMENT_DATA)
            kind = get_argument(_F_ARGUMENT_KIND).raw
            if kind not in _ARGUMENT_KINDS:
                raise ProtocolError("unknown argument kind")
            if kind == _TASK_ARGUMENT:
                if not self.dependencies:
                    self.dependencies = []
                self.dependencies.append((position, data))  # type: ignore[attr-defined]

    def set_argument(self, position: int, kind: messages.ArgumentKind, data: bytes) -> None:
        """The argument at ``position`` becomes ``kind``, ``data`` in the task sent on."""
        if self._arguments is None:
            self._arguments = []
        self._arguments.append((position, kind, data))

    @property
    def stream_output(self) -> bool:
        """Whether its client asked for what it prints: read from the received struct only when asked (when the
        task prints), so routing never pays for it."""
        return self._received.use(self._index, lambda item: item._get_by_field(_F_STREAM_OUTPUT))

    def write_into(self, items: Any, i: int) -> None:
        builder = self._received.copy(self._index, items, i)
        set_field = builder._set_by_field  # by field object: faster than by name
        set_field(_F_CLIENT_ID, self.client_id)
        set_field(_F_ATTEMPT, self.attempt)
        if self.scope_id is not self._received_scope:
            set_field(_F_SCOPE_ID, self.scope_id)
        if self.queued_seconds:
            set_field(_F_QUEUED_SECONDS, self.queued_seconds)
        if self.store_result is not None:
            set_field(_F_STORE_RESULT, self.store_result)
        if self._arguments is not None:
            arguments = builder._get_by_field(_F_ARGUMENTS)
            for position, kind, data in self._arguments:
                set_argument = arguments[position]._set_by_field
                set_argument(_F_ARGUMENT_KIND, int(kind))
                set_argument(_F_ARGUMENT_DATA, data)

    def to_task(self) -> messages.Task:
        """The whole `Task` (for tests: the scheduler itself never needs it)."""
        message = schema.Message.new_message()
        items = message.init("taskBatch").init("tasks", 1)
        self.write_into(items, 0)
        return struct_reader(messages.Task)(items[0].as_reader())


_RESULT_FIELDS = schema.TaskResult.schema.fields
_F_RESULT_ID, _F_RESULT_ATTEMPT, _F_STATUS, _F_PAYLOAD_KIND, _F_PAYLOAD, _F_ERROR_TEXT, _F_PROFILING = (
    _RESULT_FIELDS[name] for name in ("taskId", "attempt", "status", "payloadKind", "payload", "errorText", "profiling")
)
_STATUSES = {member.value: member for member in messages.TaskStatus}
_PAYLOAD_KINDS = {member.value: member for member in messages.PayloadKind}


class RoutedResult:
    """A received `TaskResult` as the scheduler holds it on its way to the client: ID, attempt and status
    read; payload, profiling and error text read only if asked for. ``error_text`` may be replaced."""

    __slots__ = ("task_id", "attempt", "status", "_error_text", "_received", "_index")

    def __init__(self, received: Received, index: int, reader: Any) -> None:
        get = reader._get_by_field
        self.task_id: bytes = get(_F_RESULT_ID)
        self.attempt: int = get(_F_RESULT_ATTEMPT)
        status = get(_F_STATUS).raw
        self.status = _STATUSES.get(status)
        if self.status is None:
            raise ProtocolError(f"result of task {self.task_id.hex()} has unknown status {status}")
        self._error_text: Optional[str] = None
        self._received = received
        self._index = index

    @property
    def error_text(self) -> str:
        if self._error_text is None:
            return self._read(_F_ERROR_TEXT)
        return self._error_text

    @error_text.setter
    def error_text(self, text: str) -> None:
        self._error_text = text

    @property
    def payload_kind(self) -> messages.PayloadKind:
        return _PAYLOAD_KINDS[self._read(_F_PAYLOAD_KIND).raw]

    @property
    def payload(self) -> bytes:
        return self._read(_F_PAYLOAD)

    def kind_and_payload(self) -> Tuple[messages.PayloadKind, bytes]:
        """``payload_kind`` and ``payload`` in one read (what a graph node's dependants take from it)."""
        return self._received.use(
            self._index,
            lambda item: (_PAYLOAD_KINDS[item._get_by_field(_F_PAYLOAD_KIND).raw], item._get_by_field(_F_PAYLOAD)),
        )

    @property
    def profiling(self) -> messages.Profiling:
        return self._received.use(self._index, lambda item: struct_reader(messages.Profiling)(item.profiling))

    def to_result(self) -> messages.TaskResult:
        """The whole `TaskResult` (for a result the scheduler keeps, a graph node's)."""
        result = self._received.use(self._index, struct_reader(messages.TaskResult))
        if self._error_text is not None:
            result.error_text = self._error_text
        return result

    def _read(self, field: Any) -> Any:
        return self._received.use(self._index, lambda item: item._get_by_field(field))

    def write_into(self, items: Any, i: int) -> None:
        builder = self._received.copy(self._index, items, i)
        if self._error_text is not None:
            builder.errorText = self._error_text


class ReceivedItems(Sequence):
    """The tasks or results of a received message, each read (as ``make``: `RoutedTask`, `RoutedResult`) when
    first taken, and kept. `read` takes a slice and names the items that cannot be read; indexing and iteration
    raise `ProtocolError` at a damaged one."""

    __slots__ = ("_received", "_make", "_message_type", "_read", "_count")

    def __init__(self, received: Received, make: Callable[[Received, int, Any], Any], message_type: type) -> None:
        self._received = received
        self._make = make
        self._message_type = message_type  # of an item: messages.Task, messages.TaskResult
        self._count = len(received.items)
        self._read: List[Any] = []  # the items read so far, in order (a DamagedTask for a damaged one)

    def __len__(self) -> int:
        return self._count

    def read(self, start: int, stop: int) -> Tuple[List[Any], List[DamagedTask]]:
        """Items ``start`` to ``stop`` (excluded) that can be read, and what is wrong with each other one."""
        self._read_until(min(stop, self._count))
        items: List[Any] = []
        damaged: List[DamagedTask] = []
        for item in self._read[start:stop]:
            (damaged if type(item) is DamagedTask else items).append(item)
        return items, damaged

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> List[Any]: ...

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        self._read_until(index + 1)
        item = self._read[index]
        if type(item) is DamagedTask:
            raise ProtocolError(f"item {index} of a received {self._received.union} cannot be read: {item.reason}")
        return item

    def _read_until(self, stop: int) -> None:
        received, make, read = self._received, self._make, self._read
        for index in range(len(read), stop):
            try:
                read.append(received.use(index, lambda struct: make(received, index, struct)))  # noqa: B023
            except ProtocolError as error:
                read.append(damaged_item(index, received.items[index], error, self._message_type))
