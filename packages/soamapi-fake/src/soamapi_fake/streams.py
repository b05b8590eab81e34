"""A message's bytes in the fake: the typed records its ``on_serialize`` wrote, read back in the same order.

Symphony serializes a task's input when `Session.send_task_input` is called and its output when the service
sets it, through the message's own ``on_serialize``/``on_deserialize``; so does the fake. Reading a record
of another type than the one written, or past the last one, raises `SoamException`, as mismatched hooks
would fail on a real grid. Records are plain tuples, so they cross to a service-instance process in a pickle.
"""

from __future__ import annotations

import array
from typing import Any, List, Tuple

from soamapi_fake.errors import SoamException

Record = Tuple[Any, ...]  # ("bytes", itemsize, raw bytes) | ("string", str) | ("int", int) | ...


class OutputStream:
    def __init__(self) -> None:
        self.records: List[Record] = []

    def write_byte_array(self, data: Any, offset: int, length: int) -> None:
        if not isinstance(data, array.array):
            raise SoamException(f"write_byte_array takes an array.array, not {type(data).__name__}")
        if offset < 0 or length < 0 or offset + length > len(data):
            raise SoamException(f"write_byte_array: [{offset}, {offset + length}) is outside an array of {len(data)}")
        self.records.append(("bytes", data.itemsize, data[offset : offset + length].tobytes()))

    def write_string(self, value: str) -> None:
        self._write("string", str, value)

    def write_int(self, value: int) -> None:
        self._write("int", int, value)

    def write_long(self, value: int) -> None:
        self._write("long", int, value)

    def write_bool(self, value: bool) -> None:
        self._write("bool", bool, value)

    def write_double(self, value: float) -> None:
        self._write("double", float, value)

    def _write(self, kind: str, expected: type, value: Any) -> None:
        if not isinstance(value, expected):
            raise SoamException(f"write_{kind} takes a {expected.__name__}, not {type(value).__name__}")
        self.records.append((kind, value))


class InputStream:
    def __init__(self, records: List[Record]) -> None:
        self._records = records
        self._position = 0

    def read_byte_array(self, typecode: str) -> array.array:
        _, itemsize, raw = self._read("bytes")
        result = array.array(typecode)
        if result.itemsize != itemsize:
            raise SoamException(
                f"read_byte_array({typecode!r}): items of {result.itemsize} bytes, but {itemsize}-byte items were "
                "written"
            )
        result.frombytes(raw)
        return result

    def read_string(self) -> str:
        return self._read("string")[1]

    def read_int(self) -> int:
        return self._read("int")[1]

    def read_long(self) -> int:
        return self._read("long")[1]

    def read_bool(self) -> bool:
        return self._read("bool")[1]

    def read_double(self) -> float:
        return self._read("double")[1]

    def _read(self, kind: str) -> Record:
        if self._position >= len(self._records):
            raise SoamException(f"read_{kind}: the message has no more records ({len(self._records)} were written)")
        record = self._records[self._position]
        if record[0] != kind:
            raise SoamException(f"read_{kind}: record {self._position} of the message was written as {record[0]}")
        self._position += 1
        return record


def serialize(message: Any) -> List[Record]:
    """What ``message.on_serialize`` writes; its failure is a `SoamException`, as Symphony reports it."""
    stream = OutputStream()
    try:
        message.on_serialize(stream)
    except SoamException:
        raise
    except Exception as error:
        raise SoamException(f"{type(message).__name__}.on_serialize raised {type(error).__name__}: {error}") from None
    return stream.records


def deserialize(message: Any, records: List[Record]) -> None:
    """Fill ``message`` from ``records`` through its ``on_deserialize``."""
    try:
        message.on_deserialize(InputStream(records))
    except SoamException:
        raise
    except Exception as error:
        raise SoamException(f"{type(message).__name__}.on_deserialize raised {type(error).__name__}: {error}") from None
