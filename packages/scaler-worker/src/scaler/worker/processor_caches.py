"""A processor's caches, and the one rule that keeps the agent's copy of them exact.

A function, a serializer or an object-storage argument crosses the Pipe as bytes only the first time the
processor needs it; afterwards its ID alone refers to the processor's copy. Both ends keep a `ProcessorCaches`
of the same capacities: the processor holds the values (loaded functions and serializers, object payloads),
the agent's runner (`processor_runner`) only which IDs are there (``True``). Each applies the same get/put
sequence for each task, in the order the tasks cross the Pipe: the agent as it sends a task (`outgoing`: an
ID it holds is a get; one it lacks travels with its bytes and is put), the processor as it reads it
(`incoming`: an ID without bytes is a get; one with bytes is put), whether the task then runs or is dropped.
A get that misses changes nothing, so the two sequences leave the same entries in the same order, whatever
order the tasks then run in. A new processor starts with empty caches, and so does the agent's copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, List, Optional, Tuple, TypeVar

from scaler.protocol import object_frames
from scaler.worker.lru_cache import LRUCache, SizedLRUCache
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    OBJECT_CACHE_BYTES,
    SERIALIZER_CACHE_CAPACITY,
    ProcessorTask,
    out_of_band,
)

if TYPE_CHECKING:
    from scaler.worker.task_runner import ReadyTask

Loaded = TypeVar("Loaded")  # what the processor keeps of a function or serializer (the agent: True)
# what a task read needs (`ProcessorCaches.incoming`): function, serializer, arguments, problem
Needs = Tuple[Any, Any, List[Tuple[str, Any, bytes]], Optional[BaseException]]


class ProcessorCaches(Generic[Loaded]):
    """One processor's caches of functions, serializers and object arguments, as one end keeps them."""

    __slots__ = ("functions", "serializers", "objects")

    def __init__(
        self,
        object_cache_bytes: int = OBJECT_CACHE_BYTES,
        function_capacity: int = FUNCTION_CACHE_CAPACITY,
        serializer_capacity: int = SERIALIZER_CACHE_CAPACITY,
    ) -> None:
        self.functions: LRUCache[bytes, Loaded] = LRUCache(function_capacity)
        self.serializers: LRUCache[bytes, Loaded] = LRUCache(serializer_capacity)
        self.objects: SizedLRUCache[bytes, Any] = SizedLRUCache(object_cache_bytes)  # ID -> payload (agent: True)

    def clear(self) -> None:
        """A new processor holds nothing."""
        self.functions.clear()
        self.serializers.clear()
        self.objects.clear()

    # ------------------------------------------------------------------------- the agent's end

    def outgoing(self: ProcessorCaches[bool], ready: ReadyTask, sent_ahead: bool) -> ProcessorTask:
        """What the processor gets for ``ready``: the bytes of what it lacks, the IDs of what it holds."""
        task = ready.task
        functions = self.functions
        function: Optional[bytes] = None
        if not functions.get(task.function_id):
            function = ready.function
            functions.put(task.function_id, True)
        serializer: Optional[bytes] = None
        if task.serializer_id and not self.serializers.get(task.serializer_id):
            serializer = ready.serializer
            self.serializers.put(task.serializer_id, True)
        arguments = ready.arguments
        if ready.objects:
            objects = self.objects
            sent_arguments: List[Tuple[str, Any, bytes]] = []
            for name, data, object_id in arguments:
                if not object_id:
                    sent_arguments.append((name, data, object_id))
                elif objects.get(object_id) is None:
                    objects.put(object_id, True, object_frames.size(data))
                    sent_arguments.append((name, out_of_band(data), object_id))
                else:
                    sent_arguments.append((name, None, object_id))
            arguments = sent_arguments
        return ProcessorTask(
            task.task_id, task.function_id, function, task.serializer_id, serializer, arguments, task.profiling,
            task.stream_output, sent_ahead, task.scope_id or task.client_id,
        )  # fmt: skip

    # ------------------------------------------------------------------------- the processor's end

    def incoming(self, task: ProcessorTask, load: Callable[[bytes], Loaded]) -> Needs:
        """What ``task`` needs, taken from the caches or put there as it is read (``load`` makes a function or a
        serializer of its bytes): its function and serializer (None: none, or missing), its arguments with each
        object-storage argument's payload, and the problem of a missing one (a bug: the agent sent an ID the
        processor does not hold)."""
        problem: Optional[BaseException] = None
        function = _take(self.functions, task.function_id, task.function, load)
        if function is None:
            problem = _missing("function", task.function_id)
        serializer = None
        if task.serializer_id:
            serializer = _take(self.serializers, task.serializer_id, task.serializer, load)
            if serializer is None and problem is None:
                problem = _missing("serializer", task.serializer_id)
        arguments = task.arguments
        for _, _, object_id in arguments:
            if object_id:
                arguments, missing = self._objects_of(arguments)
                problem = problem or missing
                break
        return function, serializer, arguments, problem

    def _objects_of(self, arguments: List[Tuple[str, Any, bytes]]) -> Tuple[List[Tuple[str, Any, bytes]], Any]:
        objects = self.objects
        resolved: List[Tuple[str, Any, bytes]] = []
        problem = None
        for name, payload, object_id in arguments:
            if object_id:
                if payload is None:
                    payload = objects.get(object_id)
                    if payload is None and problem is None:
                        problem = _missing("object", object_id)
                else:
                    objects.put(object_id, payload, object_frames.size(payload))
            resolved.append((name, payload, object_id))
        return resolved, problem


def _take(cache: LRUCache, key: bytes, payload: Optional[bytes], load: Callable[[bytes], Any]) -> Any:
    if payload is None:
        return cache.get(key)
    value = load(payload)
    cache.put(key, value)
    return value


def _missing(what: str, key: bytes) -> RuntimeError:
    return RuntimeError(f"internal error: the processor has no cached {what} {key.hex()}")
