"""Object references and futures inside a task's lists, tuples and dicts, resolved as top-level ones are.

A worker replaces a task's top-level `ObjectReference` arguments by their objects (it fetches them from object
storage before the call), and the scheduler a top-level future by its result (task_inputs.py). A reference (or a
future) inside an argument's lists, tuples or dicts (at any depth, as Dask
resolves futures) reaches the task resolved too: `lift` turns such a call into the evaluator of graph nodes
(`graph_evaluation.evaluate_graph_node`) with a template that calls the function (`apply_call`) on the arguments
rebuilt, each reference a `Slot`, and the references as the evaluator's own top-level arguments. A call without
nested references is left as it is, and costs a look at each argument's type.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Tuple

import cloudpickle

from scaler.client.future import ScalerFuture
from scaler.client.graph_evaluation import Call, Quote, Slot, apply_call, evaluate_graph_node
from scaler.client.object_reference import ObjectReference

_CONTAINERS = (list, tuple, dict)  # exactly these types, as the evaluator rebuilds them
_REFERENCES = (ObjectReference, ScalerFuture)  # exactly these types: what the worker gives the task as a value


def lift(
    fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Tuple[Callable[..., Any], Tuple[Any, ...], Mapping[str, Any]]:
    """``(fn, args, kwargs)`` as they are when no container of theirs holds a reference, else the evaluator's
    call that rebuilds them on the worker with each reference's object."""
    if not _any_holds(args) and not (kwargs and _any_holds(kwargs.values())):  # the path of every submit
        return fn, args, kwargs
    references: List[Any] = []
    template = Call(apply_call, [fn, [_template(value, references) for value in args],
                                 {name: _template(value, references) for name, value in kwargs.items()}])  # fmt: skip
    return evaluate_graph_node, (cloudpickle.dumps(template), *references), {}


def _any_holds(values: Iterable[Any]) -> bool:
    for value in values:
        if type(value) in _CONTAINERS and _holds_reference(value):
            return True
    return False


def _holds_reference(value: Any) -> bool:
    items = value.values() if type(value) is dict else value
    return any(type(item) in _REFERENCES or (type(item) in _CONTAINERS and _holds_reference(item)) for item in items)


def _template(value: Any, references: List[Any]) -> Any:
    """``value`` with each reference a `Slot` of ``references`` (where it is added); a part without any,
    quoted: it reaches the task as it is."""
    if type(value) in _REFERENCES:
        references.append(value)
        return Slot(len(references) - 1)
    if type(value) not in _CONTAINERS or not _holds_reference(value):
        return Quote(value)
    if type(value) is dict:
        rebuilt: Dict[Any, Any] = {key: _template(item, references) for key, item in value.items()}
        return rebuilt
    items = [_template(item, references) for item in value]
    return items if type(value) is list else tuple(items)
