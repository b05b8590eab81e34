"""Encoding of `messages` dataclasses to ZeroMQ frames and back.

Frame 0 of every ZeroMQ message is one encoded ``Message`` (unpacked Cap'n
Proto); frames 1..n are binary blobs that ObjectRequest(put) and
ObjectResponse(get) refer to by position. Decoding errors of any kind become a
`ProtocolError` that says what was wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import typing
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import capnp  # type: ignore[import-untyped]

from scaler.protocol import messages
from scaler.protocol.errors import ProtocolError

capnp.remove_import_hook()
_SCHEMA_PATH = importlib.resources.files("scaler.protocol") / "schema" / "scaler.capnp"
with importlib.resources.as_file(_SCHEMA_PATH) as _path:
    schema = capnp.load(str(_path))

MAX_FRAME_BYTES = 1 << 31
ZERO_COPY_BYTES = 64 * 1024  # received blobs from this size on are kept in their zmq.Frame


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _union_name(cls: type) -> str:
    return cls.__name__[0].lower() + cls.__name__[1:]


_SCALARS = (int, float, bool, str, bytes)


class _Plan:
    """How to copy one dataclass to and from its Cap'n Proto struct."""

    __slots__ = ("cls", "fields")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        hints = typing.get_type_hints(cls, vars(messages))
        self.fields: List[Tuple[str, str, str, Any]] = []
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            origin = typing.get_origin(hint)
            if origin in (list, List):
                (item,) = typing.get_args(hint)
                kind, sub = _kind(item)
                self.fields.append((f.name, _camel(f.name), "list_" + kind, sub))
            else:
                kind, sub = _kind(hint)
                self.fields.append((f.name, _camel(f.name), kind, sub))


def _kind(hint: Any) -> Tuple[str, Any]:
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum):
        return "enum", hint
    if hint in _SCALARS:
        return "scalar", hint
    if dataclasses.is_dataclass(hint):
        return "struct", hint
    raise TypeError(f"unsupported field type {hint!r}")


_PLANS: Dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    return plan


# Each dataclass gets a writer and a reader compiled from its plan: straight-line attribute copies, no
# per-field dispatch at run time. Writers skip zero values, which Cap'n Proto encodes as defaults anyway.
_WRITERS: Dict[type, Callable[[Any, Any], None]] = {}
_READERS: Dict[type, Callable[[Any], Any]] = {}


def _writer(cls: type) -> Callable[[Any, Any], None]:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = _compile_writer(cls)
    return writer


def _reader(cls: type) -> Callable[[Any], Any]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = _compile_reader(cls)
    return reader


def _enum_names(enum_type: Any) -> Dict[Any, str]:
    return {member: _camel(member.name.lower()) for member in enum_type}


def _compile_writer(cls: type) -> Callable[[Any, Any], None]:
    env: Dict[str, Any] = {}
    lines = ["def write(b, o):", "    pass"]
    for attr, name, kind, sub in _plan(cls).fields:
        lines.append(f"    v = o.{attr}")
        if kind == "scalar":
            lines.append(f"    if v: b.{name} = v")
        elif kind == "enum":
            lines.append(f"    if v: b.{name} = int(v)")
        elif kind == "struct":
            env[f"w_{attr}"] = _writer(sub)
            lines.append(f"    w_{attr}(b.init('{name}'), v)")
        elif kind == "list_scalar":  # in one call: pycapnp fills the list in C, twice as fast as item by item
            lines.append(f"    if v: b.{name} = v if type(v) is list else list(v)")
        else:
            lines.append("    if v:")
            lines.append(f"        items = b.init('{name}', len(v))")
            if kind == "list_struct":
                env[f"w_{attr}"] = _writer(sub)
                env[f"c_{attr}"] = sub
                # an item of another type (a RoutedTask, a RoutedResult) copies itself from the message it came in
                lines.append("        for i, x in enumerate(v):")
                lines.append(f"            if type(x) is c_{attr}: w_{attr}(items[i], x)")
                lines.append("            else: x.write_into(items, i)")
            else:
                env[f"n_{attr}"] = _enum_names(sub)
                lines.append(f"        for i, x in enumerate(v): items[i] = n_{attr}[x]")
    exec("\n".join(lines), env)
    return env["write"]


