"""`ScalerFuture`: a concurrent.futures.Future for one task, and how a TaskResult becomes its outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import pickle
import time
from typing import Any, Callable, Generator, Optional

import cloudpickle

from scaler.protocol.errors import RemoteTaskError, TaskRejectedError, WorkerDiedError
from scaler.protocol.ids import show
from scaler.protocol.messages import Profiling, TaskResult, TaskStatus

# Stands for a successful result whose payload is not deserialized yet.
_UNDECODED = object()

WaitHook = Callable[[Callable[[], bool], Optional[float]], None]
_wait_hook: Optional[WaitHook] = None


def set_wait_hook(hook: Optional[WaitHook]) -> Optional[WaitHook]:
    """Install ``hook(done, timeout)`` for the client's blocking waits; return the previous one (None: none).

    `ScalerFuture.result`, `ScalerFuture.exception`, `ScalerFuture.profiling_info` and `Client.map` call it
    before they wait on their futures. It may do other work meanwhile (a Scaler worker runs other tasks
    there, so that a task waiting on the tasks it submitted does not hold the worker), and returns once
    ``done()`` is true or ``timeout`` seconds (None: no limit) have passed, or earlier to let the caller
    wait as usual for the rest. None restores plain waiting.
    """
    global _wait_hook
    previous, _wait_hook = _wait_hook, hook
    return previous


def wait_with_hook(done: Callable[[], bool], timeout: Optional[float]) -> Optional[float]:
    """Let the wait hook, if any, wait for ``done()``; return what is left of ``timeout`` (None: no limit)."""
    hook = _wait_hook
    if hook is None or done():
        return timeout
    if timeout is None:
        hook(done, None)
        return None
    deadline = time.monotonic() + timeout
    hook(done, timeout)
    return max(0.0, deadline - time.monotonic())


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


class ScalerFuture(concurrent.futures.Future):
    """The future of one task.

    Works with `concurrent.futures.wait`, `as_completed`, `add_done_callback`
    (callbacks run in the client's agent thread: keep them short and never block
    in them) and ``await future``. A successful result is deserialized on the
    first call to `result` or `exception`, in the calling thread.
    """

    def __init__(self, task_id: bytes, client: Any, serializer: Any, profiling: bool, cancel_wait_seconds: float = 5.0):
        super().__init__()
        self._task_id = task_id
        self._client = client  # keeps the client alive while the task runs; used by cancel()
        self._serializer = serializer
        self._profiling_enabled = profiling
        self._cancel_wait_seconds = cancel_wait_seconds
        self._payload: Optional[bytes] = None
        self._decode_error: Optional[BaseException] = None
        self._profiling: Optional[Profiling] = None
        self._cancel_refused = False

    @property
    def task_id(self) -> bytes:
        return self._task_id

    def __repr__(self) -> str:
        return f"<ScalerFuture task={show(self._task_id)} {super().__repr__()[1:-1]}>"

    # --- user side -------------------------------------------------------------------------------

    def result(self, timeout: Optional[float] = None) -> Any:
        value = super().result(wait_with_hook(self.done, timeout))
        if value is _UNDECODED:
            return self._decode()
        return value

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        error = super().exception(wait_with_hook(self.done, timeout))
        if error is not None:
            return error
        try:
            self._decode()
        except Exception as decode_error:
            return decode_error
        return None

    def cancel(self) -> bool:
        """Ask the scheduler to cancel the task and wait (a few seconds at most) for its answer.

        True when the task was cancelled; False when it had finished (or its
        result arrived first, or no answer came in time).
        """
        with self._condition:
            if self.done():
                return self.cancelled()
        client = self._client
        if client is None:
            return self._set_cancelled()
        with self._condition:
            self._cancel_refused = False
        try:
            client._cancel_tasks([self._task_id])
        except Exception:  # the client is closed: the future was failed already
            return self.cancelled()
        if client._in_agent_thread():  # e.g. from a done callback: the answer cannot arrive while we wait
            return self.cancelled()
        with self._condition:
            self._condition.wait_for(lambda: self.done() or self._cancel_refused, timeout=self._cancel_wait_seconds)
        return self.cancelled()

    def profiling_info(self, timeout: Optional[float] = None) -> Profiling:
        """The task's duration, CPU time and peak memory, measured on the worker.

        Waits for the task like `result` does. Raises ValueError when the client
        was created without ``profiling=True`` or when the task never ran.
        """
        if not self._profiling_enabled:
            raise ValueError("profiling is off for this task: create the Client with profiling=True")
        timeout = wait_with_hook(self.done, timeout)
        with self._condition:
            if not self._condition.wait_for(self.done, timeout=timeout):
                raise concurrent.futures.TimeoutError()
        if self._profiling is None:
            raise ValueError(f"task {show(self._task_id)} has no profiling: it ended without a result from a worker")
        return self._profiling

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self).__await__()

    def _decode(self) -> Any:
        with self._condition:
            if self._result is not _UNDECODED:
                return self._result
            if self._decode_error is not None:
                raise self._decode_error
            try:
                value = self._serializer.deserialize(self._payload)
            except Exception as error:
                self._decode_error = error
                raise
            self._result = value
            self._payload = None
            return value

    # --- agent side (the client's agent thread resolves futures) ---------------------------------

    def _set_task_result(self, result: TaskResult) -> None:
        if self._profiling_enabled:
            self._profiling = result.profiling
        status = result.status
        if status == TaskStatus.SUCCESS:
            self._payload = result.payload
            self._set_value(_UNDECODED)
        elif status == TaskStatus.CANCELLED:
            self._set_cancelled()
        else:
            self._set_error(exception_from_result(result))

    def _set_value(self, value: Any) -> None:
        try:
            self.set_result(value)
        except concurrent.futures.InvalidStateError:
            pass

    def _set_error(self, error: BaseException) -> None:
        try:
            self.set_exception(error)
        except concurrent.futures.InvalidStateError:
            pass

    def _set_cancel_refused(self) -> None:
        with self._condition:
            self._cancel_refused = True
            self._condition.notify_all()

    def _set_cancelled(self) -> bool:
        return super().cancel()
