"""How a failed task's result becomes the exception `ScalerFuture.result` raises on the client.

A task's own exception comes back pickled with its traceback as text (``RemoteTraceback``, its
``__cause__``); one the client cannot recreate (its class is not importable here, it fails to unpickle)
becomes a `RemoteTaskError` that names it; a dead worker or a rejection get their own errors.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import cloudpickle

from scaler.protocol.errors import RemoteTaskError, TaskRejectedError, WorkerDiedError
from scaler.protocol.ids import show
from scaler.protocol.messages import TaskResult, TaskStatus


class RemoteTraceback(Exception):
    """The ``__cause__`` of a task's exception: its traceback, as text, from the worker."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def exception_from_result(result: TaskResult) -> BaseException:
    """The exception a failed, died or rejected task raises on the client."""
    status = result.status
    if status == TaskStatus.FAILED:
        if not result.payload:
            return RemoteTaskError(result.error_text or "the task failed and its exception could not be sent back")
        return _remote_exception(result.payload, result.error_text)
    if status == TaskStatus.WORKER_DIED:
        return WorkerDiedError(result.error_text or "the worker process running the task died")
    if status == TaskStatus.REJECTED:
        return TaskRejectedError(result.error_text or "the scheduler rejected the task")
    return RemoteTaskError(f"task {show(result.task_id)} ended with unknown status {status!r}")


def _remote_exception(payload: bytes, error_text: str) -> BaseException:
    try:
        exception, traceback_text = cloudpickle.loads(payload)
    except Exception as error:
        return _unloadable_exception(payload, error, error_text)
    if not isinstance(exception, BaseException):
        return RemoteTaskError(f"the task failed with a non-exception {exception!r}: {error_text}")
    if traceback_text:
        exception.__cause__ = RemoteTraceback(str(traceback_text))
    return exception


class _Missing:
    """Stands for a class or function the client cannot import, so the rest of the pickle still loads."""

    qualified_name = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        pass


class _LenientUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception:
            return type(name, (_Missing,), {"qualified_name": f"{module}.{name}"})


def _unloadable_exception(payload: bytes, error: Exception, error_text: str) -> RemoteTaskError:
    """A RemoteTaskError that names the exception the client cannot recreate, with its remote traceback."""
    name, traceback_text = "", error_text
    try:
        exception, remote_traceback = _LenientUnpickler(io.BytesIO(payload)).load()
        name = getattr(exception, "qualified_name", "") or type(exception).__qualname__
        traceback_text = str(remote_traceback) or traceback_text
    except Exception:
        pass
    what = f"exception {name}" if name else "an exception"
    problem = RemoteTaskError(
        f"the task raised {what}, which cannot be recreated on the client ({type(error).__name__}: {error})"
    )
    if traceback_text:
        problem.__cause__ = RemoteTraceback(traceback_text)
    return problem
