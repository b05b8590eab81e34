"""Turn a Dask-style dict graph into `GraphTask` messages, checking it first (`graph_parser.py`).

`build_graph` keeps the nodes the requested keys need, raises `GraphKeyError`
for a missing key and `GraphCycleError` for a cycle (naming the keys) before
anything is sent, and encodes each task node as a `Task`:

- ``(function, a, b)`` whose arguments are keys, literals or references runs
  as ``function(a, b)``: the function is stored once per client, key arguments
  are ``Argument{kind task}`` (or the literal value of a key that is a literal),
  other arguments inline (or in object storage above 64 KiB);
- anything else (containers of keys, nested tasks, task-spec nodes) runs as
  `graph_evaluation.evaluate_graph_node` with a template (see that module).

Literal nodes need no task: their values are encoded where they are used, and
a requested literal key resolves on the client.

Tasks are encoded in dependency order (each after the tasks it needs), as the
caller iterates `BuiltGraph.parts`: with a part size, a large graph leaves in
parts (``GraphTask.more`` on all but the last), so that its first tasks run
while the rest is encoded; the first part names the targets.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, Iterator, List, Mapping, Optional, Sequence, Tuple

import cloudpickle

from scaler.client.graph_evaluation import Call, Quote, Slot, SpecNode, evaluate_graph_node
from scaler.client.graph_parser import (
    _ATOMS,
    GraphCycleError,
    GraphKeyError,
    GraphReader,
    _Call,
    _Container,
    _Key,
    _Literal,
    _names,
    _present,
    _Reference,
    _Spec,
)
from scaler.client.object_reference import ObjectReference
from scaler.protocol.messages import Argument, ArgumentKind, GraphTask, Task

_TASK = ArgumentKind.TASK  # looked up once: reading an enum member is slow next to building an Argument


@dataclass
class GraphPart:
    """One `GraphTask` to send, and the objects it needs stored first."""

    message: GraphTask
    puts: List[Tuple[bytes, Any]]  # (object ID, payload): large literals and templates its tasks name first
    function_ids: List[bytes]  # functions its tasks name first (earlier parts name the others)


@dataclass
class BuiltGraph:
    """A checked graph: what `Client.get` hands to its agent, part by part (encoded as `parts` is iterated)."""

    graph_id: bytes
    targets: List[bytes]  # the task IDs whose results are wanted, each once
    key_targets: Dict[Hashable, bytes]  # requested key -> target task ID
    key_values: Dict[Hashable, Any]  # requested key -> value, for keys that resolve to a literal
    parts: Iterator[GraphPart] = field(default_factory=lambda: iter(()))


class GraphEncoder:
    """What the builder needs from its client: IDs, stored functions, the serializer, and where big values go."""

    def __init__(
        self,
        next_id: Callable[[], bytes],
        function_id: Callable[[Callable[..., Any]], bytes],
        serialize: Callable[[Any], Any],  # a value -> its payload (scaler.client.serializer)
        serializer_id: bytes,
        client_id: bytes,
        inline_limit: int,
    ) -> None:
        self.next_id = next_id
        self.function_id = function_id
        self.serialize = serialize
        self.serializer_id = serializer_id
        self.client_id = client_id
        self.inline_limit = inline_limit


# ----------------------------------------------------------------------------- entry point


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (process-wide) while a graph is built and sent, then left as it
    was found. Everything the build makes lives until its part is sent, and each full collection on the way
    walks all of it, for nothing: with collections, parsing and encoding a 100,000-node graph cost about twice
    as much. Reference counting still frees what is dropped."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def build_graph(
    graph: Any, keys: Sequence[Hashable], encoder: GraphEncoder, part_size: Optional[int] = None
) -> BuiltGraph:
    """Check the graph (raising before anything is encoded); its tasks are encoded as ``parts`` is iterated,
    in parts of ``part_size`` tasks (None: one part)."""
    if not hasattr(graph, "items") or not hasattr(graph, "__contains__"):
        raise TypeError(f"a graph is a mapping of keys to tasks or values, got {type(graph).__name__}")
    missing = [key for key in keys if not _present(graph, key)]
    if missing:
        raise GraphKeyError(f"key(s) not in the graph: {_names(missing)}")
    return _Encoder(GraphReader(graph), encoder).build(keys, part_size)


# ----------------------------------------------------------------------------- encoding


class _Encoder:
    def __init__(self, reader: GraphReader, encoder: GraphEncoder) -> None:
        self._reader = reader
        self._nodes = reader.nodes  # what the reader has read: every key an encoded task reads
        self._encoder = encoder
        self._resolved: Dict[Hashable, Hashable] = {}
        self._task_ids: Dict[Hashable, bytes] = {}  # resolved key -> task ID: the targets, and the tasks encoded
        self._key_arguments: Dict[Hashable, Tuple[ArgumentKind, bytes]] = {}  # key not a task -> (kind, data)
        self._puts: List[Tuple[bytes, Any]] = []
        self._function_ids: Dict[bytes, None] = {}
        self._functions_listed = 0  # of _function_ids, how many an earlier part listed
        self._evaluator_id: Optional[bytes] = None

    def build(self, keys: Sequence[Hashable], part_size: Optional[int]) -> BuiltGraph:
        encoder = self._encoder
        key_targets: Dict[Hashable, bytes] = {}
        key_values: Dict[Hashable, Any] = {}
        reference_tasks: Dict[Hashable, bytes] = {}  # a requested reference: a task returns its object
        for key in keys:
            resolved = self._resolve(key)
            parsed = self._nodes[resolved][0]
            if type(parsed) not in _ATOMS:  # a task (aliases, literals and references need none)
                task_id = self._task_ids.get(resolved)
                if task_id is None:
                    task_id = self._task_ids[resolved] = encoder.next_id()
                key_targets[key] = task_id
                continue
            if type(parsed) is _Literal:
                key_values[key] = parsed.value
                continue
            task_id = reference_tasks.get(resolved)
            if task_id is None:
                task_id = reference_tasks[resolved] = encoder.next_id()
            key_targets[key] = task_id
        graph_id = encoder.next_id()
        targets = list(dict.fromkeys(key_targets.values()))
        parts = self._parts(graph_id, keys, reference_tasks, targets, part_size)
        return BuiltGraph(graph_id, targets, key_targets, key_values, parts)

    def _parts(
        self,
        graph_id: bytes,
        keys: Sequence[Hashable],
        reference_tasks: Dict[Hashable, bytes],
        targets: List[bytes],
        part_size: Optional[int],
    ) -> Iterator[GraphPart]:
        """The tasks in dependency order, as the reader reaches them, ``part_size`` at a time, the requested
        references' tasks last; the targets with the first part."""
        task_ids, nodes, next_id = self._task_ids, self._nodes, self._encoder.next_id
        tasks: List[Task] = []
        named = targets  # the first part names every target
        for key in self._reader.in_order(keys):
            if type(nodes[key][0]) in _ATOMS:  # aliases, literals and references need no task
                continue
            task_id = task_ids.get(key)
            if task_id is None:
                task_id = task_ids[key] = next_id()
            tasks.append(self._task(key, task_id))
            if len(tasks) == part_size:
                yield self._part(graph_id, tasks, named, more=True)
                tasks, named = [], []
        for resolved, task_id in reference_tasks.items():
            tasks.append(self._evaluator_task(task_id, Slot(0), [self._argument_for_key(resolved)]))
        yield self._part(graph_id, tasks, named, more=False)

    def _part(self, graph_id: bytes, tasks: List[Task], targets: List[bytes], more: bool) -> GraphPart:
        named = list(self._function_ids)
        part = GraphPart(GraphTask(graph_id, tasks, targets, more), self._puts, named[self._functions_listed :])
        self._puts = []
        self._functions_listed = len(named)
        return part

    def _resolve(self, key: Hashable) -> Hashable:
        """Follow aliases to the key whose node is not an alias (a requested key's chain is followed before the
        reader reaches it: a chain that comes back is a cycle)."""
        if key in self._resolved:
            return self._resolved[key]
        chain = [key]
        parsed = self._reader.parsed
        while type(parsed(chain[-1])[0]) is _Key:
            following = parsed(chain[-1])[0].key
            if following in chain:
                cycle = chain[chain.index(following) :] + [following]
                raise GraphCycleError("the graph has a cycle: " + " -> ".join(repr(k) for k in cycle), cycle)
            chain.append(following)
        self._resolved[key] = chain[-1]
        return chain[-1]

    # --- arguments

    def _value_argument(self, value: Any, name: str = "") -> Argument:
        if isinstance(value, ObjectReference):
            return Argument(name, ArgumentKind.OBJECT, value.object_id)
        data = self._encoder.serialize(value)
        if type(data) is not list and len(data) <= self._encoder.inline_limit:  # a list of frames: too large
            return Argument(name, ArgumentKind.INLINE, data)
        object_id = self._encoder.next_id()
        self._puts.append((object_id, data))
        return Argument(name, ArgumentKind.OBJECT, object_id)

    def _argument_for_key(self, key: Hashable) -> Argument:
        task_id = self._task_ids.get(key)
        if task_id is not None:  # the common case: the key runs as a task
            return Argument("", _TASK, task_id)
        kind, data = self._key_arguments.get(key) or self._key_argument(key)
        return Argument("", kind, data)

    def _key_argument(self, key: Hashable) -> Tuple[ArgumentKind, bytes]:
        """(kind, data) of the argument passing the value of a key that is not a task, found once per key."""
        resolved = self._resolve(key)
        if resolved in self._task_ids:  # an alias of a task
            found = (_TASK, self._task_ids[resolved])
        elif resolved is not key:  # an alias of a literal or reference: passed as its target (put once if large)
            found = self._key_arguments.get(resolved) or self._key_argument(resolved)
        else:
            parsed = self._nodes[key][0]
            argument = self._value_argument(parsed.reference if type(parsed) is _Reference else parsed.value)
            found = (argument.kind, argument.data)
        self._key_arguments[key] = found
        return found

    def _argument_for_atom(self, atom: Any) -> Argument:
        kind = type(atom)
        if kind is _Key:
            return self._argument_for_key(atom.key)
        if kind is _Reference:
            return Argument("", ArgumentKind.OBJECT, atom.reference.object_id)
        return self._value_argument(atom.value)

    # --- tasks

    def _new_task(self, task_id: bytes, function_id: bytes, arguments: List[Argument]) -> Task:
        self._function_ids[function_id] = None
        return Task(
            task_id=task_id,
            client_id=self._encoder.client_id,
            function_id=function_id,
            arguments=arguments,
            serializer_id=self._encoder.serializer_id,
        )

    def _task(self, key: Hashable, task_id: bytes) -> Task:
        parsed = self._nodes[key][0]
        if type(parsed) is _Call and parsed.direct:
            arguments = [
                self._argument_for_key(atom.key) if type(atom) is _Key else self._argument_for_atom(atom)
                for atom in parsed.arguments
            ]
            return self._new_task(task_id, self._encoder.function_id(parsed.function), arguments)
        slots: Dict[Any, int] = {}
        slot_arguments: List[Argument] = []
        if type(parsed) is _Spec:
            for dependency in parsed.dependencies:
                slot_arguments.append(self._argument_for_key(dependency))
            template: Any = SpecNode(parsed.node, parsed.dependencies)
        else:
            template = self._template(parsed, slots, slot_arguments)
        return self._evaluator_task(task_id, template, slot_arguments)

    def _evaluator_task(self, task_id: bytes, template: Any, slot_arguments: List[Argument]) -> Task:
        if self._evaluator_id is None:
            self._evaluator_id = self._encoder.function_id(evaluate_graph_node)
        template_argument = self._value_argument(cloudpickle.dumps(template))
        return self._new_task(task_id, self._evaluator_id, [template_argument, *slot_arguments])

    def _template(self, parsed: Any, slots: Dict[Any, int], arguments: List[Argument]) -> Any:
        kind = type(parsed)
        if kind is _Key:
            resolved = self._resolve(parsed.key)
            return self._slot(("key", resolved), slots, arguments, lambda: self._argument_for_key(resolved))
        if kind is _Reference:
            reference = parsed.reference
            return self._slot(
                ("object", reference.object_id), slots, arguments,
                lambda: Argument("", ArgumentKind.OBJECT, reference.object_id),
            )  # fmt: skip
        if kind is _Call:
            return Call(parsed.function, [self._template(argument, slots, arguments) for argument in parsed.arguments])
        if kind is _Container:
            if parsed.kind is dict:
                return {name: self._template(item, slots, arguments) for name, item in parsed.items.items()}
            items = [self._template(item, slots, arguments) for item in parsed.items]
            return items if parsed.kind is list else tuple(items)
        value = parsed.value
        if type(value) in (list, tuple, dict, Slot, Call, Quote, SpecNode):
            return Quote(value)
        return value

    def _slot(self, identity: Any, slots: Dict[Any, int], arguments: List[Argument], make: Callable[[], Argument]):
        index = slots.get(identity)
        if index is None:
            index = slots[identity] = len(arguments)
            arguments.append(make())
        return Slot(index)