def _compile_reader(cls: type) -> Callable[[Any], Any]:
    fields = getattr(schema, cls.__name__).schema.fields
    env: Dict[str, Any] = {"cls": cls}
    values = []
    for attr, name, kind, sub in _plan(cls).fields:
        env[f"f_{attr}"] = fields[name]
        get = f"r._get_by_field(f_{attr})"  # twice as fast as attribute access
        if kind == "scalar":
            values.append(get)
        elif kind == "enum":
            env[f"e_{attr}"] = {member.value: member for member in sub}
            values.append(f"e_{attr}[{get}.raw]")
        elif kind == "struct":
            env[f"r_{attr}"] = _reader(sub)
            values.append(f"r_{attr}({get})")
        elif kind == "list_struct":
            env[f"r_{attr}"] = _reader(sub)
            values.append(f"[r_{attr}(x) for x in {get}]")
        elif kind == "list_enum":
            env[f"e_{attr}"] = {member.value: member for member in sub}
            values.append(f"[e_{attr}[x.raw] for x in {get}]")
        else:
            values.append(f"list({get})")
    exec(f"def read(r):\n    return cls({', '.join(values)})", env)
    return env["read"]


_TYPE_BY_UNION_NAME: Dict[str, type] = {_union_name(cls): cls for cls in messages.MESSAGE_TYPES}
_UNION_NAME_BY_TYPE: Dict[type, str] = {cls: name for name, cls in _TYPE_BY_UNION_NAME.items()}


def message_name(message_type: type) -> str:
    """The name of a message type in the ``Message`` union (``taskBatch``; a `DamagedTaskBatch` is one too)."""
    if message_type is DamagedTaskBatch:
        return "taskBatch"
    return _UNION_NAME_BY_TYPE[message_type]


def encode(message: Any, blobs: Sequence[Any] = ()) -> List[Any]:
    """Encode ``message`` (an instance of one of `messages.MESSAGE_TYPES`) into frames."""
    builder = schema.Message.new_message()
    _writer(type(message))(builder.init(_UNION_NAME_BY_TYPE[type(message)]), message)
    return [builder.to_bytes(), *blobs]


def received_blobs(blobs: Sequence[Any]) -> List[Any]:
    """The blobs of a message received with ``copy=False`` (``zmq.Frame``s), ready to keep: a large one stays in
    its frame (zero-copy), a small one is copied into bytes, because libzmq hands small messages out of shared
    8 KiB batch buffers and keeping such a frame alive keeps its whole batch buffer alive."""
    return [blob if len(blob) >= ZERO_COPY_BYTES else blob.bytes for blob in blobs]


def decode(frames: Sequence[Any]) -> Tuple[Any, List[Any]]:
    """Decode frames into ``(message, blobs)``; raise `ProtocolError` on any malformed input."""
    return _decode(frames, routed=False)


def decode_routed(frames: Sequence[Any]) -> Tuple[Any, List[Any]]:
    """`decode`, except that a `TaskBatch` and a `GraphTask` hold `RoutedTask` items and a `TaskResultBatch`
    `RoutedResult` items: what the scheduler routes by is read, the rest stays in the received frame and is
    copied through (in C++, not field by field in Python) when `encode` sends the item on."""
    return _decode(frames, routed=True)


def _decode(frames: Sequence[Any], routed: bool) -> Tuple[Any, List[Any]]:
    if not frames:
        raise ProtocolError("empty message: no frames")
    head = frames[0]
    data = head.buffer if hasattr(head, "buffer") else head
    size = len(data)
    if size == 0 or size % 8 != 0:
        raise ProtocolError(f"frame 0 is {size} bytes, not a whole number of Cap'n Proto words")
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame 0 is {size} bytes, over the limit of {MAX_FRAME_BYTES}")
    try:
        segments = _segments(data)
        limit = size // 2 + 64
        reader = schema.Message.from_segments(segments, traversal_limit_in_words=limit)
        which = str(reader.which())
        if which == "taskBatch":
            message: Any = _task_batch(segments, limit, reader.taskBatch, routed)
        elif routed and which == "graphTask":
            graph = reader.graphTask
            received = _Received(segments, limit, "graphTask", "tasks", graph.tasks)
            tasks: List[Any] = [RoutedTask(received, i, item) for i, item in enumerate(received.items)]
            message = messages.GraphTask(graph.graphId, tasks, list(graph.targets), graph.more)
        elif routed and which == "taskResultBatch":
            received = _Received(segments, limit, "taskResultBatch", "results", reader.taskResultBatch.results)
            results: List[Any] = [RoutedResult(received, i, item) for i, item in enumerate(received.items)]
            message = messages.TaskResultBatch(results)
        else:
            message = _reader(_message_type(which))(getattr(reader, which))
    except ProtocolError:
        raise
    except Exception as error:  # capnp raises KjException, ValueError, ... on bad input
        raise ProtocolError(f"cannot decode message: {_problem(error)}") from None
    return message, list(frames[1:])


