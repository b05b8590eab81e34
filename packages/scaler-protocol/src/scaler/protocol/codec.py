"""Encoding of `messages` dataclasses to ZeroMQ frames and back.

Frame 0 of every ZeroMQ message is one encoded ``Message`` (unpacked Cap'n
Proto); frames 1..n are binary blobs that ObjectRequest(put) and
ObjectResponse(get) refer to by position. Decoding errors of any kind become a
`ProtocolError` that says what was wrong. How the scheduler reads the tasks and
results it routes (as far as it needs, when it needs) is `routed.py`.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.resources
import sys
import typing
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

import capnp  # type: ignore[import-untyped]

from scaler.protocol import messages
from scaler.protocol.errors import ProtocolError

capnp.remove_import_hook()
_SCHEMA_PATH = importlib.resources.files("scaler.protocol") / "schema" / "scaler.capnp"
with importlib.resources.as_file(_SCHEMA_PATH) as _path:
    schema = capnp.load(str(_path))

MAX_FRAME_BYTES = 1 << 31
ZERO_COPY_BYTES = 64 * 1024  # received blobs from this size on are kept in their zmq.Frame
_LITTLE_ENDIAN = sys.byteorder == "little"  # the packed columns' byte order (messages.UInt32s, Float64s)


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
    if isinstance(hint, type) and issubclass(hint, array):
        return "packed", hint
    raise TypeError(f"unsupported field type {hint!r}")


def _packer(column: Any) -> Callable[[Any], bytes]:
    """How a packed column (`messages.UInt32s`, `Float64s`, or a list of its numbers) is written: its
    little-endian bytes."""

    def pack(values: Any) -> bytes:
        if type(values) is not column or not _LITTLE_ENDIAN:
            values = column(values)
            if not _LITTLE_ENDIAN:
                values.byteswap()
        return values.tobytes()

    return pack


def _unpacker(column: Any) -> Callable[[bytes], Any]:
    """How a packed column is read from its bytes, whole; raise `ProtocolError` if they are not whole items."""
    size = column().itemsize

    def unpack(data: bytes) -> Any:
        if len(data) % size:
            raise ProtocolError(f"a column of {len(data)} bytes is not a whole number of {size}-byte numbers")
        values = column()
        values.frombytes(data)
        if not _LITTLE_ENDIAN:
            values.byteswap()
        return values

    return unpack


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


def struct_reader(cls: type) -> Callable[[Any], Any]:
    """The compiled reader of a struct of message type ``cls``: its reader in, the dataclass out."""
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
        elif kind == "packed":
            env[f"p_{attr}"] = _packer(sub)
            lines.append(f"    if len(v): b.{name} = p_{attr}(v)")
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
            env[f"r_{attr}"] = struct_reader(sub)
            values.append(f"r_{attr}({get})")
        elif kind == "packed":
            env[f"u_{attr}"] = _unpacker(sub)
            values.append(f"u_{attr}({get})")
        elif kind == "list_struct":
            env[f"r_{attr}"] = struct_reader(sub)
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
    """Decode frames into ``(message, blobs)``; raise `ProtocolError` on any malformed input. (The scheduler reads
    the tasks and results it routes only as far as it needs: `routed.decode_routed`.)"""
    reader, which, segments, limit = read_message(frames)
    return read_member(reader, which, segments, limit), list(frames[1:])


def read_member(reader: Any, which: str, segments: List[memoryview], limit: int) -> Any:
    """The message a `read_message` found; raise `ProtocolError` if it cannot be read."""
    try:
        if which == "taskBatch":
            return _task_batch(segments, limit, reader.taskBatch)
        return struct_reader(_message_type(which))(getattr(reader, which))
    except ProtocolError:
        raise
    except Exception as error:  # capnp raises KjException, ValueError, ... on bad input
        raise ProtocolError(f"cannot decode message: {problem(error)}") from None


def read_message(frames: Sequence[Any]) -> Tuple[Any, str, List[memoryview], int]:
    """The reader of frame 0's ``Message``, which member of its union it holds, its segments and its traversal
    limit in words (what a reader made again from its segments may read); raise `ProtocolError` when frame 0
    is not a message."""
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
        return reader, str(reader.which()), segments, limit
    except ProtocolError:
        raise
    except Exception as error:  # capnp raises KjException, ValueError, ... on bad input
        raise ProtocolError(f"cannot decode message: {problem(error)}") from None


def problem(error: Exception) -> str:
    """What a decoding error says, in one line (capnp's own text names a C++ expression and adds a stack)."""
    text = getattr(error, "description", None) or str(error)
    if "cptr[unboundedSize] == '\\0'" in text:
        return "a text field lacks its terminating NUL byte"
    if type(error) is KeyError:  # a compiled reader's lookup of an enum value
        return f"an enum field holds {error.args[0]}, a value this protocol version does not know"
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass(slots=True)
class DamagedTask:
    """A task of a received `TaskBatch` (or a result of a `TaskResultBatch`) that cannot be read whole: its ID
    (empty if even that cannot be read), its attempt, and what is wrong with it."""

    task_id: bytes
    attempt: int
    reason: str


@dataclass(slots=True)
class DamagedTaskBatch:
    """A `TaskBatch` some of whose tasks cannot be read: the others, and the damaged ones, so that a receiver can
    refuse each of those alone and go on with the rest (the scheduler finds them as it reads its slices:
    `routed.ReceivedItems.read`)."""

    tasks: List[Any]
    damaged: List[DamagedTask]
    sequence: int = 0


def _task_batch(segments: List[memoryview], limit: int, batch: Any) -> Any:
    """A received TaskBatch: every task read, or, when some cannot be, a `DamagedTaskBatch`. The second pass,
    task by task, runs only for a damaged batch."""
    read_task = struct_reader(messages.Task)
    try:
        return messages.TaskBatch([read_task(item) for item in batch.tasks], batch.sequence)
    except Exception:  # noqa: BLE001 - a damaged task: read them one by one
        pass
    # a fresh reader: the failed pass counted against the traversal limit
    batch = schema.Message.from_segments(segments, traversal_limit_in_words=limit).taskBatch
    tasks, damaged = [], []
    for index, item in enumerate(batch.tasks):
        try:
            tasks.append(read_task(item))
        except Exception as error:  # noqa: BLE001 - this task alone
            damaged.append(damaged_item(index, item, error, messages.Task))
    return DamagedTaskBatch(tasks, damaged, batch.sequence)


def damaged_item(index: int, item: Any, error: Exception, cls: type) -> DamagedTask:
    """What is wrong with ``item``, the struct of message type ``cls`` (a task, a result) that could not be read
    (``error``), ``index`` in its list."""
    try:
        task_id = item.taskId
    except Exception:  # noqa: BLE001 - not even its ID
        task_id = b""
    return DamagedTask(task_id, item.attempt, damage(item, cls) or problem(error))


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
            return f"{path}: {problem(error)}"
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