# ----------------------------------------------------------------------------- Dask's nested keys


def flatten_keys(keys: Any) -> List[Hashable]:
    """The keys of a Dask ``keys`` argument (a key, or lists of lists of keys), each once, in order."""
    found: Dict[Hashable, None] = {}
    stack = [keys]
    while stack:
        item = stack.pop()
        if type(item) is list:
            stack.extend(reversed(item))
        else:
            found.setdefault(item, None)
    return list(found)


def pack_results(keys: Any, values: Dict[Hashable, Any]) -> Any:
    """Results in the shape of Dask's ``keys``: a list of keys becomes a tuple of results, as Dask's get does."""
    if type(keys) is list:
        return tuple(pack_results(item, values) for item in keys)
    return values[keys]


def to_task_spec(graph: Any) -> Any:
    """The graph a Dask scheduler is given, as a mapping of task-spec nodes.

    Current Dask passes an expression (``__dask_graph__()`` gives its graph), older Dask a mapping;
    classic tuple tasks are converted by Dask's own ``convert_legacy_graph`` where that exists (Dask's
    local schedulers do the same), else read as they are.
    """
    if not isinstance(graph, Mapping) and hasattr(graph, "__dask_graph__"):
        graph = graph.__dask_graph__()
    try:
        from dask._task_spec import convert_legacy_graph
    except ImportError:  # Dask before task specs: the classic form is read as it is
        return graph
    return convert_legacy_graph(graph)
