"""How a call becomes a `Task` message, in the user's thread: `TaskBuilder.build`.

The function is cloudpickled and put in object storage once per client (its object ID is cached per
function object, at most ``_FUNCTION_CACHE_LIMIT`` of them); a custom serializer likewise, once. Each
argument is serialized; one over ``INLINE_ARGUMENT_LIMIT`` (or of several frames) travels through object
storage: the builder names it by a new object ID and hands its payload to the caller, whose `Submit`
lets the client's core put it before the task goes. A future of this client is the result of its task: a task
argument of ``kind task`` naming it (`Puts.inputs` hands the future to the core: task_inputs.py), or its value
once it succeeded.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import cloudpickle

from scaler.client.client_events import Event, PutObject, Release
from scaler.client.future import ScalerFuture
from scaler.client.object_reference import ObjectReference
from scaler.client.serializer import DefaultSerializer, serialize_payload
from scaler.protocol.ids import IDGenerator, show
from scaler.protocol.messages import Argument, ArgumentKind, Capability, Task
from scaler.protocol.task_runs import function_name

INLINE_ARGUMENT_LIMIT = 64 * 1024  # larger serialized arguments travel through object storage
_FUNCTION_CACHE_LIMIT = 1024  # distinct function objects remembered per client


class Puts(Dict[bytes, List[Tuple[bytes, Any]]]):
    """Task ID -> (object ID, payload) of its arguments put in storage; ``inputs``: task ID -> the futures whose
    results it takes (None until one does)."""

    __slots__ = ("inputs",)

    def __init__(self) -> None:
        super().__init__()
        self.inputs: Optional[Dict[bytes, List[ScalerFuture]]] = None


class TaskBuilder:
    def __init__(self, client_id: bytes, serializer: Any, profiling: bool, stream_output: bool = False) -> None:
        self.client_id = client_id
        self.ids = IDGenerator()
        self.custom_serializer = serializer
        self.serializer = serializer if serializer is not None else DefaultSerializer()
        self.profiling = profiling
        self.stream_output = stream_output
        self.send: Callable[[Event], None] = lambda event: None  # the agent's: puts and releases functions
        self._functions: Dict[int, Tuple[Any, bytes]] = {}  # id(function) -> (function, object ID)
        self._serializer_id = b""
        self._lock = threading.Lock()  # guards _functions and _serializer_id

    def build(
        self,
        fn: Callable[..., Any],
        args: Tuple[Any, ...],
        kwargs: Mapping[str, Any],
        capabilities: List[Capability],
        puts: Puts,
    ) -> Task:
        """The task running ``fn(*args, **kwargs)``; its arguments too large to go inline are added to ``puts``."""
        if not callable(fn):
            raise TypeError(f"a task needs a callable, got {type(fn).__name__}")
        # The hot path of every submit and map item (docs/performance.md, "A tiny task"): messages are built
        # with positional arguments (half the cost of keywords; `_POSITIONAL_MESSAGES` checks the order),
        # and few objects are allocated per task (each one also costs the garbage collector).
        task_id = self.ids.next_id()
        function_id = self.function_id(fn)
        serializer_id = self.serializer_id()
        arguments = []
        for value in args:
            arguments.append(self._argument("", value, task_id, puts))
        for name, value in kwargs.items():
            arguments.append(self._argument(name, value, task_id, puts))
        if _POSITIONAL_MESSAGES:
            return Task(
                task_id, self.client_id, function_id, arguments, 0, capabilities, 0, 0.0, 0, self.profiling,
                serializer_id, False, self.stream_output,
            )  # fmt: skip
        return Task(
            task_id=task_id,
            client_id=self.client_id,
            function_id=function_id,
            arguments=arguments,
            capabilities=capabilities,
            profiling=self.profiling,
            serializer_id=serializer_id,
            stream_output=self.stream_output,
        )

    def _argument(self, name: str, value: Any, task_id: bytes, puts: Puts) -> Argument:
        if isinstance(value, ObjectReference):
            return _make_argument(name, ArgumentKind.OBJECT, value.object_id)
        if type(value) is ScalerFuture:
            return self._future_argument(name, value, task_id, puts)
        return self._payload_argument(name, serialize_payload(self.serializer, value), task_id, puts)

    def _payload_argument(self, name: str, data: Any, task_id: bytes, puts: Puts) -> Argument:
        if type(data) is not list and len(data) <= INLINE_ARGUMENT_LIMIT:  # a list of frames: too large
            return _make_argument(name, ArgumentKind.INLINE, data)
        object_id = self.ids.next_id()
        puts.setdefault(task_id, []).append((object_id, data))
        return _make_argument(name, ArgumentKind.OBJECT, object_id)

    def _future_argument(self, name: str, future: ScalerFuture, task_id: bytes, puts: Puts) -> Argument:
        """A future as an argument: its value once it succeeded, else its task's result (``kind task``)."""
        owner = getattr(future._client, "client_id", None)
        if owner != self.client_id:
            raise TypeError(
                f"{future!r} is a future of another client ({show(owner) if owner else 'none'}): a task takes the "
                "futures of its own client as arguments; pass future.result(), or submit through that client"
            )
        if future.done():
            payload, _, _ = future._argument_outcome()
            if payload is not None:
                return self._payload_argument(name, payload, task_id, puts)
        if puts.inputs is None:
            puts.inputs = {}
        puts.inputs.setdefault(task_id, []).append(future)
        return _make_argument(name, ArgumentKind.TASK, future.task_id)

    def function_id(self, fn: Callable[..., Any]) -> bytes:
        entry = self._functions.get(id(fn))
        if entry is not None and entry[0] is fn:
            return entry[1]
        with self._lock:
            entry = self._functions.get(id(fn))
            if entry is not None and entry[0] is fn:
                return entry[1]
            object_id = self.ids.next_id()
            # Queued under the lock: a task naming this function (from any thread) is queued after its put.
            self.send(PutObject(0, object_id, cloudpickle.dumps(fn), function_name(fn)))
            if len(self._functions) >= _FUNCTION_CACHE_LIMIT:  # forget the oldest; storage drops it once unused
                _, evicted_id = self._functions.pop(next(iter(self._functions)))
                self.send(Release([evicted_id]))
            self._functions[id(fn)] = (fn, object_id)  # the strong reference keeps id(fn) unique
            return object_id

    def serializer_id(self) -> bytes:
        """The object ID of the custom serializer (put on first use), b"" without one."""
        if self.custom_serializer is None or self._serializer_id:
            return self._serializer_id
        with self._lock:
            if not self._serializer_id:
                object_id = self.ids.next_id()
                self.send(PutObject(0, object_id, cloudpickle.dumps(self.custom_serializer)))
                self._serializer_id = object_id
            return self._serializer_id

    def forget(self, object_ids: Optional[List[bytes]] = None) -> None:
        """These puts failed (None: storage forgot everything, Client.clear): the next task puts its function
        and serializer again."""
        with self._lock:
            if object_ids is None:
                self._functions.clear()
                self._serializer_id = b""
                return
            failed = set(object_ids)
            for key, (_, object_id) in list(self._functions.items()):
                if object_id in failed:
                    del self._functions[key]
            if self._serializer_id in failed:
                self._serializer_id = b""


