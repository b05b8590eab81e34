"""A handle on an object the client put in object storage (`Client.send_object`)."""

from __future__ import annotations

from dataclasses import dataclass

from scaler.protocol.ids import show


@dataclass(frozen=True)
class ObjectReference:
    """Pass it as a task argument (positional or keyword): the task receives the object itself.

    Only a top-level argument is replaced by its object; a reference inside a
    list or dict reaches the task as the reference.
    """

    object_id: bytes
    name: str
    size: int

    def __repr__(self) -> str:
        return f"ObjectReference(name={self.name!r}, object_id={show(self.object_id)}, size={self.size})"
