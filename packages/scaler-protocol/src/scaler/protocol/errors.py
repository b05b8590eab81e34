"""The project's own exceptions, shared by every component.

Library errors (zmq, capnp, pickle) are translated into these at the boundary.
"""


class ScalerError(Exception):
    """Base of every error raised by Scaler itself."""


class ProtocolError(ScalerError):
    """A frame that is malformed, truncated, of an unknown type or of an incompatible version."""


class SecurityError(ScalerError):
    """Keys that cannot be used (missing, unreadable, readable by others), or a daemon that would listen on the
    network without them."""


class DisconnectedError(ScalerError):
    """The peer (scheduler, storage server) is gone or never answered."""


class ShutdownRefusedError(ScalerError, ValueError):
    """The scheduler refused a client's shutdown request (it runs with ``--protected``); a `ValueError` too, as
    the earlier engine raised."""


class WorkerDiedError(ScalerError):
    """The process running a task died before the task finished."""


class MemoryLimitError(ScalerError):
    """A task took its worker past the worker's memory limit and was stopped; its worker goes on. The message
    names the function, the limit and the memory reached (docs/memory.md)."""


class TaskCancelledError(ScalerError):
    """The task was cancelled."""


class TaskTimeoutError(ScalerError):
    """The task ran longer than the timeout it was submitted with."""


class TaskRejectedError(ScalerError):
    """The scheduler refused or gave up on a task; the message says why."""


class ObjectNotFoundError(ScalerError):
    """The object storage server holds no object with this ID."""


class ObjectStorageRefusedError(ScalerError):
    """The object storage server refused a put (too large, or storage full)."""


class RemoteTaskError(ScalerError):
    """A task raised an exception that could not be sent back as itself.

    Carries the remote exception's type name, message and traceback as text.
    """
