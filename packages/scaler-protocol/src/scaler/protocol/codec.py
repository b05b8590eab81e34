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
from typing import Any, Callable, Dict, List, Sequence, Tuple

import capnp  # type: ignore[import-untyped]

from scaler.protocol import messages
from scaler.protocol.errors import ProtocolError

capnp.remove_import_hook()
_SCHEMA_PATH = importlib.resources.files("scaler.protocol") / "schema" / "scaler.capnp"
with importlib.resources.as_file(_SCHEMA_PATH) as _path:
    schema = capnp.load(str(_path))

MAX_FRAME_BYTES = 1 << 31


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
        else:
            lines.append("    if v:")
            lines.append(f"        items = b.init('{name}', len(v))")
            if kind == "list_struct":
                env[f"w_{attr}"] = _writer(sub)
                lines.append(f"        for i, x in enumerate(v): w_{attr}(items[i], x)")
            elif kind == "list_enum":
                env[f"n_{attr}"] = _enum_names(sub)
                lines.append(f"        for i, x in enumerate(v): items[i] = n_{attr}[x]")
            else:
                lines.append("        for i, x in enumerate(v): items[i] = x")
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
    """The name of a message type in the ``Message`` union (``taskBatch``)."""
    return _UNION_NAME_BY_TYPE[message_type]


def encode(message: Any, blobs: Sequence[Any] = ()) -> List[Any]:
    """Encode ``message`` (an instance of one of `messages.MESSAGE_TYPES`) into frames."""
    builder = schema.Message.new_message()
    _writer(type(message))(builder.init(_UNION_NAME_BY_TYPE[type(message)]), message)
    return [builder.to_bytes(), *blobs]


def decode(frames: Sequence[Any]) -> Tuple[Any, List[Any]]:
    """Decode frames into ``(message, blobs)``; raise `ProtocolError` on any malformed input."""
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
        with schema.Message.from_bytes(bytes(data), traversal_limit_in_words=size // 2 + 64) as reader:
            which = reader.which()
            cls = _TYPE_BY_UNION_NAME.get(str(which))
            if cls is None:
                raise ProtocolError(f"unknown message type {which!r}")
            message = _reader(cls)(getattr(reader, str(which)))
    except ProtocolError:
        raise
    except Exception as error:  # capnp raises KjException, ValueError, ... on bad input
        raise ProtocolError(f"cannot decode message: {type(error).__name__}: {error}") from None
    return message, list(frames[1:])
