"""Turn a Dask-style dict graph into `GraphTask` messages, checking it first.

A graph maps keys to values:

- ``(function, *arguments)``: a task. An argument is a key of the graph (its
  value is passed), a nested task (evaluated in place), a list, tuple or dict
  (searched for keys and nested tasks, values only for dicts), an
  `ObjectReference` (the object is passed), or any other value (passed as is);
- a key of the graph: an alias of that key;
- a list, tuple or dict containing keys: built from their values;
- an `ObjectReference`: the object it refers to;
- anything else (``None`` included): that literal value.

Dask task-spec nodes (``dask._task_spec`` Task, Alias, DataNode and the
containers) are understood too, without importing Dask: they are recognised
only when Dask is already loaded.

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

import gc
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import cloudpickle

from scaler.client.graph_evaluation import Call, Quote, Slot, SpecNode, evaluate_graph_node
from scaler.client.object_reference import ObjectReference
from scaler.protocol.messages import Argument, ArgumentKind, GraphTask, Task

_KEY_TYPES = (str, bytes, int, float, tuple)
_SCALAR_TYPES = (str, int, float, bytes, bool)  # exactly these types: a key if in the graph, else a literal


class GraphError(ValueError):
    """The graph given to `Client.get` cannot run; nothing was sent."""


class GraphKeyError(GraphError, KeyError):
    """A requested key, or a key a node depends on, is not in the graph."""

    def __str__(self) -> str:  # KeyError would print the message's repr
        return str(self.args[0]) if self.args else ""


class GraphCycleError(GraphError):
    """Keys of the graph depend on each other in a cycle."""


# ----------------------------------------------------------------------------- parsed nodes and expressions


class _Key:
    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key


class _Literal:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Reference:
    __slots__ = ("reference",)

    def __init__(self, reference: ObjectReference) -> None:
        self.reference = reference


class _Call:
    __slots__ = ("function", "arguments", "direct")

    def __init__(self, function: Callable[..., Any], arguments: List[Any], direct: bool) -> None:
        self.function = function
        self.arguments = arguments
        self.direct = direct  # every argument is an atom: the task runs as function(*arguments)


class _Container:
    __slots__ = ("kind", "items")

    def __init__(self, kind: type, items: Any) -> None:
        self.kind = kind  # list, tuple or dict
        self.items = items  # list of expressions, or dict of key -> expression


class _Spec:
    __slots__ = ("node", "dependencies")

    def __init__(self, node: Any, dependencies: List[Hashable]) -> None:
        self.node = node
        self.dependencies = dependencies


_ATOMS = (_Key, _Literal, _Reference)
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
    nodes = _parse_needed(graph, keys)
    order = _check_acyclic(nodes, keys)
    return _Encoder(nodes, encoder).build(keys, order, part_size)


def _present(graph: Any, key: Any) -> bool:
    try:
        return key in graph
    except TypeError:  # unhashable
        return False


def _names(keys: Iterable[Any], limit: int = 10) -> str:
    keys = list(keys)
    text = ", ".join(repr(key) for key in keys[:limit])
    return text + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


# ----------------------------------------------------------------------------- parsing


def _task_spec_module() -> Any:
    """``dask._task_spec`` if Dask is loaded (never imported from here)."""
    return sys.modules.get("dask._task_spec")


class _Parser:
    def __init__(self, graph: Any) -> None:
        self.graph = graph
        spec = _task_spec_module()
        self.spec = spec
        self.graph_node = spec.GraphNode if spec is not None else None

    def is_key(self, value: Any) -> bool:
        if not isinstance(value, _KEY_TYPES):
            return False
        try:
            return value in self.graph
        except TypeError:
            return False

    def node(self, key: Hashable, value: Any) -> Tuple[Any, List[Hashable]]:
        """The parsed value of one key of the graph, and the keys it reads (in order of first use, each once)."""
        found: Dict[Hashable, None] = {}
        if type(value) is tuple and value and callable(value[0]):  # the common case, first
            return self.call(value, found), list(found)
        if self.graph_node is not None and isinstance(value, self.graph_node):
            return self.spec_node(key, value)
        parsed = self.expression(value, found)
        if type(parsed) is _Key and parsed.key == key:
            return _Literal(value), []  # a key whose value is itself: a literal (as Dask reads it)
        return parsed, list(found)

    def spec_node(self, key: Hashable, node: Any) -> Tuple[Any, List[Hashable]]:
        spec = self.spec
        if isinstance(node, spec.DataNode):
            return _Literal(node.value), []
        if isinstance(node, spec.Alias):
            if node.target == key:
                raise GraphKeyError(f"key {key!r} is an alias of itself")
            return _Key(node.target), [node.target]
        dependencies = sorted(node.dependencies, key=repr)
        absent = [dependency for dependency in dependencies if not _present(self.graph, dependency)]
        if absent:
            raise GraphKeyError(f"key {key!r} needs key(s) not in the graph: {_names(absent)}")
        return _Spec(node, dependencies), dependencies

    def expression(self, value: Any, found: Dict[Hashable, None]) -> Any:
        """The parsed value; the keys it reads are added to ``found``."""
        kind = type(value)
        if kind is tuple and value and callable(value[0]):
            return self.call(value, found)
        if isinstance(value, ObjectReference):
            return _Reference(value)
        if self.is_key(value):
            found[value] = None
            return _Key(value)
        if kind is list or kind is tuple:
            items = [self.expression(item, found) for item in value]
            if all(type(item) is _Literal for item in items):
                return _Literal(value)
            return _Container(kind, items)
        if kind is dict:
            entries = {name: self.expression(item, found) for name, item in value.items()}
            if all(type(item) is _Literal for item in entries.values()):
                return _Literal(value)
            return _Container(dict, entries)
        return _Literal(value)

    def call(self, value: Tuple[Any, ...], found: Dict[Hashable, None]) -> _Call:
        """``(function, *arguments)``: `expression` for each argument, inlined for strings and numbers."""
        graph = self.graph
        arguments: List[Any] = []
        direct = True
        for argument in value[1:]:
            if type(argument) in _SCALAR_TYPES:  # a key or a literal, as `expression` would find
                try:
                    is_key = argument in graph
                except TypeError:
                    is_key = False
                if is_key:
                    found[argument] = None
                    arguments.append(_Key(argument))
                else:
                    arguments.append(_Literal(argument))
            else:
                parsed = self.expression(argument, found)
                arguments.append(parsed)
                direct = direct and type(parsed) in _ATOMS
        return _Call(value[0], arguments, direct)


def _parse_needed(graph: Any, keys: Sequence[Hashable]) -> Dict[Hashable, Tuple[Any, List[Hashable]]]:
    """key -> (parsed value, dependencies) for every key the requested keys need."""
    node = _Parser(graph).node
    nodes: Dict[Hashable, Tuple[Any, List[Hashable]]] = {}
    stack = list(keys)
    collecting = gc.isenabled()
    gc.disable()  # parsing keeps all it makes: collecting as it goes cost as much as the parsing
    try:
        while stack:
            key = stack.pop()
            if key not in nodes:
                entry = nodes[key] = node(key, graph[key])
                stack.extend(entry[1])  # keys already parsed are skipped when popped
    finally:
        if collecting:
            gc.enable()
    return nodes


def _check_acyclic(nodes: Dict[Hashable, Tuple[Any, List[Hashable]]], keys: Sequence[Hashable]) -> List[Hashable]:
    """Depth-first search; a key met again on the current path closes a cycle, reported along that path.

    Returns the keys in dependency order (each after every key it needs)."""
    state: Dict[Hashable, int] = {}  # 1: on the current path, 2: done
    order: List[Hashable] = []
    for root in keys:
        if state.get(root) == 2:
            continue
        path: List[Hashable] = [root]
        iterators = [iter(nodes[root][1])]
        state[root] = 1
        while iterators:
            dependency = next(iterators[-1], _END)
            if dependency is _END:
                iterators.pop()
                done = path.pop()
                state[done] = 2
                order.append(done)
                continue
            mark = state.get(dependency)
            if mark == 1:
                cycle = path[path.index(dependency) :] + [dependency]
                raise GraphCycleError("the graph has a cycle: " + " -> ".join(repr(key) for key in cycle))
            if mark is None:
                state[dependency] = 1
                path.append(dependency)
                iterators.append(iter(nodes[dependency][1]))
    return order


_END = object()


# ----------------------------------------------------------------------------- encoding


class _Encoder:
    def __init__(self, nodes: Dict[Hashable, Tuple[Any, List[Hashable]]], encoder: GraphEncoder) -> None:
        self._nodes = nodes
        self._encoder = encoder
        self._resolved: Dict[Hashable, Hashable] = {}
        self._task_ids: Dict[Hashable, bytes] = {}  # resolved key -> task ID, for keys that run as tasks
        self._key_arguments: Dict[Hashable, Tuple[ArgumentKind, bytes]] = {}  # key not a task -> (kind, data)
        self._puts: List[Tuple[bytes, Any]] = []
        self._function_ids: Dict[bytes, None] = {}
        self._functions_listed = 0  # of _function_ids, how many an earlier part listed
        self._evaluator_id: Optional[bytes] = None

    def build(self, keys: Sequence[Hashable], order: List[Hashable], part_size: Optional[int]) -> BuiltGraph:
        encoder = self._encoder
        for key, (parsed, _) in self._nodes.items():
            if type(parsed) not in _ATOMS:  # aliases, literals and references need no task
                self._task_ids[key] = encoder.next_id()
        key_targets: Dict[Hashable, bytes] = {}
        key_values: Dict[Hashable, Any] = {}
        reference_tasks: Dict[Hashable, bytes] = {}  # a requested reference: a task returns its object
        for key in keys:
            resolved = self._resolve(key)
            if resolved in self._task_ids:
                key_targets[key] = self._task_ids[resolved]
                continue
            parsed = self._nodes[resolved][0]
            if type(parsed) is _Literal:
                key_values[key] = parsed.value
                continue
            task_id = reference_tasks.get(resolved)
            if task_id is None:
                task_id = reference_tasks[resolved] = encoder.next_id()
            key_targets[key] = task_id
        graph_id = encoder.next_id()
        targets = list(dict.fromkeys(key_targets.values()))
        parts = self._parts(graph_id, [key for key in order if key in self._task_ids], reference_tasks, targets,
                            part_size)  # fmt: skip
        return BuiltGraph(graph_id, targets, key_targets, key_values, parts)

    def _parts(
        self,
        graph_id: bytes,
        order: List[Hashable],
        reference_tasks: Dict[Hashable, bytes],
        targets: List[bytes],
        part_size: Optional[int],
    ) -> Iterator[GraphPart]:
        """The tasks in dependency order, ``part_size`` at a time, the requested references' tasks last; the
        targets with the first part."""
        task_ids = self._task_ids
        tasks: List[Task] = []
        named = targets  # the first part names every target
        for key in order:
            tasks.append(self._task(key, task_ids[key]))
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
        """Follow aliases to the key whose node is not an alias."""
        if key in self._resolved:
            return self._resolved[key]
        target = key
        while type(self._nodes[target][0]) is _Key:
            target = self._nodes[target][0].key
        self._resolved[key] = target
        return target

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
