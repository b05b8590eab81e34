"""One task's call in the processor: its function loaded, its arguments read, its result (or failure) written.

The processor (`processor.py`) calls `call_task` in the task's own greenlet; what a task needs was taken from
the caches as it was read (`processor_core.InProcessor`); a function or a serializer is kept loaded there
(`Loaded`, which holds the exception of a load that failed, so that the cache, of which the agent keeps a copy,
holds an entry either way). A result's payload is the serializer's (`scaler.protocol.serializer`): the
default one's large buffers cross the Pipe out of band; a failure's is `task_failure`'s.
"""

from __future__ import annotations

import time
import traceback
from pickle import PickleBuffer
from typing import Any, Callable, Dict, List, Optional

import cloudpickle

from scaler.protocol.messages import TaskStatus
from scaler.protocol.serializer import DefaultSerializer, deserialize_payload, serialize_payload
from scaler.protocol.task_runs import function_name
from scaler.worker.memory_limit import refused_allocation
from scaler.worker.processor_core import InProcessor
from scaler.worker.processor_protocol import ProcessorResult
from scaler.worker.task_failure import error_line, failure_payload

_DEFAULT_SERIALIZER = DefaultSerializer()  # of tasks whose client did not choose one


class Loaded:
    """A function or serializer loaded from its cloudpickled bytes, or the exception raised while loading it."""

    __slots__ = ("value", "error", "traceback_text", "name")

    def __init__(self, payload: bytes) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.traceback_text = ""
        self.name = ""  # module.qualname, reported with each result for monitors
        try:
            self.value = cloudpickle.loads(payload)
        except Exception as error:
            self.error = error
            self.traceback_text = traceback.format_exc()
        else:
            self.name = function_name(self.value)


def call_task(
    held: InProcessor,
    started: float,
    memory_limit: int,
    output: Optional[Callable[[], None]] = None,
) -> ProcessorResult:
    """Run ``held`` (started at ``started``, `time.perf_counter`): its result, or its failure. ``output``:
    called once the function returned or raised, before the result is made (a task that streams its output
    sends the rest of it first); ``memory_limit`` (bytes, 0: none): a `MemoryError` past it is the limit's."""
    task = held.task
    function = held.function
    name = function.name if function is not None else ""
    for entry in (function, held.serializer):
        if entry is not None and entry.error is not None:
            return _failed(task.task_id, entry.error, entry.traceback_text)._replace(function=name)
    if held.problem is not None or function is None:
        return _failed(task.task_id, held.problem or RuntimeError("no function"), "")._replace(function=name)
    serializer = held.serializer.value if held.serializer is not None else _DEFAULT_SERIALIZER

    try:
        positional: List[Any] = []
        named: Dict[str, Any] = {}
        for argument, payload, _ in held.arguments:
            value = deserialize_payload(serializer, payload)
            if argument:
                named[argument] = value
            else:
                positional.append(value)
    except Exception as error:
        return _failed(task.task_id, error, traceback.format_exc())._replace(function=name)

    failure: Optional[BaseException] = None
    try:
        value = function.value(*positional, **named)
    except BaseException as raised:  # SystemExit and KeyboardInterrupt of a task are its failure, not ours
        failure, value = raised, None
    if output is not None:
        output()  # before the result: the client prints the output, then the result arrives
    over_memory = False
    if failure is None:
        try:
            payload = serialize_payload(serializer, value)
            if type(payload) is list:  # the default serializer's frames: the large ones cross the Pipe out of band
                payload = [PickleBuffer(frame) for frame in payload]
            elif isinstance(payload, (bytes, bytearray, memoryview)):
                payload = bytes(payload)
            else:
                raise TypeError(f"the serializer returned {type(payload).__name__}, not bytes")
        except Exception as error:
            problem = TypeError(f"the result of the task could not be serialized: {type(error).__name__}: {error}")
            return _failed(task.task_id, problem, traceback.format_exc())._replace(
                seconds=time.perf_counter() - started, function=name, ended=time.monotonic()
            )
        status, error_text, line = TaskStatus.SUCCESS, "", ""
    else:
        over_memory = isinstance(failure, MemoryError) and memory_limit > 0  # (memory_limit.bound_data_segment)
        reported = refused_allocation(name, memory_limit) if over_memory else failure
        payload, error_text = failure_payload(reported, _user_traceback(failure))
        status, line = TaskStatus.FAILED, error_line(reported)
    seconds = time.perf_counter() - started
    return ProcessorResult(
        task.task_id, status, payload, error_text, None, seconds, name, line, time.monotonic(), over_memory
    )


def _failed(task_id: bytes, error: BaseException, traceback_text: str) -> ProcessorResult:
    payload, error_text = failure_payload(error, traceback_text)
    return ProcessorResult(task_id, TaskStatus.FAILED, payload, error_text, None, error_line=error_line(error))


def _user_traceback(error: BaseException) -> str:
    """The traceback of an exception raised by a task, without the processor's own frame."""
    tb = error.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))
