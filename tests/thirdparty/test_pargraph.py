"""Pargraph 0.9.6's GraphEngine schedules graphs on our Client, on a local and on a command-line cluster.

Pargraph's README and its examples give GraphEngine "any object with submit(fn, /, *args, **kwargs) returning a
Future" as the backend: a Client is one. Its examples (pythagoras, sorting) are imported from its source
distribution unchanged; only the backend given to GraphEngine is ours.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from pargraph import GraphEngine

from scaler import Client, SchedulerClusterCombo


def inc(i):
    return i + 1


def add(a, b):
    return a + b


@pytest.fixture(scope="module")
def local_cluster():
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as combo:
        yield combo.get_address()


@pytest.fixture(params=["local", "remote"])
def client(request, local_cluster, remote_cluster):
    address = local_cluster if request.param == "local" else remote_cluster
    with Client(address=address) as connected:
        yield connected


@pytest.fixture(scope="module")
def examples(sources):
    sys.path.insert(0, sources["pargraph"])
    try:
        yield importlib.import_module("examples.pythagoras"), importlib.import_module("examples.sorting")
    finally:
        sys.path.remove(sources["pargraph"])


def test_the_readme_graph(client):
    graph = {"x": 1, "y": (inc, "x"), "z": (add, "y", 10)}
    engine = GraphEngine(client)
    assert engine.get(graph, "z") == 12
    assert engine.get(graph, ["x", "y", "z"]) == [1, 2, 12]


def test_the_examples(client, examples):
    pythagoras, sorting = examples
    engine = GraphEngine(client)
    task_graph, keys = pythagoras.pythagoras.to_graph().to_dict(a=3, b=4)
    assert engine.get(task_graph, keys)[0] == 5.0
    array = np.random.default_rng(7).random(1000)
    task_graph, keys = sorting.map_reduce_sort.to_graph(partition_count=4).to_dict(array=array, partition_count=4)
    assert np.array_equal(engine.get(task_graph, keys)[0], np.sort(array))
