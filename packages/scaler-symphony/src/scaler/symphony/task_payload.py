"""What a task is on Symphony: the payload of its input message, and of its output message.

The contract of the earlier engine, so that a Symphony service deployed for it keeps working:

- input: ``cloudpickle.dumps((function, *arguments))``; the service calls ``function(*arguments)`` (keyword
  arguments are bound into the function with `functools.partial`);
- output: the pickle of a tagged pair: ``("result", value)``, ``("exception", exception)``, or
  ``("unserializable-exception", "Type: message ...")`` when the exception itself does not pickle.

A client made while the service runs a task names that task in its ID (`task_origin`): the worker knows
the tasks it submits are nested in it (`parent_task`).

The worker builds the input without loading the task's function or arguments (`task_input`): each piece goes
into the input as the bytes the client made, wrapped so that loading the input in the service loads it
there (``pickle.loads``, or the deserialize method of the client's serializer). A Client passed as an
argument thus connects only where the task runs, and the worker needs none of the argument types. The
service side is `run_task`; the worker reads the output with `task_result`, which serializes the value with
the client's serializer (the worker must be able to load the result's types, or cloudpickle must have pickled
them by value).
"""

from __future__ import annotations

import functools
import operator
import pickle
import traceback
from typing import Any, List, Optional, Tuple

import cloudpickle

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.ids import made_in
from scaler.protocol.serializer import serialize_payload
from scaler.worker.task_failure import failure_payload
from scaler.worker.task_runner import ReadyTask

RESULT = "result"
EXCEPTION = "exception"
UNSERIALIZABLE_EXCEPTION = "unserializable-exception"
_KINDS = (RESULT, EXCEPTION, UNSERIALIZABLE_EXCEPTION)
_REDEPLOY = "deploy the service of scaler-symphony (python -m scaler.symphony.service) for this application"


def task_origin(session_id: str, symphony_task_id: str) -> str:
    """How the service names the task it runs, for the clients made meanwhile (`ids.clients_made_in`)."""
    return f"symphony:{session_id}:{symphony_task_id}"


def parent_task(client_id: bytes) -> Optional[Tuple[str, str]]:
    """(session ID, Symphony task ID) of the Symphony task a client was made in; None if made in none."""
    kind, _, where = made_in(client_id).partition(":")
    if kind != "symphony":
        return None
    session_id, _, symphony_task_id = where.rpartition(":")
    return session_id, symphony_task_id


class _Call:
    """Pickles as ``function(*arguments)`` (then ``__setstate__(state)`` if a state is given): whoever loads
    the pickle makes the value, from plain pickle machinery only."""

    __slots__ = ("_reduced",)

    def __init__(self, function: Any, arguments: Tuple[Any, ...], state: Any = None) -> None:
        self._reduced = (function, arguments) if state is None else (function, arguments, state)

    def __reduce__(self) -> Any:
        return self._reduced


def task_input(ready: ReadyTask) -> bytes:
    """The input payload of ``ready``, whose function, serializer and object arguments are all present."""
    task = ready.task
    if ready.function is None:
        raise ValueError(f"task {task.task_id.hex()}: its function is missing")
    serializer = _Call(pickle.loads, (ready.serializer,)) if task.serializer_id else None
    function: Any = _Call(pickle.loads, (_data(ready.function),))
    positional: List[Any] = []
    named = {}
    for name, payload, _ in ready.arguments:
        value = _argument(serializer, payload)
        if name:
            named[name] = value
        else:
            positional.append(value)
    if named:
        function = _Call(functools.partial, (function,), (function, (), named, None))
    return pickle.dumps((function, *positional), protocol=pickle.HIGHEST_PROTOCOL)


def _argument(serializer: Optional[_Call], payload: Any) -> _Call:
    if type(payload) is list:
        if len(payload) > 1:
            if serializer is not None:
                raise ValueError(f"an argument of {len(payload)} frames, but only the default serializer writes frames")
            buffers = [_data(frame) for frame in payload[1:]]
            return _Call(functools.partial(pickle.loads, buffers=buffers), (_data(payload[0]),))
        payload = payload[0]
    if serializer is None:  # the default serializer's payloads are pickles
        return _Call(pickle.loads, (_data(payload),))
    return _Call(operator.methodcaller("deserialize", bytes(payload)), (serializer,))


def _data(frame: Any) -> Any:
    """A frame as it goes into the input: read-only, so it loads as bytes; not copied before pickling."""
    return frame if type(frame) is bytes else pickle.PickleBuffer(memoryview(frame).toreadonly())


# ----------------------------------------------------------------------------- in the service


def run_task(payload: bytes) -> bytes:
    """What the service does with an input payload: its output payload."""
    try:
        function, *arguments = cloudpickle.loads(payload)
        value = function(*arguments)
    except BaseException as error:  # SystemExit or KeyboardInterrupt of a task are its failure, not the service's
        return _tagged_exception(error)
    try:
        output: bytes = cloudpickle.dumps((RESULT, value))
    except Exception as error:  # the result does not pickle: the client gets why
        return _tagged_exception(error)
    return output


def _tagged_exception(error: BaseException) -> bytes:
    frames = traceback.format_tb(error.__traceback__.tb_next if error.__traceback__ else None)
    if frames:  # PEP 678 notes travel with the exception and show in the client's traceback (Python 3.11+)
        note = "Traceback in the Symphony service (most recent call last):\n" + "".join(frames).rstrip()
        error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]  # (3.10 typing)
    try:
        output: bytes = cloudpickle.dumps((EXCEPTION, error))
        cloudpickle.loads(output)  # the worker must be able to load it
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        output = cloudpickle.dumps((UNSERIALIZABLE_EXCEPTION, text))
    return output


# ----------------------------------------------------------------------------- back in the worker


def task_result(output: Any, serializer: Any) -> Tuple[int, Any, str]:
    """(status, payload, error text) of a task whose service answered ``output``, for `RunnerOwner.finished`:
    the value serialized with ``serializer`` (the client's), or the failure (`task_failure`)."""
    try:
        loaded = pickle.loads(output)
    except Exception as error:
        return _failed(ProtocolError(f"the Symphony service's output does not load ({type(error).__name__}: {error})"))
    if type(loaded) is not tuple or len(loaded) != 2 or loaded[0] not in _KINDS:
        return _failed(ProtocolError(f"the Symphony service's output is not a tagged (kind, value) pair: {_REDEPLOY}"))
    kind, value = loaded
    if kind == RESULT:
        try:
            return m.TaskStatus.SUCCESS, serialize_payload(serializer, value), ""
        except Exception as error:
            return _failed(error, traceback.format_exc())
    if kind == EXCEPTION and isinstance(value, BaseException):
        return _failed(value)
    if kind == UNSERIALIZABLE_EXCEPTION and isinstance(value, str):
        return m.TaskStatus.FAILED, b"", value
    what = type(value).__name__
    return _failed(ProtocolError(f"the Symphony service's {kind!r} output carries a {what}: {_REDEPLOY}"))


def _failed(error: BaseException, traceback_text: Optional[str] = None) -> Tuple[int, Any, str]:
    payload, error_text = failure_payload(error, traceback_text)
    return m.TaskStatus.FAILED, payload, error_text
