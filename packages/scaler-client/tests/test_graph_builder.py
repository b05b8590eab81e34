"""Graphs checked and encoded on the client (graph_builder.py), and the worker-side evaluator: no sockets."""

from __future__ import annotations

import gc
import itertools
import operator
import pickle
from typing import Any, Dict, List

import cloudpickle
import pytest

from scaler.client.graph_builder import GraphEncoder, build_graph, collector_paused, flatten_keys, pack_results
from scaler.client.graph_evaluation import Call, Quote, Slot, evaluate, evaluate_graph_node
from scaler.client.graph_parser import GraphCycleError, GraphKeyError
from scaler.client.object_reference import ObjectReference
from scaler.client.serializer import DefaultSerializer
from scaler.protocol.messages import ArgumentKind, GraphTask, Task

CLIENT_ID = b"C|test|1|abc"


class Built:
    """A built graph with every part encoded: the parts, and all of them as one message and one list of puts."""

    def __init__(self, graph: Any, keys: List[Any], encoder: GraphEncoder, part_size: Any = None) -> None:
        built = build_graph(graph, keys, encoder, part_size)
        self.key_targets, self.key_values = built.key_targets, built.key_values
        self.parts = list(built.parts)
        tasks = [task for part in self.parts for task in part.message.tasks]
        self.message = GraphTask(built.graph_id, tasks, self.parts[0].message.targets)
        self.puts = [put for part in self.parts for put in part.puts]


build = Built
EVALUATOR = b"evaluator-id"
SERIALIZER = DefaultSerializer()


def inc(x: int) -> int:
    return x + 1


def add(x: int, y: int) -> int:
    return x + y


class Encoder(GraphEncoder):
    def __init__(self, inline_limit: int = 64 * 1024) -> None:
        counter = itertools.count(1)
        self.functions: Dict[int, bytes] = {}
        super().__init__(
            next_id=lambda: next(counter).to_bytes(16, "big"),
            function_id=self._function_id,
            serialize=SERIALIZER.serialize,
            serializer_id=b"",
            client_id=CLIENT_ID,
            inline_limit=inline_limit,
        )

    def _function_id(self, function) -> bytes:
        if function is evaluate_graph_node:
            return EVALUATOR
        return self.functions.setdefault(id(function), b"fn-%d" % len(self.functions))


def run(graph: Dict[Any, Any], keys: List[Any], part_size: Any = None, **options) -> Dict[Any, Any]:
    """Build the graph, then run its tasks here the way workers would: the encoding must compute the same values."""
    encoder = Encoder(**options)
    built = build(graph, keys, encoder, part_size)
    functions = {function_id: function for function_id, function in _functions(graph, encoder).items()}
    objects = dict(built.puts)
    by_id = {task.task_id: task for task in built.message.tasks}
    values: Dict[bytes, Any] = {}

    def value_of(task: Task) -> Any:
        if task.task_id not in values:
            arguments = []
            for argument in task.arguments:
                if argument.kind == ArgumentKind.TASK:
                    arguments.append(value_of(by_id[argument.data]))
                elif argument.kind == ArgumentKind.INLINE:
                    arguments.append(SERIALIZER.deserialize(argument.data))
                else:
                    arguments.append(SERIALIZER.deserialize(objects[argument.data]))
            function = evaluate_graph_node if task.function_id == EVALUATOR else functions[task.function_id]
            values[task.task_id] = function(*arguments)
        return values[task.task_id]

    results = {key: value_of(by_id[target]) for key, target in built.key_targets.items()}
    results.update(built.key_values)
    return results


def _functions(graph: Dict[Any, Any], encoder: Encoder) -> Dict[bytes, Any]:
    found = {}

    def walk(value: Any) -> None:
        if type(value) is tuple and value and callable(value[0]):
            if id(value[0]) in encoder.functions:
                found[encoder.functions[id(value[0])]] = value[0]
            for item in value[1:]:
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)

    for value in graph.values():
        walk(value)
    return found


