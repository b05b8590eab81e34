"""The message both ends of a Symphony task use: one byte array, the task's input or output payload."""

from __future__ import annotations

import array

import soamapi


class PayloadMessage(soamapi.Message):
    def __init__(self, payload: bytes = b"") -> None:
        super().__init__()
        self.payload = payload

    def on_serialize(self, stream: soamapi.OutputStream) -> None:
        data = array.array("b", self.payload)
        stream.write_byte_array(data, 0, len(data))

    def on_deserialize(self, stream: soamapi.InputStream) -> None:
        self.payload = stream.read_byte_array("b").tobytes()
