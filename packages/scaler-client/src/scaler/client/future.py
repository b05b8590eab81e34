"""`ScalerFuture`: a concurrent.futures.Future for one task, and how a TaskResult becomes its outcome.

The client's agent thread ends each future once, with what the client's core decided for its task (a
result, an error, cancelled: see client_lifecycles.py); the future's own states are those of
`concurrent.futures`, moved by one table, `FUTURE`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import os
import threading
from concurrent.futures import _base as _futures_base
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from scaler.client.remote_errors import exception_from_result
from scaler.client.serializer import deserialize_payload, serialize_payload
from scaler.protocol.ids import show
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.messages import Profiling, TaskResult, TaskStatus
from scaler.protocol.task_context import Wake, wait_with_hook

# Stands for a successful result whose payload is not deserialized yet.
_UNDECODED = object()


# The states of concurrent.futures (the same strings on Python 3.10 to 3.13), so that `wait` and
# `as_completed`, which read ``_state`` directly, see a ScalerFuture exactly as they see any Future.
_PENDING = _futures_base.PENDING
_RUNNING = _futures_base.RUNNING
_CANCELLED = _futures_base.CANCELLED  # never entered: a ScalerFuture is cancelled and notified at once
_CANCELLED_AND_NOTIFIED = _futures_base.CANCELLED_AND_NOTIFIED
_FINISHED = _futures_base.FINISHED
_DONE_STATES = frozenset((_CANCELLED, _CANCELLED_AND_NOTIFIED, _FINISHED))
_CANCELLED_STATES = frozenset((_CANCELLED, _CANCELLED_AND_NOTIFIED))


class FutureEvent(enum.Enum):
    RUN = "run"  # set_running_or_notify_cancel, the executor's protocol
    FINISH = "finish"  # a result or an exception
    CANCEL = "cancel"  # the task was cancelled (the scheduler confirmed, or it never left)

    __hash__ = object.__hash__


class FutureAction(enum.Enum):
    WAKE = "wake"  # the future is done: wake whoever waits on it (its Condition, wait(), its batch, callbacks)

    __hash__ = object.__hash__


FUTURE = Lifecycle(
    "future",
    states=[_PENDING, _RUNNING, _CANCELLED_AND_NOTIFIED, _FINISHED],
    terminal=[_CANCELLED_AND_NOTIFIED, _FINISHED],
    table={
        (_PENDING, FutureEvent.RUN): Transition(_RUNNING),
        (_PENDING, FutureEvent.FINISH): Transition(_FINISHED, (FutureAction.WAKE,)),
        (_RUNNING, FutureEvent.FINISH): Transition(_FINISHED, (FutureAction.WAKE,)),
        (_PENDING, FutureEvent.CANCEL): Transition(_CANCELLED_AND_NOTIFIED, (FutureAction.WAKE,)),
    },
    always_possible=[FutureEvent.FINISH],
)
# The table by event: state -> (next state, whether it wakes). A future ends once: a second outcome finds no
# entry and is ignored (the agent's side), or refused like any Future's (set_result, set_exception).
_ON: Dict[FutureEvent, Dict[str, Tuple[str, bool]]] = {event: {} for event in FutureEvent}
for (_state, _event), _transition in FUTURE.table.items():
    _ON[_event][_state] = (_transition.next_state, FutureAction.WAKE in _transition.actions)
_ON_RUN, _ON_FINISH, _ON_CANCEL = _ON[FutureEvent.RUN], _ON[FutureEvent.FINISH], _ON[FutureEvent.CANCEL]

# One lock guards the state of every ScalerFuture of the process (its state, outcome, waiters and
# callbacks). A pending future therefore owns no lock and no Condition: it is a small slotted object,
# cheap to create in the user thread. The lock is re-entrant because `concurrent.futures.wait` and
# `as_completed` acquire ``f._condition`` of every future they are given, one after the other.
# Every critical section under it is a few attribute writes: no user code, no deserialization.
_LOCK = threading.RLock()
# What ``future._condition`` is for the concurrent.futures module functions: they only acquire and
# release it around reading ``_state`` and editing ``_waiters``. Waiting on one future uses a
# Condition of its own, created on the first wait (``ScalerFuture._wait_condition``).
_SHARED_CONDITION = threading.Condition(_LOCK)


def _reset_lock_after_fork() -> None:
    """A child forked while another thread held the lock would never see it released."""
    global _LOCK, _SHARED_CONDITION
    _LOCK = threading.RLock()
    _SHARED_CONDITION = threading.Condition(_LOCK)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reset_lock_after_fork)


class FutureBatch:
    """Counts the ends of a group of futures (the tasks of one `map`, the keys of one `get`).

    The caller waits on this one condition instead of on each future: it wakes when every future of
    the group has ended (once `close` told how many there are) or when one of them failed or was
    cancelled. Each future names its batch from birth, so no end can be missed.
    """

    __slots__ = ("_condition", "_ended", "_expected", "_failed", "_wakers")

    def __init__(self) -> None:
        self._condition = threading.Condition(_LOCK)
        self._ended = 0
        self._expected = -1  # unknown until close()
        self._failed = False
        self._wakers: Optional[List[Wake]] = None  # of a task waiting in its processor (scaler.protocol.task_context)

    def close(self, expected: int) -> None:
        """No more futures join the batch: ``expected`` futures were created with it."""
        with _LOCK:
            self._expected = expected
            if self._ended >= expected:
                self._wake()

    def notify(self, wake: Wake) -> None:
        """Call ``wake()`` once the batch is finished (at once if it is): how a processor hears that a task
        waiting on it may go on."""
        with _LOCK:
            if not self.finished():
                if wake not in (self._wakers or ()):  # the same waiter, waiting again (a timeout passed)
                    self._wakers = [*(self._wakers or ()), wake]
                return
        wake()

    def finished(self) -> bool:
        """True once every future ended, or one failed (or was cancelled)."""
        return self._failed or 0 <= self._expected <= self._ended

    @property
    def failed(self) -> bool:
        return self._failed

    def wait(self, timeout: Optional[float] = None) -> bool:
        with _LOCK:
            return self._condition.wait_for(self.finished, timeout)

    def _future_ended(self, failed: bool) -> None:  # called with _LOCK held
        self._ended += 1
        if failed:
            self._failed = True
        if failed or self._ended == self._expected:
            self._wake()

    def _wake(self) -> None:  # called with _LOCK held
        self._condition.notify_all()
        wakers, self._wakers = self._wakers, None
        for wake in wakers or ():
            wake()


class ScalerFuture(concurrent.futures.Future):
    """The future of one task.

    Works with `concurrent.futures.wait`, `as_completed`, `add_done_callback`
    (callbacks run in the client's agent thread: keep them short and never block
    in them) and ``await future``. A successful result is deserialized on the
    first call to `result` or `exception`, in the calling thread.

    It overrides every method of `concurrent.futures.Future` and never calls its
    ``__init__``: a pending future holds no lock or Condition (the module's one
    lock guards all futures) until a thread waits on it.
    """

    __slots__ = (
        "_state",
        "_result",
        "_exception",
        "_own_condition",  # created by the first thread that waits on this very future
        "_waiter_list",  # waiters of concurrent.futures.wait / as_completed, created when they install one
        "_callback_list",
        "_batch",
        "_task_id",
        "_client",
        "_serializer",
        "_profiling_enabled",
        "_cancel_wait_seconds",
        "_payload",
        "_decode_error",
        "_profiling",
        "_cancel_refused",
        "_wakers",  # of tasks waiting on it in a processor (scaler.protocol.task_context)
    )

    def __init__(
        self,
        task_id: bytes,
        client: Any,
        serializer: Any,
        profiling: bool,
        cancel_wait_seconds: float = 5.0,
        batch: Optional[FutureBatch] = None,
    ):
        self._state = _PENDING
        self._result: Any = None
        self._exception: Optional[BaseException] = None
        self._own_condition: Optional[threading.Condition] = None
        self._waiter_list: Optional[List[Any]] = None
        self._callback_list: Optional[List[Callable[[Any], Any]]] = None
        self._batch = batch
        self._task_id = task_id
        self._client = client  # keeps the client alive while the task runs; used by cancel()
        self._serializer = serializer
        self._profiling_enabled = profiling
        self._cancel_wait_seconds = cancel_wait_seconds
        self._payload: Optional[bytes] = None
        self._decode_error: Optional[BaseException] = None
        self._profiling: Optional[Profiling] = None
        self._cancel_refused = False
        self._wakers: Optional[List[Wake]] = None

    @property
    def task_id(self) -> bytes:
        return self._task_id

    def __repr__(self) -> str:
        return f"<ScalerFuture task={show(self._task_id)} {super().__repr__()[1:-1]}>"

    # --- what concurrent.futures reads directly ----------------------------------------------------

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        """The lock `concurrent.futures.wait` and `as_completed` hold while they read ``_state`` and
        edit ``_waiters`` (shared by all futures; re-entrant). Nothing waits on it."""
        return _SHARED_CONDITION

    @property
    def _waiters(self) -> List[Any]:  # type: ignore[override]
        if self._waiter_list is None:  # only ever touched with _LOCK held (through _condition)
            self._waiter_list = []
        return self._waiter_list

    @property
    def _done_callbacks(self) -> List[Callable[[Any], Any]]:  # type: ignore[override]
        with _LOCK:
            if self._callback_list is None:
                self._callback_list = []
            return self._callback_list

    # --- state ------------------------------------------------------------------------------------------

    def done(self) -> bool:
        return self._state in _DONE_STATES

    def cancelled(self) -> bool:
        return self._state in _CANCELLED_STATES

    def running(self) -> bool:
        return self._state == _RUNNING

    # --- user side -------------------------------------------------------------------------------

    def result(self, timeout: Optional[float] = None) -> Any:
        if self._state not in _DONE_STATES:
            self._wait(wait_with_hook(self.done, timeout, self.notify))
        with _LOCK:
            state, value, error = self._state, self._result, self._exception
        if state in _CANCELLED_STATES:
            raise concurrent.futures.CancelledError()
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no reference cycle through the traceback
        if value is _UNDECODED:
            return self._decode()
        return value

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        if self._state not in _DONE_STATES:
            self._wait(wait_with_hook(self.done, timeout, self.notify))
        with _LOCK:
            state, error = self._state, self._exception
        if state in _CANCELLED_STATES:
            raise concurrent.futures.CancelledError()
        if error is not None:
            return error
        try:
            self._decode()
        except Exception as decode_error:
            return decode_error
        return None

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        with _LOCK:
            if self._state not in _DONE_STATES:
                if self._callback_list is None:
                    self._callback_list = [fn]
                else:
                    self._callback_list.append(fn)
                return
        try:
            fn(self)
        except Exception:
            _futures_base.LOGGER.exception("exception calling callback for %r", self)

    def notify(self, wake: Wake) -> None:
        """Call ``wake()`` (from the thread that ends the future) once it is done, at once if it is: how a
        processor hears that a task waiting on it may go on."""
        with _LOCK:
            if self._state not in _DONE_STATES:
                if wake not in (self._wakers or ()):  # the same waiter, waiting again (a timeout passed)
                    self._wakers = [*(self._wakers or ()), wake]
                return
        wake()

    def cancel(self, timeout: Optional[float] = None) -> bool:
        """Ask the scheduler to cancel the task and wait for its answer: ``timeout`` seconds, or by default a few.

        True when the task was cancelled; False when it had finished (or its
        result arrived first, or no answer came in time).
        """
        if self._state in _DONE_STATES:
            return self.cancelled()
        client = self._client
        if client is None:
            return self._set_cancelled()
        with _LOCK:
            self._cancel_refused = False
        try:
            client._cancel_tasks([self._task_id])
        except Exception:  # the client is closed: the future was failed already
            return self.cancelled()
        if client._in_agent_thread():  # e.g. from a done callback: the answer cannot arrive while we wait
            return self.cancelled()
        with _LOCK:
            self._wait_condition().wait_for(
                lambda: self._state in _DONE_STATES or self._cancel_refused,
                timeout=self._cancel_wait_seconds if timeout is None else timeout,
            )
        return self.cancelled()

    def profiling_info(self, timeout: Optional[float] = None) -> Profiling:
        """The task's duration, CPU time and peak memory, measured on the worker.

        Raises ValueError when the client was created without ``profiling=True``, when the task never ran, or
        when it has not ended (as the earlier engine does); with ``timeout``, it first waits that long for the
        task to end, as `result` does.
        """
        if not self._profiling_enabled:
            raise ValueError("profiling is off for this task: create the Client with profiling=True")
        if self._state not in _DONE_STATES and timeout is not None:
            self._wait(wait_with_hook(self.done, timeout, self.notify))
        if self._state not in _DONE_STATES:
            raise ValueError(f"task {show(self._task_id)} has not ended: its profiling comes with its result")
        with _LOCK:
            profiling = self._profiling
        if profiling is None:
            raise ValueError(f"task {show(self._task_id)} has no profiling: it ended without a result from a worker")
        return profiling

    def __reduce__(self) -> Any:
        raise TypeError(
            f"{self!r} cannot be pickled. Pass a future to a task as an argument of its own, or inside a list, tuple "
            "or dict (the task receives its value), or pass future.result()"
        )

    def _argument_outcome(self) -> Tuple[Any, Optional[BaseException], bool]:
        """How a done future is another task's argument: (its payload, None, False), (None, its error, False) or
        (None, None, True) if cancelled. Its payload as it came, or, once decoded, its value serialized again."""
        with _LOCK:
            state, value, error, payload = self._state, self._result, self._exception, self._payload
        if state in _CANCELLED_STATES:
            return None, None, True
        if error is not None:
            return None, error, False
        if value is _UNDECODED:
            return payload, None, False
        return serialize_payload(self._serializer, value), None, False

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self).__await__()

    def _wait(self, timeout: Optional[float]) -> None:
        """Block until done; concurrent.futures.TimeoutError after ``timeout`` seconds (None: no limit)."""
        with _LOCK:
            if self._state in _DONE_STATES:
                return
            if timeout is not None and timeout <= 0:
                raise concurrent.futures.TimeoutError()
            if not self._wait_condition().wait_for(self.done, timeout):
                raise concurrent.futures.TimeoutError()

    def _wait_condition(self) -> threading.Condition:  # called with _LOCK held
        condition = self._own_condition
        if condition is None:
            condition = self._own_condition = threading.Condition(_LOCK)
        return condition

    def _decode(self) -> Any:
        """Deserialize a successful result once, outside the lock (it may run user code); first one wins."""
        with _LOCK:
            value, payload, error = self._result, self._payload, self._decode_error
        if value is not _UNDECODED:
            return value
        if error is not None:
            raise error
        try:
            value = deserialize_payload(self._serializer, payload)
        except Exception as decode_error:
            with _LOCK:
                if self._result is _UNDECODED and self._decode_error is None:
                    self._decode_error = decode_error
            raise
        with _LOCK:
            if self._result is _UNDECODED:
                self._result = value
                self._payload = None
            return self._result

    # --- the executor's side: the client's agent thread resolves futures ---------------------------------

    def set_running_or_notify_cancel(self) -> bool:
        with _LOCK:
            step = _ON_RUN.get(self._state)
            if step is None:
                raise RuntimeError(f"Future in unexpected state: {self._state}")
            self._state = step[0]
            return True

    def set_result(self, result: Any) -> None:
        if not self._finish(result, None):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def set_exception(self, exception: Optional[BaseException]) -> None:
        if not self._finish(None, exception):
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")

    def _finish(self, value: Any, error: Optional[BaseException]) -> bool:
        """End with a result or an exception; False when the future had already ended."""
        return self._end(_ON_FINISH, value, error)

    def _set_cancelled(self) -> bool:
        """The task is cancelled (the scheduler confirmed, or it never left): end the future so.

        Unlike `concurrent.futures.Future.cancel`, which leaves the waiters to the executor's
        ``set_running_or_notify_cancel``, this is the executor's side too: waiters hear of it at once.
        """
        return self._end(_ON_CANCEL, None, None) or self._state in _CANCELLED_STATES

    def _end(
        self,
        on: Dict[str, Tuple[str, bool]],
        value: Any,
        error: Optional[BaseException],
        payload: Optional[bytes] = None,
        profiling: Any = None,
    ) -> bool:
        """Move on FINISH or CANCEL (``on``: that event's part of the table) and carry out WAKE: tell whoever
        waits (its Condition, concurrent.futures.wait, its batch), then run the callbacks. False when the
        future had ended already (its second outcome is ignored)."""
        with _LOCK:
            step = on.get(self._state)
            if step is None:
                return False
            if payload is not None:
                self._payload = payload
            if profiling is not None:
                self._profiling = profiling
            self._result = value
            self._exception = error
            self._state, wakes = step
            if wakes:
                condition = self._own_condition
                if condition is not None:
                    condition.notify_all()
                cancelled = on is _ON_CANCEL
                for waiter in self._waiter_list or ():
                    if cancelled:
                        waiter.add_cancelled(self)
                    elif error is None:
                        waiter.add_result(self)
                    else:
                        waiter.add_exception(self)
                batch = self._batch
                if batch is not None:
                    batch._future_ended(cancelled or error is not None)
            callbacks = self._callback_list
            wakers = self._wakers
            if wakers is not None:
                self._wakers = None
        if wakers is not None:
            for wake in wakers:
                wake()
        if callbacks:
            self._invoke_callbacks()
        return True

    def _invoke_callbacks(self) -> None:
        for callback in self._callback_list or ():
            try:
                callback(self)
            except Exception:
                _futures_base.LOGGER.exception("exception calling callback for %r", self)

    def _set_task_result(self, result: TaskResult) -> None:
        status = result.status
        profiling = result.profiling if self._profiling_enabled else None
        if status == TaskStatus.SUCCESS:
            self._end(_ON_FINISH, _UNDECODED, None, result.payload, profiling)
        elif status == TaskStatus.CANCELLED:
            if profiling is not None:
                with _LOCK:
                    self._profiling = profiling
            self._set_cancelled()
        else:
            self._end(_ON_FINISH, None, exception_from_result(result), None, profiling)

    def _set_value(self, value: Any) -> None:
        self._finish(value, None)

    def _set_error(self, error: BaseException) -> None:
        self._finish(None, error)

    def _set_cancel_refused(self) -> None:
        with _LOCK:
            self._cancel_refused = True
            condition = self._own_condition
            if condition is not None:
                condition.notify_all()
