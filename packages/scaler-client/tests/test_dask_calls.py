"""The pieces of Dask's calls on the Client, alone: gather and scatter over collections, references nested in a
task's arguments, the call check at submit, the current client, the scheduler's info as a dict."""

from __future__ import annotations

import concurrent.futures
import functools

import cloudpickle
import pytest

from scaler.client import current_client
from scaler.client.call_check import CallChecks
from scaler.client.dask_calls import DaskCalls
from scaler.client.gather_scatter import gather, scatter
from scaler.client.graph_evaluation import evaluate_graph_node
from scaler.client.nested_references import lift
from scaler.client.object_reference import ObjectReference
from scaler.client.scheduler_info import info_dict
from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError


def done(value=None, error=None, cancelled=False) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    if cancelled:
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def test_gather_replaces_futures_at_any_depth_and_keeps_the_shape():
    nested = {"a": [done(1), (done(2), 3)], "b": {done(4)}, "c": "text"}
    assert gather(nested) == {"a": [1, (2, 3)], "b": {4}, "c": "text"}
    assert gather(done(5)) == 5


def test_gather_raises_the_first_failure_or_skips_failures():
    futures = [done(1), done(error=KeyError("x")), done(cancelled=True), done(error=ValueError("y"))]
    with pytest.raises(KeyError):
        gather(futures)
    assert gather(futures, errors="skip") == [1]
    assert gather({"a": futures[1], "b": futures[0]}, errors="skip") == {"b": 1}
    assert gather(futures[1], errors="skip") is None
    with pytest.raises(ValueError, match="errors must be one of"):
        gather(futures, errors="ignore")


def test_scatter_puts_each_item_of_a_list_tuple_or_dict_and_anything_else_as_one():
    puts = []

    def put_all(values):
        puts.append(values)
        return [ObjectReference(bytes([len(puts), i]), type(v).__name__, 1) for i, v in enumerate(values)]

    assert [r.name for r in scatter([1, "x"], put_all)] == ["int", "str"]
    assert type(scatter((1, 2), put_all)) is tuple
    assert list(scatter({"a": 1.0, "b": 2}, put_all)) == ["a", "b"]
    assert scatter({1, 2}, put_all).name == "set"
    assert puts == [[1, "x"], [1, 2], [1.0, 2], [{1, 2}]]  # one round of puts per call


def test_a_call_with_references_nested_in_its_arguments_becomes_the_graph_evaluator():
    one, two = ObjectReference(b"1" * 16, "int", 1), ObjectReference(b"2" * 16, "list", 1)

    def f(a, b, *, c):
        return a, b, c

    assert lift(f, (one, [1]), {"c": 2}) == (f, (one, [1]), {"c": 2})  # a top-level reference is the worker's
    fn, args, kwargs = lift(f, (one, [two, {"x": (one,)}]), {"c": {"k": two}})
    assert fn is evaluate_graph_node and args[1:] == (one, two, one, two) and kwargs == {}
    # the worker passes each reference's object in its place
    assert fn(args[0], 10, [20], 10, [20]) == (10, [[20], {"x": (10,)}], {"k": [20]})
    cloudpickle.loads(args[0])  # the template travels pickled


def test_a_call_that_cannot_bind_raises_type_error_at_once_and_each_shape_binds_once(monkeypatch):
    checks = CallChecks()

    def f(a, b=1, *, c=2):
        return a

    checks.check(f, (1,), {"c": 3})
    with pytest.raises(TypeError, match=r"f\(\): missing a required argument: 'a'"):
        checks.check(f, (), {})
    with pytest.raises(TypeError, match="too many positional arguments"):
        checks.check(f, (1, 2, 3), {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        checks.check(f, (1,), {"d": 1})
    binds = []
    monkeypatch.setattr("scaler.client.call_check._signature", lambda fn: binds.append(fn))
    for _ in range(3):
        checks.check(f, (1,), {"c": 3})  # known: not bound again
    assert binds == []
    checks.check(functools.partial(f, 1), (), {})  # partials and builtins without a signature pass
    checks.check(print, (1, 2), {"sep": ""})


def test_a_callable_that_may_hold_data_is_not_kept_by_the_call_checks():
    class Batch:  # as joblib's: a callable object holding its calls' arguments
        def __init__(self, data):
            self.data = data

        def __call__(self):
            return len(self.data)

    checks = CallChecks()
    for _ in range(3):
        checks.check(Batch(bytearray(1000)), (), {})
    assert checks._passed == {}
    with pytest.raises(TypeError, match="too many positional arguments"):
        checks.check(Batch(b""), (1,), {})


def test_the_current_client_is_the_innermost_entered_else_the_last_made_while_connected():
    class Fake:
        connected = True

    first, second, third = Fake(), Fake(), Fake()
    current_client.made(first)
    assert current_client.current() is first
    current_client.entered(second)
    current_client.made(third)
    assert current_client.current() is second
    second.connected = False
    assert current_client.current() is third
    current_client.exited(second)
    third.connected = False
    assert current_client.current() is None


def test_the_schedulers_info_reads_as_a_plain_dict():
    heartbeat = m.WorkerHeartbeat(agent_cpu=0.5, processor_cpu=1.0, agent_rss_bytes=10, processor_rss_bytes=20,
                                  running_tasks=1, queued_tasks=2, memory_limit_bytes=1 << 30)  # fmt: skip
    worker = m.WorkerSnapshot(b"W|node1|42|abcd", heartbeat, 1, 3, [m.Capability("gpu", 2)], 0.5, b"", False)
    snapshot = m.StateSnapshot(task_states=[m.Counter("queued", 4)], workers=[worker], clients=2)
    info = info_dict(m.SchedulerInfo(snapshot, "tcp://h:3", ""), "tcp://h:1", m.Version(1, 8))
    assert info["address"] == "tcp://h:1" and info["dashboard_link"] is None and info["protocol_version"] == "1.8"
    assert info["clients"] == 2 and info["tasks"] == {"queued": 4} and info["monitor_address"] == "tcp://h:3"
    assert info["workers"] == {
        "W|node1|42|abcd": {
            "id": "W|node1|42|abcd", "host": "node1", "pid": 42, "capabilities": {"gpu": 2}, "tasks": 3,
            "running": 1, "queued": 2, "slots": 1, "cpu": 1.5, "memory_bytes": 30, "memory_limit_bytes": 1 << 30,
            "group": None, "draining": False, "last_seen_seconds_ago": 0.5,
        }
    }  # fmt: skip


def test_a_scheduler_older_than_1_8_has_no_info_to_give_and_no_dashboard_link():
    class OldScheduler(DaskCalls):
        _address = "tcp://h:1"
        _dashboard_link = None

        class _agent:
            scheduler_version = m.Version(1, 7)

    with pytest.raises(ProtocolError, match="scheduler_info needs a scheduler of protocol 1.8 or later; this one "
                       "speaks 1.7"):  # fmt: skip
        OldScheduler().scheduler_info()
    assert OldScheduler().dashboard_link is None
