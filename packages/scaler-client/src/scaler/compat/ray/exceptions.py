"""The exceptions `scaler.compat.ray` raises, under the names Ray scripts catch (``ray.exceptions.X``).

A task's own exception is raised as itself (with the worker's traceback as its ``__cause__``), not wrapped
in Ray's ``RayTaskError``: catch the task's exception type.
"""

from scaler.protocol.errors import TaskCancelledError, WorkerDiedError

WorkerCrashedError = WorkerDiedError


class GetTimeoutError(TimeoutError):
    """`get` or `wait` found the objects not ready within their ``timeout``."""


__all__ = ["GetTimeoutError", "TaskCancelledError", "WorkerCrashedError"]