# `TaskBuilder.build` builds Task and Argument positionally when their fields are in the order it expects
# (twice as fast as keywords, measured); if scaler-protocol ever reorders them, it falls back to keywords.
_POSITIONAL_MESSAGES = [field.name for field in dataclasses.fields(Task)][:13] == [
    "task_id",
    "client_id",
    "function_id",
    "arguments",
    "priority",
    "capabilities",
    "attempt",
    "timeout_seconds",
    "retries",
    "profiling",
    "serializer_id",
    "store_result",
    "stream_output",
] and [field.name for field in dataclasses.fields(Argument)][:3] == ["name", "kind", "data"]


def _make_argument(name: str, kind: ArgumentKind, data: bytes) -> Argument:
    if _POSITIONAL_MESSAGES:
        return Argument(name, kind, data)
    return Argument(name=name, kind=kind, data=data)


def capability_list(capabilities: Optional[Mapping[str, int]]) -> List[Capability]:
    """A task's ``capabilities=`` as the protocol's list, each name a str and each value a signed 64-bit int."""
    if not capabilities:
        return []
    result = []
    for name, value in capabilities.items():
        if not isinstance(name, str) or not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"capabilities map names (str) to integers; got {name!r}: {value!r}")
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"capability {name!r}: {value} does not fit in a signed 64-bit integer")
        result.append(Capability(name=name, value=value))
    return result