# ----------------------------------------------------------------------------- what graphs compute


def test_the_readme_example():
    graph = {"a": 1, "b": 2, "c": (inc, "a"), "d": (inc, "b"), "e": (add, "c", "d")}
    assert run(graph, ["e"]) == {"e": 5}
    assert run(graph, ["a", "c", "e"]) == {"a": 1, "c": 2, "e": 5}


def test_literals_none_and_plain_strings():
    graph = {"a": None, "b": (operator.is_, "a", None), "s": "not a key", "t": (operator.add, "s", "!")}
    assert run(graph, ["a", "b", "t"]) == {"a": None, "b": True, "t": "not a key!"}


def test_nested_containers_of_keys_and_nested_tasks():
    graph = {
        "x": 3,
        "y": (inc, "x"),
        "z": (list, [["x", "y"], ("y", 7), {"k": "y", "lit": [1, 2]}, (inc, (inc, "y"))]),
        "w": ["x", {"y": "y"}],
    }
    assert run(graph, ["z", "w"]) == {"z": [[3, 4], (4, 7), {"k": 4, "lit": [1, 2]}, 6], "w": [3, {"y": 4}]}


def test_duplicate_dependencies_and_aliases():
    graph = {"a": 2, "b": (inc, "a"), "c": (add, "b", "b"), "d": "c", "e": "d", "f": (add, "e", "d")}
    assert run(graph, ["f", "e"]) == {"f": 12, "e": 6}


def test_tuple_keys_as_dask_names_them():
    graph = {("x", 0): 1, ("x", 1): (inc, ("x", 0)), "total": (sum, [("x", 0), ("x", 1)])}
    assert run(graph, ["total", ("x", 1)]) == {"total": 3, ("x", 1): 2}


def test_object_references_are_passed_as_objects():
    reference = ObjectReference(object_id=b"o" * 16, name="list", size=10)
    built = build({"r": reference, "a": (len, "r"), "b": (len, [reference])}, ["a", "b", "r"], Encoder())
    tasks = {task.task_id: task for task in built.message.tasks}
    direct = tasks[built.key_targets["a"]]
    assert [(a.kind, a.data) for a in direct.arguments] == [(ArgumentKind.OBJECT, reference.object_id)]
    nested = tasks[built.key_targets["b"]]
    assert nested.function_id == EVALUATOR and nested.arguments[1].kind == ArgumentKind.OBJECT
    requested = tasks[built.key_targets["r"]]  # a requested reference: a task returns the object
    assert requested.function_id == EVALUATOR and requested.arguments[1].data == reference.object_id


def test_only_what_the_keys_need_is_encoded_and_literals_need_no_task():
    graph = {"a": 1, "b": (inc, "a"), "unused": (inc, "b"), "lit": [1, 2]}
    built = build(graph, ["b", "lit"], Encoder())
    assert len(built.message.tasks) == 1 and built.key_values == {"lit": [1, 2]}
    (task,) = built.message.tasks
    assert task.arguments[0].kind == ArgumentKind.INLINE and SERIALIZER.deserialize(task.arguments[0].data) == 1
    assert built.message.targets == [task.task_id] and task.client_id == CLIENT_ID


def test_large_literals_go_through_object_storage_once():
    big = b"x" * 1000
    graph = {"big": big, "a": (len, "big"), "b": (len, "big"), "c": (add, "a", "b")}
    built = build(graph, ["c"], Encoder(inline_limit=100))
    assert len(built.puts) == 1
    assert run(graph, ["c"], inline_limit=100) == {"c": 2000}


def test_keys_that_share_a_task_share_one_target():
    built = build({"a": (inc, 1), "b": "a"}, ["a", "b"], Encoder())
    assert built.key_targets["a"] == built.key_targets["b"] and len(built.message.targets) == 1


# ----------------------------------------------------------------------------- errors before anything runs


def test_missing_keys_are_named():
    with pytest.raises(GraphKeyError, match="'nope'") as caught:
        build_graph({"a": 1}, ["a", "nope"], Encoder())
    assert isinstance(caught.value, KeyError)


