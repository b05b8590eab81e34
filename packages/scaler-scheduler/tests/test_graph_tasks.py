"""Graph tasks in the scheduler core, with both topological sorters: no sockets, no processes."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import codec, routed
from scaler.protocol import messages as m
from scaler.protocol.lifecycle import TransitionError
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.graph_index import GraphBLASGraphIndex, PythonGraphIndex, graphblas_available
from scaler.scheduler.graph_node_lifecycle import FINISHED_STATES, NODE_STATES, NodeEvent, NodeState
from scaler.scheduler.graph_record import GraphActions
from scaler.scheduler.graph_tasks import CYCLE_REASON
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import STORAGE, Continue, FromPeer, FromStorage, MoreToDo, Send, Start
from scaler.scheduler.scheduler_settings import SchedulerSettings

CLIENT = b"C|host|1|aa"
OTHER_CLIENT = b"C|host|1|bb"
WORKER = b"W|host|2|aa"

SORTERS = [
    "python",
    pytest.param(
        "graphblas", marks=pytest.mark.skipif(not graphblas_available(), reason="python-graphblas is not installed")
    ),
]
INDEXES = [
    PythonGraphIndex,
    pytest.param(
        GraphBLASGraphIndex,
        marks=pytest.mark.skipif(not graphblas_available(), reason="python-graphblas is not installed"),
    ),
]


# ----------------------------------------------------------------------------- the two indexes agree


def _random_dag(size: int, edge_count: int, seed: int) -> Tuple[List[int], List[int]]:
    rng = random.Random(seed)
    edges = set()
    while len(edges) < min(edge_count, size * (size - 1) // 2):
        a, b = rng.randrange(size), rng.randrange(size)
        if a < b:
            edges.add((a, b))
    ordered = sorted(edges)
    return [a for a, _ in ordered], [b for _, b in ordered]


@pytest.mark.skipif(not graphblas_available(), reason="python-graphblas is not installed")
@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 150),
    density=st.floats(0.0, 4.0),
    seed=st.integers(0, 10**6),
    batch_sizes=st.lists(st.sampled_from([1, 2, 5, 64, 100]), min_size=1, max_size=8),
    cut=st.floats(0.0, 1.0),
)
def test_graphblas_and_python_indexes_give_identical_answers(size, density, seed, batch_sizes, cut):
    """Built whole, or in two parts with completions in between (an open index, then closed)."""
    sources, targets = _random_dag(size, int(size * density), seed)
    first = int(size * cut)  # nodes of the first part; the edges into the rest come with the second
    parts = first < size
    head = [k for k, b in enumerate(targets) if b < first] if parts else list(range(len(targets)))
    python = PythonGraphIndex(first if parts else size, [sources[k] for k in head], [targets[k] for k in head], parts)
    graphblas = GraphBLASGraphIndex(
        first if parts else size, [sources[k] for k in head], [targets[k] for k in head], parts
    )
    order = list(range(first)) if parts else list(range(size))
    random.Random(seed + 1).shuffle(order)
    if parts:
        early = order[: len(order) // 2]  # finished before the second part arrives
        assert python.finish(early) == graphblas.finish(early)
        tail = [k for k, b in enumerate(targets) if b >= first]
        rest_sources, rest_targets = [sources[k] for k in tail], [targets[k] for k in tail]
        assert python.extend(size - first, rest_sources, rest_targets) == graphblas.extend(
            size - first, rest_sources, rest_targets
        )
        assert python.close() == graphblas.close()
        order = order[len(order) // 2 :] + list(range(first, size))
    assert python.roots() == graphblas.roots()
    assert python.dependant_counts() == graphblas.dependant_counts()
    starts = random.Random(seed).sample(range(size), min(3, size))
    assert python.descendants(starts) == graphblas.descendants(starts)
    position = 0
    for batch in batch_sizes * size:
        if position >= len(order):
            break
        nodes = order[position : position + batch]
        position += batch
        assert python.finish(nodes) == graphblas.finish(nodes)
    assert [python.unfinished_dependants(i) for i in range(size)] == [
        graphblas.unfinished_dependants(i) for i in range(size)
    ]


def test_an_open_index_frees_nothing_until_closed():
    index = PythonGraphIndex(2, [0], [1], open=True)  # 0 -> 1
    assert index.finish([0]) == ([1], [])
    assert index.extend(2, [0, 2], [2, 3]) == [2]  # 0 finished already: 2 is ready; 3 waits for 2
    assert index.finish([1, 2]) == ([3], [])  # 0 is needed by nobody unfinished, but more may come
    assert index.close() == [0, 1]  # finished, and nothing needs them
    assert index.unfinished_dependants(2) == 1 and index.finish([3]) == ([], [2])


@pytest.mark.parametrize("index_type", INDEXES)
def test_index_of_a_diamond(index_type):
    index = index_type(4, [0, 0, 1, 2], [1, 2, 3, 3])  # 0 -> 1, 2 -> 3
    assert index.roots() == [0]
    assert index.dependant_counts() == [2, 1, 1, 0]
    assert index.descendants([0]) == [1, 2, 3]
    assert index.descendants([1]) == [3]
    assert index.finish([0]) == ([1, 2], [])
    assert index.finish([1]) == ([], [])
    assert index.unfinished_dependants(0) == 1
    assert index.finish([2]) == ([3], [0])
    assert index.finish([3]) == ([], [1, 2])


@pytest.mark.parametrize("index_type", INDEXES)
def test_index_settles_large_batches_like_small_ones(index_type):
    size = 500  # a wide fan-in: batches over GraphBLASGraphIndex.BATCH go through GraphBLAS
    index = index_type(size + 1, list(range(size)), [size] * size)
    assert index.finish(list(range(size - 1))) == ([], [])
    assert index.finish([size - 1]) == ([size], [])
    assert index.finish([size]) == ([], list(range(size)))


# ----------------------------------------------------------------------------- the core with graphs


def node(n: int, *deps: int, store: bool = False) -> m.Task:
    arguments = [m.Argument("", m.ArgumentKind.TASK, tid(d)) for d in deps]
    arguments.append(m.Argument("", m.ArgumentKind.INLINE, b"literal"))
    return m.Task(task_id=tid(n), function_id=b"f", arguments=arguments)


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def oid(n: int) -> bytes:
    return b"result-" + n.to_bytes(9, "big")


def graph(tasks: Sequence[m.Task], targets: Sequence[int], graph_id: bytes = b"g1", more: bool = False) -> m.GraphTask:
    """The graph (or a part of it, ``more``) as the scheduler's shell reads it (`routed.decode_routed`: each node a
    `routed.RoutedTask`)."""
    message = m.GraphTask(graph_id=graph_id, tasks=list(tasks), targets=[tid(t) for t in targets], more=more)
    return routed.decode_routed(codec.encode(message))[0]


def core_with(sorter: str, capacity: int = 1000, inline_bytes: int = 0) -> SchedulerCore:
    """A core with one client and one worker; by default every result other nodes need goes to storage."""
    settings = SchedulerSettings(
        object_storage_address="tcp://127.0.0.1:1", graph_sorter=sorter, graph_inline_bytes=inline_bytes
    )
    core = SchedulerCore(settings)
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)  # its object storage server answered
    core.handle(FromPeer(CLIENT, m.Hello(m.Version(1, 0), m.PeerRole.CLIENT, 1, "host")), 0.0)
    core.handle(
        FromPeer(WORKER, m.Hello(m.Version(1, 0), m.PeerRole.WORKER, 2, "host", m.WorkerInfo(1, capacity))), 0.0
    )
    return core


def messages(effects, to=None, kind=None) -> List:
    return [e.message for e in effects if type(e) is Send and (to is None or e.to == to)
            and (kind is None or type(e.message) is kind)]  # fmt: skip


def assigned(effects) -> Dict[int, m.Task]:
    """The tasks sent to the worker, as it reads them."""
    tasks = [t for b in messages(effects, WORKER, m.TaskBatch) for t in b.tasks]
    return {int.from_bytes(t.task_id, "big"): t.to_task() for t in tasks}


def to_client(effects, client=CLIENT) -> Dict[int, m.TaskResult]:
    batches = messages(effects, client, m.TaskResultBatch)
    return {int.from_bytes(r.task_id, "big"): r for b in batches for r in b.results}


def deleted(effects) -> List[bytes]:
    return [i for r in messages(effects, STORAGE, m.ObjectRequest) if r.kind == m.ObjectRequestKind.DELETE
            for i in r.object_ids]  # fmt: skip


def success(n: int, attempt: int = 1, stored: bool = True) -> m.TaskResult:
    if stored:
        return m.TaskResult(tid(n), attempt, m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT, oid(n))
    return m.TaskResult(tid(n), attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, b"value-%d" % n)


def failure(n: int, payload: bytes = b"pickled (exception, traceback)") -> m.TaskResult:
    return m.TaskResult(tid(n), 1, m.TaskStatus.FAILED, m.PayloadKind.INLINE, payload, "")


def report(core: SchedulerCore, *results: m.TaskResult):
    return core.handle(FromPeer(WORKER, m.TaskResultBatch(list(results))), 1.0)


@pytest.fixture(params=SORTERS)
def sorter(request) -> str:
    return request.param


def test_diamond_runs_in_order_and_frees_intermediate_results(sorter):
    core = core_with(sorter)
    effects = core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1), node(3, 1), node(4, 2, 3)], targets=[4])), 0.5)
    assert list(assigned(effects)) == [1]
    assert assigned(effects)[1].store_result and to_client(effects) == {}

    effects = report(core, success(1))
    released = assigned(effects)
    assert sorted(released) == [2, 3] and all(t.store_result for t in released.values())
    assert released[2].arguments[0] == m.Argument("", m.ArgumentKind.OBJECT, oid(1))
    assert released[2].arguments[1] == m.Argument("", m.ArgumentKind.INLINE, b"literal")
    assert deleted(effects) == [] and to_client(effects) == {}

    effects = report(core, success(2))
    assert assigned(effects) == {} and deleted(effects) == []
    effects = report(core, success(3))
    assert deleted(effects) == [oid(1)]  # nobody needs 1 any more
    (last,) = assigned(effects).values()
    assert not last.store_result
    assert [a.data for a in last.arguments[:2]] == [oid(2), oid(3)]

    effects = report(core, success(4, stored=False))
    assert list(to_client(effects)) == [4] and to_client(effects)[4].payload == b"value-4"
    assert sorted(deleted(effects)) == [oid(2), oid(3)]
    assert core.graphs.graph_count == 0 and core.graphs.node_count == 0 and core.task_count == 0


def test_small_results_travel_inline_while_the_budget_lasts(sorter):
    core = core_with(sorter, inline_bytes=10)
    effects = core.handle(FromPeer(CLIENT, graph([node(1), node(2), node(3, 1, 2), node(4, 3)], targets=[4])), 0.5)
    assert [t.store_result for t in assigned(effects).values()] == [False, False]
    effects = report(core, success(1, stored=False))  # 7 bytes held: under the budget
    assert core.graphs.inline_bytes == 7 and assigned(effects) == {}
    effects = report(core, success(2, stored=False))  # 14 bytes: the budget is spent
    (third,) = assigned(effects).values()
    assert third.store_result  # its result goes to storage
    assert third.arguments[:2] == [
        m.Argument("", m.ArgumentKind.INLINE, b"value-1"),
        m.Argument("", m.ArgumentKind.INLINE, b"value-2"),
    ]
    assert core.graphs.inline_bytes == 14  # until 3 is done with them
    (fourth,) = assigned(report(core, success(3))).values()
    assert core.graphs.inline_bytes == 0
    assert not fourth.store_result and fourth.arguments[0].kind == m.ArgumentKind.OBJECT
    effects = report(core, success(4, stored=False))
    assert list(to_client(effects)) == [4] and deleted(effects) == [oid(3)]


def test_duplicate_dependency_is_one_edge_and_both_arguments_are_rewritten(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1, 1)], targets=[2])), 0.5)
    effects = report(core, success(1))
    (second,) = assigned(effects).values()
    assert [a.data for a in second.arguments[:2]] == [oid(1), oid(1)]
    effects = report(core, success(2))
    assert deleted(effects) == [oid(1)] and list(to_client(effects)) == [2]


def test_inline_result_of_an_old_worker_is_passed_inline(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1)], targets=[2])), 0.5)
    (second,) = assigned(report(core, success(1, stored=False))).values()
    assert second.arguments[0] == m.Argument("", m.ArgumentKind.INLINE, b"value-1")


def test_target_needed_by_other_nodes_is_delivered_once_they_are_done(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1), node(3, 1)], targets=[1, 3])), 0.5)
    effects = report(core, success(1))
    assert to_client(effects) == {} and sorted(assigned(effects)) == [2, 3]
    effects = report(core, success(3, stored=False), success(2))
    assert sorted(to_client(effects)) == [1, 3]
    assert to_client(effects)[1].payload == oid(1)  # the client now owns that object
    assert deleted(effects) == [oid(2)]  # 2 is not a target: its result is dropped


def test_failure_fails_exactly_the_dependants_with_the_original_payload(sorter):
    core = core_with(sorter)
    tasks = [node(1), node(2, 1), node(3, 2), node(4), node(5, 4), node(6, 3, 5)]
    core.handle(FromPeer(CLIENT, graph(tasks, targets=[2, 3, 5, 6])), 0.5)
    effects = report(core, failure(1, b"the exception"))
    results = to_client(effects)
    assert sorted(results) == [2, 3, 6]  # 6 needs 3, which needs 2, which needs 1
    assert all(r.status == m.TaskStatus.FAILED and r.payload == b"the exception" for r in results.values())
    effects = report(core, success(4))
    assert list(assigned(effects)) == [5]
    effects = report(core, success(5, stored=False))
    # 5's only dependant (6) failed already: 5 is delivered at once, and 4's result is deleted
    assert list(to_client(effects)) == [5] and deleted(effects) == [oid(4)]
    assert core.graphs.graph_count == 0


def test_failure_of_one_input_cancels_inputs_nothing_else_needs(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2), node(3, 1, 2)], targets=[3])), 0.5)
    effects = report(core, failure(1))
    assert list(to_client(effects)) == [3]
    assert messages(effects, WORKER, m.TaskCancel) == [m.TaskCancel([tid(2)])]
    # the worker confirms; the confirm is the graph layer's, not the client's
    effects = core.handle(FromPeer(WORKER, m.TaskCancelConfirm([tid(2)], [True])), 1.5)
    assert messages(effects, CLIENT) == []
    assert not core.graphs.active and core.task_count == 0


def test_cancelling_the_targets_cancels_every_pending_node(sorter):
    core = core_with(sorter)
    tasks = [node(1), node(2), node(3, 1), node(4, 2), node(5, 3, 4)]
    core.handle(FromPeer(CLIENT, graph(tasks, targets=[5])), 0.5)
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(5)])), 1.0)
    assert messages(effects, CLIENT) == [m.TaskCancelConfirm([tid(5)], [True])]
    (cancel,) = messages(effects, WORKER, m.TaskCancel)
    assert sorted(cancel.task_ids) == [tid(1), tid(2)]
    assert core.graphs.graph_count == 0
    # the result of 1 crossed the cancel: its object is deleted, nothing reaches the client
    effects = report(core, success(1))
    assert to_client(effects) == {} and deleted(effects) == [oid(1)]
    effects = core.handle(FromPeer(WORKER, m.TaskCancelConfirm([tid(1), tid(2)], [False, True])), 1.5)
    assert messages(effects, CLIENT) == []
    assert not core.graphs.active and core.task_count == 0


def test_cancelling_one_target_keeps_what_another_target_needs(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1), node(3, 1), node(4)], targets=[2, 3, 4])), 0.5)
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(2), tid(4), tid(99)])), 1.0)
    confirms = messages(effects, CLIENT, m.TaskCancelConfirm)
    flags = {i: f for c in confirms for i, f in zip(c.task_ids, c.cancelled, strict=True)}
    assert flags == {tid(2): True, tid(4): True, tid(99): False}
    (cancel,) = messages(effects, WORKER, m.TaskCancel)
    assert cancel.task_ids == [tid(4)]  # 1 still runs for 3
    effects = report(core, success(1))
    assert list(assigned(effects)) == [3]  # 2 was never released
    effects = report(core, success(3, stored=False))
    assert list(to_client(effects)) == [3] and deleted(effects) == [oid(1)]
    # cancelling a delivered target is refused
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(3)])), 2.0)
    assert messages(effects, CLIENT) == [m.TaskCancelConfirm([tid(3)], [False])]


def test_cycle_rejects_the_stuck_nodes_and_runs_the_rest(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1, 2), node(2, 1), node(3, 2), node(4)], targets=[3, 4])), 0.5)
    effects = report(core, success(4, stored=False))
    results = to_client(effects)
    assert results[4].status == m.TaskStatus.SUCCESS
    assert results[3].status == m.TaskStatus.REJECTED and results[3].error_text == CYCLE_REASON
    assert core.graphs.graph_count == 0


@pytest.mark.parametrize(
    "tasks, targets, problem",
    [
        ([node(1), node(2, 7)], [2], "not in the graph"),
        ([node(1), node(1)], [1], "appears twice"),
        ([node(1, 1)], [1], "its own result"),
        ([node(1)], [5], "not a task of the graph"),
    ],
)
def test_malformed_graph_is_rejected_whole(sorter, tasks, targets, problem):
    core = core_with(sorter)
    effects = core.handle(FromPeer(CLIENT, graph(tasks, targets)), 0.5)
    assert assigned(effects) == {}
    results = to_client(effects)
    assert sorted(results) == sorted(set(targets))
    assert all(r.status == m.TaskStatus.REJECTED and problem in r.error_text for r in results.values())
    assert core.graphs.graph_count == 0


def test_graph_reusing_a_known_task_id_is_rejected(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, m.TaskBatch([node(1)])), 0.5)
    effects = core.handle(FromPeer(CLIENT, graph([node(1)], targets=[1])), 0.6)
    assert "already known" in to_client(effects)[1].error_text


def test_client_disconnect_drops_its_graphs_and_cancels_their_tasks(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2), node(3, 1, 2)], targets=[3])), 0.5)
    effects = core.handle(FromPeer(CLIENT, m.DisconnectRequest("bye")), 1.0)
    (cancel,) = messages(effects, WORKER, m.TaskCancel)
    assert sorted(cancel.task_ids) == [tid(1), tid(2)]
    assert messages(effects, STORAGE, m.ObjectRequest)[0].kind == m.ObjectRequestKind.CLEAR_OWNER
    assert not core.graphs.active
    assert to_client(report(core, success(1))) == {}


def test_results_of_another_clients_tasks_are_not_taken(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(OTHER_CLIENT, m.Hello(m.Version(1, 0), m.PeerRole.CLIENT, 1, "host")), 0.0)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1)], targets=[2])), 0.5)
    core.handle(FromPeer(OTHER_CLIENT, m.TaskBatch([node(50)])), 0.6)
    effects = report(core, success(50, stored=False), success(1))
    assert list(to_client(effects, OTHER_CLIENT)) == [50] and to_client(effects) == {}


# ----------------------------------------------------------------------------- graphs sent in parts


def test_a_graph_in_parts_runs_before_its_last_part_and_frees_nothing_until_then(sorter):
    core = core_with(sorter)
    effects = core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1)], targets=[4, 2], more=True)), 0.5)
    assert list(assigned(effects)) == [1]  # target 4 comes with a later part
    effects = report(core, success(1))
    assert list(assigned(effects)) == [2]
    effects = report(core, success(2))
    assert deleted(effects) == [] and to_client(effects) == {}  # a later part may still need 1 and 2
    effects = core.handle(FromPeer(CLIENT, graph([node(3, 1), node(4, 2, 3)], targets=[])), 0.6)
    (third,) = assigned(effects).values()
    assert third.arguments[0] == m.Argument("", m.ArgumentKind.OBJECT, oid(1))
    effects = report(core, success(3))
    assert deleted(effects) == [oid(1)]
    assert [a.data for a in assigned(effects)[4].arguments[:2]] == [oid(2), oid(3)]
    effects = report(core, success(4, stored=False))
    assert sorted(to_client(effects)) == [2, 4] and to_client(effects)[2].payload == oid(2)
    assert deleted(effects) == [oid(3)]
    assert not core.graphs.active and core.task_count == 0


def test_a_failure_reaches_the_nodes_and_targets_of_later_parts(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2)], targets=[1, 4, 6], more=True)), 0.5)
    effects = report(core, failure(1, b"boom"))
    assert list(to_client(effects)) == [1]
    effects = core.handle(FromPeer(CLIENT, graph([node(3, 1), node(4, 3), node(5, 2)], targets=[], more=True)), 0.6)
    assert assigned(effects) == {} and list(to_client(effects)) == [4]  # 3 and 4 fail with 1; 5 waits for 2
    effects = core.handle(FromPeer(CLIENT, graph([node(6, 4, 5)], targets=[])), 0.7)
    results = to_client(effects)
    assert list(results) == [6] and results[6].status == m.TaskStatus.FAILED and results[6].payload == b"boom"
    (cancel,) = messages(effects, WORKER, m.TaskCancel)  # nothing wanted needs 2 any more
    assert cancel.task_ids == [tid(2)]
    core.handle(FromPeer(WORKER, m.TaskCancelConfirm([tid(2)], [True])), 1.0)
    assert not core.graphs.active and core.task_count == 0


def test_a_target_of_a_later_part_may_be_cancelled_before_it_comes(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1)], targets=[2], more=True)), 0.5)
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([tid(2)])), 0.6)
    assert messages(effects, CLIENT) == [m.TaskCancelConfirm([tid(2)], [True])]
    effects = core.handle(FromPeer(CLIENT, graph([node(2, 1)], targets=[])), 0.7)
    assert messages(effects, WORKER, m.TaskCancel) == [m.TaskCancel([tid(1)])]  # nothing is wanted
    assert core.graphs.graph_count == 0


@pytest.mark.parametrize(
    "part, targets, problem",
    [
        ([node(3, 9)], [], "not in the graph"),
        ([node(1)], [], "already known"),
        ([node(3, 3)], [], "its own result"),
        ([node(3, 1)], [3], "targets come with its first part"),
        ([node(3, 1)], [], "not a task of the graph"),  # target 4 never came
    ],
)
def test_a_wrong_later_part_rejects_the_whole_graph(sorter, part, targets, problem):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1)], targets=[2, 4], more=True)), 0.5)
    effects = core.handle(FromPeer(CLIENT, graph(part, targets=targets)), 0.6)
    results = to_client(effects)
    assert sorted(results) == sorted({2, 4, *targets})
    assert all(r.status == m.TaskStatus.REJECTED and problem in r.error_text for r in results.values())
    assert messages(effects, WORKER, m.TaskCancel) == [m.TaskCancel([tid(1)])]
    assert core.graphs.graph_count == 0


def test_a_part_of_another_clients_graph_is_refused(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(OTHER_CLIENT, m.Hello(m.Version(1, 0), m.PeerRole.CLIENT, 1, "host")), 0.0)
    core.handle(FromPeer(CLIENT, graph([node(1)], targets=[3], more=True)), 0.5)
    effects = core.handle(FromPeer(OTHER_CLIENT, graph([node(2)], targets=[2])), 0.6)
    assert "a graph with that ID is running" in to_client(effects, OTHER_CLIENT)[2].error_text
    effects = core.handle(FromPeer(CLIENT, graph([node(3, 1)], targets=[])), 0.7)
    assert to_client(effects) == {} and core.graphs.node_count == 2  # the owner's graph goes on


def test_a_client_leaving_mid_graph_takes_its_open_graph(sorter):
    core = core_with(sorter)
    core.handle(FromPeer(CLIENT, graph([node(1), node(2)], targets=[2, 3], more=True)), 0.5)
    report(core, success(1))
    effects = core.handle(FromPeer(CLIENT, m.DisconnectRequest("bye")), 1.0)
    assert messages(effects, WORKER, m.TaskCancel) == [m.TaskCancel([tid(2)])]
    assert not core.graphs.active


def taken_whole(core: SchedulerCore, effects: List[Any]) -> List[Any]:
    """``effects``, and those of the `Continue` events the core asks for until it has taken the message whole (a
    large graph is taken a slice at a time, as the shell would go on: `message_slices.py`)."""
    more = effects
    while any(type(effect) is MoreToDo for effect in more):
        more = core.handle(Continue(), 0.5)
        effects = [*effects, *more]
    return effects


def _run(core: SchedulerCore, effects, limit: int = 10**7) -> Tuple[Dict[int, m.TaskResult], int]:
    """Play the worker until nothing is left: answer each assigned task, a batch at a time."""
    delivered: Dict[int, m.TaskResult] = {}
    deletes = 0
    pending: List[m.Task] = []
    for _ in range(limit):
        effects = taken_whole(core, effects)
        delivered.update(to_client(effects))
        deletes += len(deleted(effects))
        pending.extend(t for b in messages(effects, WORKER, m.TaskBatch) for t in b.tasks)
        if not pending:
            break
        batch, pending = pending[:50], pending[50:]
        results = [m.TaskResult(t.task_id, t.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT, b"o" + t.task_id)
                   if t.store_result else m.TaskResult(t.task_id, t.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE,
                                                       b"v") for t in batch]  # fmt: skip
        effects = report(core, *results)
    return delivered, deletes


def test_100000_node_graph(sorter):
    """A reduction tree over 50,000 leaves: 99,999 nodes in one GraphTask; nothing is left behind."""
    leaves = 50_000
    tasks = [node(i) for i in range(leaves)]
    level = list(range(leaves))
    next_id = leaves
    while len(level) > 1:
        upper = []
        for k in range(0, len(level) - 1, 2):
            tasks.append(node(next_id, level[k], level[k + 1]))
            upper.append(next_id)
            next_id += 1
        if len(level) % 2:
            upper.append(level[-1])
        level = upper
    assert len(tasks) >= 99_999
    core = core_with(sorter, capacity=10**6)
    effects = core.handle(FromPeer(CLIENT, graph(tasks, targets=[level[0]])), 0.5)
    delivered, deletes = _run(core, effects)
    assert list(delivered) == [level[0]]
    assert deletes == len(tasks) - 1  # every intermediate result freed
    assert core.task_count == 0 and not core.graphs.active


def test_auto_takes_the_python_index_without_graphblas_and_graphblas_is_refused_clearly(monkeypatch):
    import scaler.scheduler.graph_index as graph_index
    import scaler.scheduler.graph_tasks as graph_tasks
    from scaler.protocol.errors import ScalerError

    monkeypatch.setattr(graph_index, "graphblas_available", lambda: False)
    monkeypatch.setattr(graph_tasks, "graphblas_available", lambda: False)
    assert graph_tasks.GraphTasks(None).use_graphblas is False
    assert isinstance(graph_index.make_graph_index(2, [0], [1]), PythonGraphIndex)
    with pytest.raises(ScalerError, match="pip install"):
        graph_tasks.GraphTasks(True)


# ----------------------------------------------------------------------------- random runs keep every promise


@st.composite
def _graph_runs(draw):
    size = draw(st.integers(1, 12))
    edges = draw(st.sets(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)), max_size=size * 2))
    edges = {(a, b) for a, b in edges if a < b}
    targets = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=size, unique=True))
    actions = draw(st.lists(st.tuples(st.sampled_from("ssssfcdwp"), st.integers(0, 10**6)), max_size=60))
    inline_bytes = draw(st.sampled_from([0, 20, 10**6]))
    # sent in parts: where the nodes are cut (in index order, so every edge points to this part or an earlier
    # one); the first part names every target
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=3))) if size > 1 else []
    return size, edges, targets, actions, inline_bytes, cuts


@settings(max_examples=150, deadline=None)
@given(run=_graph_runs(), sorter=st.sampled_from(["python", "graphblas"] if graphblas_available() else ["python"]))
def test_random_runs_answer_every_target_once_and_leave_nothing_behind(run, sorter):
    """Results (stored or inline), failures, cancels, confirms, worker loss and the arrival of the graph's parts
    in random order: every target gets exactly one answer, every stored result is delivered or deleted, and no
    state is left."""
    size, edges, targets, actions, inline_bytes, cuts = run
    core = core_with(sorter, inline_bytes=inline_bytes)
    tasks = [node(i, *sorted(a for a, b in edges if b == i)) for i in range(size)]
    held: Dict[bytes, m.Task] = {}  # at the worker
    cancels: List[bytes] = []  # TaskCancel sent to the worker, not confirmed yet
    answers: Dict[bytes, List[str]] = {tid(t): [] for t in targets}
    stored: set = set()
    released: set = set()
    seen: Dict[Tuple[bytes, int], NodeState] = {}  # each node's last state

    def absorb(effects) -> None:
        for message in messages(effects, WORKER, m.TaskBatch):
            for task in message.tasks:
                held[task.task_id] = task
        for message in messages(effects, WORKER, m.TaskCancel):
            cancels.extend(message.task_ids)
        for result in to_client(effects).values():
            answers[result.task_id].append("result")
            if result.payload_kind == m.PayloadKind.OBJECT:
                released.add(result.payload)
        for message in messages(effects, CLIENT, m.TaskCancelConfirm):
            for task_id, flag in zip(message.task_ids, message.cancelled, strict=True):
                if flag:
                    answers[task_id].append("cancelled")
        released.update(deleted(effects))
        _check_node_lifecycles(core, seen)

    def answer(task: m.Task, kind: str, pick: int) -> None:
        del held[task.task_id]
        if kind == "f":
            absorb(report(core, m.TaskResult(task.task_id, task.attempt, m.TaskStatus.FAILED, m.PayloadKind.INLINE,
                                             b"exception")))  # fmt: skip
        elif task.store_result or pick % 3 == 0:  # stored: asked to, or too large to travel inline
            stored.add(oid(int.from_bytes(task.task_id, "big")))
            absorb(report(core, m.TaskResult(task.task_id, task.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT,
                                             oid(int.from_bytes(task.task_id, "big")))))  # fmt: skip
        else:
            absorb(report(core, m.TaskResult(task.task_id, task.attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE,
                                             b"v")))  # fmt: skip

    bounds = [0, *cuts, size]
    parts = [tasks[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    sent = 0

    def send_part() -> None:
        nonlocal sent
        more = sent < len(parts) - 1
        absorb(core.handle(FromPeer(CLIENT, graph(parts[sent], targets if sent == 0 else [], more=more)), 0.5))
        sent += 1

    send_part()
    for kind, pick in actions:
        if kind == "p" and sent < len(parts):
            send_part()
        elif kind in "sf" and held:
            answer(list(held.values())[pick % len(held)], kind, pick)
        elif kind == "c":
            absorb(core.handle(FromPeer(CLIENT, m.TaskCancel([tid(targets[pick % len(targets)])])), 1.0))
        elif kind == "d" and cancels:
            task_id = cancels.pop(pick % len(cancels))
            known = held.pop(task_id, None) is not None
            absorb(core.handle(FromPeer(WORKER, m.TaskCancelConfirm([task_id], [known])), 1.0))
        elif kind == "w" and held:  # the worker leaves and comes back: its tasks are queued again
            held.clear()
            cancels.clear()
            absorb(core.handle(FromPeer(WORKER, m.DisconnectRequest("bye")), 1.0))
            hello = m.Hello(m.Version(1, 0), m.PeerRole.WORKER, 2, "host", m.WorkerInfo(1, 1000))
            absorb(core.handle(FromPeer(WORKER, hello), 1.0))
    while sent < len(parts):
        send_part()
    for _ in range(10 * size + 10):  # then the worker does its work until nothing is left
        if cancels:
            task_id = cancels.pop()
            known = held.pop(task_id, None) is not None
            absorb(core.handle(FromPeer(WORKER, m.TaskCancelConfirm([task_id], [known])), 2.0))
        elif held:
            answer(next(iter(held.values())), "s", len(held))
        else:
            break
    assert all(len(found) == 1 for found in answers.values()), answers
    assert stored <= released  # every stored result was delivered to the client or deleted
    assert not core.graphs.active and core.graphs.inline_bytes == 0 and core.task_count == 0


def _check_node_lifecycles(core: SchedulerCore, seen: Dict[Tuple[bytes, int], NodeState]) -> None:
    """Each node is in one state of its lifecycle, a finished node stays so, and each graph's counts of
    finished, released and held nodes, and the inline bytes held, agree with its nodes' states."""
    inline = 0
    for graph in core.graphs._graphs.values():
        states = [NODE_STATES[state] for state in graph.state]
        count = Counter(states)
        assert graph.finished == sum(count[s] for s in FINISHED_STATES) + count[NodeState.HELD]
        assert graph.in_flight == count[NodeState.RELEASED]
        assert set(graph.results) == {i for i, state in enumerate(states) if state is NodeState.HELD}
        wanted = [states[i] for i, flag in enumerate(graph.wanted) if flag]
        assert all(state in (NodeState.PENDING, NodeState.RELEASED, NodeState.HELD) for state in wanted)
        inline += sum(len(r.payload) for r in graph.results.values() if r.payload_kind != m.PayloadKind.OBJECT)
        for i, state in enumerate(states):
            before = seen.get((graph.graph_id, i))
            if before in FINISHED_STATES:
                assert state is before, (i, before, state)
            elif before is NodeState.HELD:
                assert state in (NodeState.HELD, NodeState.DONE), (i, state)
            seen[(graph.graph_id, i)] = state
    assert core.graphs.inline_bytes == inline


def test_an_event_a_node_has_no_transition_for_raises_with_the_story_of_its_graph():
    core = core_with("python")
    core.handle(FromPeer(CLIENT, graph([node(1), node(2, 1)], targets=[2])), 0.5)
    graphs = core.graphs
    with pytest.raises(TransitionError, match=r"no transition from pending on succeeded; recent events: .* ready"):
        graphs._step(graphs._graphs[b"g1"], 1, NodeEvent.SUCCEEDED, GraphActions(), [])
