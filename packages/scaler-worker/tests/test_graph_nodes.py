"""A graph node runs its own code inside scaler.client.graph_evaluation: that is not a wait inside the client."""

from __future__ import annotations

import sys

import cloudpickle

from scaler.client.graph_evaluation import Call, evaluate_graph_node
from scaler.worker.processor import _inside_client


def probe() -> bool:
    return _inside_client(sys._getframe())


def _client_function(name: str):
    """A function whose frame belongs to a module of the Scaler client (as a wait on a future does)."""
    namespace = {"__name__": name, "probe": probe}
    exec("def wait():\n    return probe()\n", namespace)
    return namespace["wait"]


def test_a_graph_node_computing_is_not_inside_the_client():
    assert probe() is False
    assert evaluate_graph_node(cloudpickle.dumps(Call(probe, []))) is False


def test_a_graph_node_waiting_inside_the_client_is():
    wait = _client_function("scaler.client.future")
    assert wait() is True
    assert evaluate_graph_node(cloudpickle.dumps(Call(wait, []))) is True
