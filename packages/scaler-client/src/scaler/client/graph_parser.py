"""Read a Dask-style dict graph: the nodes the requested keys need, each parsed with its dependencies, in
dependency order, checked for cycles and missing keys on the way (`GraphReader`).

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
only when Dask is already loaded. `graph_builder.py` encodes what this reads.
"""

from __future__ import annotations

import graphlib
import sys
from typing import Any, Callable, Dict, Hashable, Iterable, Iterator, List, Mapping, Sequence, Tuple

from scaler.client.object_reference import ObjectReference

_KEY_TYPES = (str, bytes, int, float, tuple)
_SCALAR_TYPES = (str, int, float, bytes, bool)  # exactly these types: a key if in the graph, else a literal


class GraphError(ValueError):
    """The graph given to `Client.get` cannot run; nothing was sent."""


class GraphKeyError(GraphError, KeyError):
    """A requested key, or a key a node depends on, is not in the graph."""

    def __str__(self) -> str:  # KeyError would print the message's repr
        return str(self.args[0]) if self.args else ""


class GraphCycleError(GraphError, graphlib.CycleError):
    """Keys of the graph depend on each other in a cycle: also a `graphlib.CycleError` (as the earlier engine's
    and the standard library's sorters raise), whose ``args[1]`` is the cycle's keys."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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


class GraphReader:
    """The nodes the requested keys need, parsed as they are first met: ``nodes`` maps each key read so far to
    (parsed value, the keys it reads).

    `in_order` walks the graph depth first from the requested keys and yields each needed key once every key
    it reads was yielded (dependency order). It raises `GraphCycleError` when a key is met again on the current
    path (the cycle named along that path), and `GraphKeyError` for a task-spec node that names a missing key,
    when it reaches them: a caller that acts on the keys as they come (sends a large graph in parts) may have
    acted on some before."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._parse = _Parser(graph).node
        self.nodes: Dict[Hashable, Tuple[Any, List[Hashable]]] = {}

    def parsed(self, key: Hashable) -> Tuple[Any, List[Hashable]]:
        """The parsed value of ``key`` and the keys it reads (parsed now if not read yet)."""
        entry = self.nodes.get(key)
        if entry is None:
            entry = self.nodes[key] = self._parse(key, self._graph[key])
        return entry

    def in_order(self, keys: Sequence[Hashable]) -> Iterator[Hashable]:
        state: Dict[Hashable, int] = {}  # 1: on the current path, 2: done
        parsed = self.parsed
        for root in keys:
            if state.get(root) == 2:
                continue
            path: List[Hashable] = [root]
            iterators = [iter(parsed(root)[1])]
            state[root] = 1
            while iterators:
                dependency = next(iterators[-1], _END)
                if dependency is _END:
                    iterators.pop()
                    done = path.pop()
                    state[done] = 2
                    yield done
                    continue
                mark = state.get(dependency)
                if mark == 1:
                    cycle = path[path.index(dependency) :] + [dependency]
                    raise GraphCycleError("the graph has a cycle: " + " -> ".join(repr(key) for key in cycle), cycle)
                if mark is None:
                    state[dependency] = 1
                    path.append(dependency)
                    iterators.append(iter(parsed(dependency)[1]))


_END = object()


def requested_keys(graph: Mapping[Any, Any], keys: Any) -> List[Hashable]:
    """``keys`` as a list: a list (or other iterable) of keys, or one key of the graph. A key given twice is a
    `GraphKeyError` (a `KeyError`, as in the earlier engine): the answer, a dict, could hold it only once."""
    single = isinstance(keys, (str, bytes, tuple)) or not isinstance(keys, Iterable)
    if isinstance(keys, tuple):
        try:
            single = keys in graph
        except TypeError:
            single = False
    distinct: Dict[Hashable, None] = {}
    for key in [keys] if single else keys:
        if key in distinct:
            raise GraphKeyError(f"key {key!r} is requested more than once in keys")
        distinct[key] = None
    return list(distinct)

