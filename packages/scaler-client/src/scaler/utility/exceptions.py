"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md)."""

from scaler.protocol.errors import DisconnectedError, ObjectNotFoundError, RemoteTaskError, WorkerDiedError

ProcessorDiedError = WorkerDiedError
TaskExceptionNotSerializableError = RemoteTaskError
MissingObjects = ObjectNotFoundError

__all__ = [
    "DisconnectedError",
    "MissingObjects",
    "ProcessorDiedError",
    "TaskExceptionNotSerializableError",
    "WorkerDiedError",
]
