"""What runs on a worker for a graph node that is more than ``function(*arguments)``.

A node such as ``(f, ["a", "b"], {"x": (g, "c")})`` (containers of keys,
nested calls) or a task-spec node of Dask becomes one task whose function is
`evaluate_graph_node`: its first argument is the node's *template* (cloudpickled
bytes), the others are the values of the keys the template reads, in order,
which the worker fetches like any other arguments. The template is a tree of
plain lists, tuples and dicts holding `Slot` (the value of argument i), `Call`
(call a function on evaluated arguments), `Quote` (a literal container, returned
as it is) and, at the top, `SpecNode` (a Dask task-spec node, called with the
values of its dependencies). A task submitted with object references inside
its arguments' lists, tuples or dicts runs the same way: its template is a
`Call` of `apply_call`, the references its slots (`nested_references.py`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

import cloudpickle


class Slot:
    """The value of the evaluator's positional argument ``index`` (after the template)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> Tuple[Any, ...]:
        return Slot, (self.index,)


class Call:
    __slots__ = ("function", "arguments")

    def __init__(self, function: Callable[..., Any], arguments: Sequence[Any]) -> None:
        self.function = function
        self.arguments = tuple(arguments)

    def __reduce__(self) -> Tuple[Any, ...]:
        return Call, (self.function, self.arguments)


class Quote:
    """A literal value the evaluator must not look into (a list, tuple or dict without keys in it)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> Tuple[Any, ...]:
        return Quote, (self.value,)


class SpecNode:
    """A Dask task-spec node (``dask._task_spec.GraphNode``), called with ``{key: value}`` of its dependencies."""

    __slots__ = ("node", "keys")

    def __init__(self, node: Any, keys: Sequence[Any]) -> None:
        self.node = node
        self.keys = tuple(keys)

    def __reduce__(self) -> Tuple[Any, ...]:
        return SpecNode, (self.node, self.keys)


def evaluate_graph_node(template: bytes, *values: Any) -> Any:
    """Run a graph node: ``template`` as made by the client, ``values`` those of the slots."""
    return evaluate(cloudpickle.loads(template), values)


def evaluate(template: Any, values: Sequence[Any]) -> Any:
    kind = type(template)
    if kind is Slot:
        return values[template.index]
    if kind is Call:
        return template.function(*[evaluate(argument, values) for argument in template.arguments])
    if kind is list:
        return [evaluate(item, values) for item in template]
    if kind is tuple:
        return tuple(evaluate(item, values) for item in template)
    if kind is dict:
        return {key: evaluate(item, values) for key, item in template.items()}
    if kind is Quote:
        return template.value
    if kind is SpecNode:
        dependencies: Dict[Any, Any] = dict(zip(template.keys, values, strict=True))
        return template.node(dependencies)
    return template


def apply_call(function: Callable[..., Any], arguments: Sequence[Any], keywords: Dict[str, Any]) -> Any:
    """``function(*arguments, **keywords)``: the top of a submitted call's template whose arguments hold object
    references inside lists, tuples or dicts (`nested_references.py`)."""
    return function(*arguments, **keywords)
