"""A handle on an object the client put in object storage (`Client.send_object`)."""

from __future__ import annotations

from dataclasses import dataclass

from scaler.protocol.ids import show


@dataclass(frozen=True)
class ObjectReference:
    """Pass it as a task argument (positional or keyword), or inside an argument's lists, tuples and dicts at any
    depth: the task receives the object itself (`nested_references.py`).
    """

    object_id: bytes
    name: str
    size: int

    def __repr__(self) -> str:
        return f"ObjectReference(name={self.name!r}, object_id={show(self.object_id)}, size={self.size})"
