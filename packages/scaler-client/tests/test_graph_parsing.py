"""Properties of the graph parser (graph_parser.py, hypothesis): a call's arguments read inline, as strings and
numbers are, parse as `_Parser.expression` parses them one by one, and a node's dependencies are the keys its
parsed value reads, in order of first use, each once. Parsing leaves the garbage collector as it found it."""

from __future__ import annotations

import operator
from typing import Any, Dict, Hashable, List

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.client.graph_parser import _ATOMS, _Call, _Container, _Key, _Literal, _Parser, _Reference
from scaler.client.object_reference import ObjectReference

KEYS: List[Hashable] = ["a", "b", 1, 2.5, b"k", ("t", 0)]
GRAPH = {key: 0 for key in KEYS}

scalars = st.one_of(
    st.sampled_from([*KEYS, True, False, "c", 0, 2, b"x", ("t", 1), None]),
    st.just(ObjectReference(object_id=b"o" * 16, name="o", size=1)),
    st.text(max_size=2),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=1), children, max_size=3),
        st.lists(children, max_size=3).map(lambda arguments: (operator.add, *arguments)),
    ),
    max_leaves=12,
)


def shape(parsed: Any) -> Any:
    """A parsed expression as plain data, to compare two parses."""
    kind = type(parsed)
    if kind is _Key:
        return ("key", parsed.key)
    if kind is _Literal:
        return ("literal", type(parsed.value), parsed.value)
    if kind is _Reference:
        return ("reference", parsed.reference)
    if kind is _Call:
        return ("call", parsed.function, [shape(argument) for argument in parsed.arguments], parsed.direct)
    assert kind is _Container
    if parsed.kind is dict:
        return ("dict", {name: shape(item) for name, item in parsed.items.items()})
    return (parsed.kind.__name__, [shape(item) for item in parsed.items])


def keys_read(parsed: Any, found: Dict[Hashable, None]) -> List[Hashable]:
    """The keys a parsed expression reads, depth first and left to right, each once."""
    kind = type(parsed)
    if kind is _Key:
        found.setdefault(parsed.key, None)
    elif kind is _Call:
        for argument in parsed.arguments:
            keys_read(argument, found)
    elif kind is _Container:
        for item in parsed.items.values() if parsed.kind is dict else parsed.items:
            keys_read(item, found)
    return list(found)


@settings(max_examples=150, deadline=None)
@given(arguments=st.lists(values, max_size=4))
def test_a_call_parses_its_arguments_as_expressions_do(arguments: List[Any]) -> None:
    parser = _Parser(GRAPH)
    parsed, dependencies = parser.node("n", (operator.add, *arguments))
    one_by_one = [parser.expression(argument, {}) for argument in arguments]
    assert shape(parsed) == shape(_Call(operator.add, one_by_one, all(type(item) in _ATOMS for item in one_by_one)))
    assert dependencies == keys_read(parsed, {})


@settings(max_examples=100, deadline=None)
@given(value=values)
def test_a_node_depends_on_the_keys_its_value_reads(value: Any) -> None:
    parsed, dependencies = _Parser(GRAPH).node("n", value)
    assert dependencies == keys_read(parsed, {})