def _problem(error: Exception) -> str:
    """What a decoding error says, in one line (capnp's own text names a C++ expression and adds a stack)."""
    text = getattr(error, "description", None) or str(error)
    if "cptr[unboundedSize] == '\\0'" in text:
        return "a text field lacks its terminating NUL byte"
    if type(error) is KeyError:  # a compiled reader's lookup of an enum value
        return f"an enum field holds {error.args[0]}, a value this protocol version does not know"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass(slots=True)
class DamagedTask:
    """A task of a received `TaskBatch` that cannot be read whole: its ID (empty if even that cannot be read),
    its attempt, and what is wrong with it."""

    task_id: bytes
    attempt: int
    reason: str


@dataclass(slots=True)
class DamagedTaskBatch:
    """A `TaskBatch` some of whose tasks cannot be read: the others (as `decode` or `decode_routed` reads a
    task), and the damaged ones, so that a receiver can refuse each of those alone and go on with the rest."""

    tasks: List[Any]
    damaged: List[DamagedTask]
    sequence: int = 0


def _task_batch(segments: List[memoryview], limit: int, batch: Any, routed: bool) -> Any:
    """A received TaskBatch: every task read (as a `RoutedTask` if ``routed``), or, when some cannot be, a
    `DamagedTaskBatch`. The second pass, task by task, runs only for a damaged batch."""
    items = batch.tasks
    received = _Received(segments, limit, "taskBatch", "tasks", items) if routed else None
    read_task = _reader(messages.Task)
    try:
        if received is not None:
            tasks: List[Any] = [RoutedTask(received, i, item) for i, item in enumerate(items)]
        else:
            tasks = [read_task(item) for item in items]
        return messages.TaskBatch(tasks, batch.sequence)
    except Exception:  # noqa: BLE001 - a damaged task: read them one by one
        pass
    # a fresh reader: the failed pass counted against the traversal limit
    batch = schema.Message.from_segments(segments, traversal_limit_in_words=limit).taskBatch
    items = batch.tasks
    if received is not None:
        received.items = items
    tasks, damaged = [], []
    for index, item in enumerate(items):
        try:
            tasks.append(RoutedTask(received, index, item) if received is not None else read_task(item))
        except Exception as error:  # noqa: BLE001 - this task alone
            damaged.append(_damaged_task(index, item, error))
    return DamagedTaskBatch(tasks, damaged, batch.sequence)


def _damaged_task(index: int, item: Any, error: Exception) -> DamagedTask:
    try:
        task_id = item._get_by_field(_F_TASK_ID)
    except Exception:  # noqa: BLE001 - not even its ID
        task_id = b""
    return DamagedTask(task_id, item._get_by_field(_F_ATTEMPT), damage(item, messages.Task) or _problem(error))


def damage(reader: Any, cls: type, prefix: str = "") -> str:
    """What cannot be read in the struct ``reader`` of message type ``cls``: the first field that fails, and
    why (``arguments[1].name: a text field lacks its terminating NUL byte``); "" if every field reads."""
    fields = getattr(schema, cls.__name__).schema.fields
    for _, name, kind, sub in _plan(cls).fields:
        path = prefix + name
        try:
            value = reader._get_by_field(fields[name])
            if kind == "enum":
                _known(sub, value.raw)
            elif kind == "list_enum":
                for each in value:
                    _known(sub, each.raw)
            elif kind.startswith("list_") and kind != "list_struct":
                list(value)
        except Exception as error:  # noqa: BLE001 - this field
            return f"{path}: {_problem(error)}"
        if kind == "struct":
            found = damage(value, sub, path + ".")
            if found:
                return found
        elif kind == "list_struct":
            for position, each in enumerate(value):
                found = damage(each, sub, f"{path}[{position}].")
                if found:
                    return found
    return ""