def test_a_cycle_is_named_along_its_path():
    graph = {"a": (inc, "b"), "b": (inc, "c"), "c": (add, "x", "a"), "x": 1, "y": (inc, "x")}
    with pytest.raises(GraphCycleError, match="'a' -> 'b' -> 'c' -> 'a'"):
        build(graph, ["y", "a"], Encoder())


def test_an_alias_cycle_is_a_cycle():
    with pytest.raises(GraphCycleError, match="'a' -> 'b' -> 'a'"):
        build_graph({"a": "b", "b": "a"}, ["a"], Encoder())


def test_a_cycle_the_keys_do_not_need_is_not_an_error():
    assert run({"a": (inc, "b"), "b": (inc, "a"), "c": 1}, ["c"]) == {"c": 1}


def test_a_graph_must_be_a_mapping():
    with pytest.raises(TypeError, match="mapping"):
        build_graph([("a", 1)], ["a"], Encoder())


def test_a_deep_chain_is_checked_without_recursion():
    graph: Dict[Any, Any] = {0: 0}
    for i in range(1, 20_000):
        graph[i] = (inc, i - 1)
    built = build(graph, [19_999], Encoder())
    assert len(built.message.tasks) == 19_999


# ----------------------------------------------------------------------------- evaluation and Dask's key shapes


def test_evaluator_builds_containers_calls_and_keeps_quoted_values():
    template = Call(add, [Slot(0), Call(len, [[Slot(1), (Slot(0),), {"k": Slot(1)}]])])
    assert evaluate(template, [10, "v"]) == 13
    quoted = Quote([Slot(0)])
    assert evaluate(quoted, [1]) is quoted.value
    assert evaluate_graph_node(cloudpickle.dumps(Call(inc, [Slot(0)])), 41) == 42


def test_templates_pickle_small():
    assert len(pickle.dumps(Call(inc, [Slot(0), Slot(1)]))) < 200


def test_dask_keys_are_flattened_and_packed_back_in_their_shape():
    keys = [["a", ("x", 1)], "b", ["a"]]
    assert flatten_keys(keys) == ["a", ("x", 1), "b"]
    values = {"a": 1, ("x", 1): 2, "b": 3}
    assert pack_results(keys, values) == ((1, 2), 3, (1,))
    assert pack_results("b", values) == 3


def test_a_graph_in_parts_comes_in_dependency_order_with_the_targets_first():
    graph = {"x": 1, "r": ObjectReference(b"obj-" + bytes(12), "r", 3)}
    for i in range(7):
        graph[f"leaf-{i}"] = (inc, "x")
    graph["sum"] = (sum, [f"leaf-{i}" for i in range(7)])  # through the evaluator
    graph["total"] = (add, "sum", "leaf-0")
    built = build(graph, ["total", "r"], Encoder(), part_size=3)
    assert [(len(p.message.tasks), p.message.more) for p in built.parts] == [
        (3, True),
        (3, True),
        (3, True),
        (1, False),
    ]
    assert built.parts[0].message.targets == [built.key_targets["total"], built.key_targets["r"]]
    assert all(p.message.targets == [] for p in built.parts[1:])
    seen = set()
    for part in built.parts:
        for task in part.message.tasks:
            needed = {a.data for a in task.arguments if a.kind == ArgumentKind.TASK}
            assert needed <= seen, "a task before a task it needs"
            seen.add(task.task_id)
    named = [f for part in built.parts for f in part.function_ids]
    assert len(named) == len(set(named)) == 3  # inc, the evaluator, add: each listed by the first part naming it
    assert run(graph, ["total"], part_size=3) == run(graph, ["total"]) == {"total": 16}


def test_the_collector_is_paused_while_a_graph_is_built_and_left_as_it_was_found():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(GraphKeyError), collector_paused():
        build({"a": 1}, ["nope"], Encoder())
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # the user had paused it: still paused
    finally:
        gc.enable()