def _known(enum_type: Any, raw: int) -> None:
    if raw not in _ENUM_VALUES.setdefault(enum_type, frozenset(member.value for member in enum_type)):
        raise ValueError(f"{raw} is not a {enum_type.__name__}")


_ENUM_VALUES: Dict[Any, frozenset] = {}


def _message_type(which: str) -> type:
    cls = _TYPE_BY_UNION_NAME.get(which)
    if cls is None:
        raise ProtocolError(f"unknown message type {which!r}")
    return cls


_MAX_SEGMENTS = 512


def _segments(data: Any) -> List[memoryview]:
    """Split a message in the standard framing (segment count - 1, segment sizes in words, padding,
    segments) into its segments, without copying them."""
    view = memoryview(data).cast("B")
    count = int.from_bytes(view[0:4], "little") + 1
    if count > _MAX_SEGMENTS:
        raise ProtocolError(f"message claims {count} segments, over the limit of {_MAX_SEGMENTS}")
    offset = 4 + 4 * count
    offset += offset % 8
    if offset > len(view):
        raise ProtocolError(f"message of {len(view)} bytes is too short for its table of {count} segments")
    segments = []
    for index in range(count):
        words = int.from_bytes(view[4 + 4 * index : 8 + 4 * index], "little")
        end = offset + 8 * words
        if end > len(view):
            raise ProtocolError(f"segment {index} of {words} words runs past the end of the {len(view)}-byte message")
        segments.append(view[offset:end])
        offset = end
    return segments


class _Received:
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
    it is submitted (the batch comes as a `DamagedTaskBatch`), not found out by its worker. ``client_id`` and
    ``attempt`` may be changed, and ``scope_id`` (the scheduler sets it, whatever the client sent); they are
    written over the copy when the task is sent. A node of a graph names
    the nodes whose results it needs (``dependencies``: the position of each such argument, kind ``task``, and
    the task ID it names); the scheduler replaces those arguments (`set_argument`) and may ask for the result
    to be stored (``store_result``), written over the copy too, as is ``queued_seconds`` when it is set."""

    __slots__ = (
        "task_id", "client_id", "priority", "capabilities", "attempt", "timeout_seconds", "retries", "dependencies",
        "store_result", "scope_id", "queued_seconds", "_received_scope", "_arguments", "_received", "_index",
    )  # fmt: skip

    def __init__(self, received: _Received, index: int, reader: Any) -> None:
        get = reader._get_by_field
        self.task_id: bytes = get(_F_TASK_ID)
        self.client_id: bytes = get(_F_CLIENT_ID)
        self.priority: int = get(_F_PRIORITY)
        capabilities = get(_F_CAPABILITIES)
        self.capabilities: Sequence[messages.Capability] = (
            [_reader(messages.Capability)(c) for c in capabilities] if len(capabilities) else ()
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
        if self.store_result is not None:
            set_field(_F_STORE_RESULT, self.store_result)
        if self.queued_seconds:
            set_field(_F_QUEUED_SECONDS, self.queued_seconds)
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
        return _reader(messages.Task)(items[0].as_reader())


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

    def __init__(self, received: _Received, index: int, reader: Any) -> None:
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
        return self._received.use(self._index, lambda item: _reader(messages.Profiling)(item.profiling))

    def to_result(self) -> messages.TaskResult:
        """The whole `TaskResult` (for a result the scheduler keeps, a graph node's)."""
        result = self._received.use(self._index, _reader(messages.TaskResult))
        if self._error_text is not None:
            result.error_text = self._error_text
        return result

    def _read(self, field: Any) -> Any:
        return self._received.use(self._index, lambda item: item._get_by_field(field))

    def write_into(self, items: Any, i: int) -> None:
        builder = self._received.copy(self._index, items, i)
        if self._error_text is not None:
            builder.errorText = self._error_text
