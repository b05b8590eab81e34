"""Graph tasks in the scheduler, without I/O.

A client sends a graph as one `GraphTask`, or in parts (``more`` on all but
the last): tasks that name each other's results through ``Argument{kind task}``,
and the targets it wants. The shell
reads it as it reads a `TaskBatch` (`routed.decode_routed`): each node a
`routed.RoutedTask` that names the nodes it needs (``dependencies``) and is
copied on from the received message when it is sent. `GraphTasks` stands
between that client and the scheduler's ordinary task machinery:

- a node is *released* (handed to the scheduler as if the client had submitted
  it) once every node it needs has succeeded; its task arguments are rewritten
  to the results of those nodes: ``kind object`` naming the result object (or
  ``kind inline`` with the bytes, if a worker sent the result inline);
- where the result of a node that other nodes need lives: a small result
  (at most the worker's inline threshold, 64 KiB by default) comes back inline
  and is held here, and its dependants get it inline, as long as the results
  held here stay under ``inline_budget_bytes`` in total; beyond that budget a
  node runs with ``Task.storeResult``, so the worker leaves its result in object
  storage (owned by the client) whatever its size. Larger results are in
  storage anyway. Each storage round trip costs far more than the few bytes of
  a typical small result, so fine-grained graphs run several times faster so;
- the scheduler hands every result of a released node back here instead of to
  the client (`on_results`); only targets reach the client. A held result is
  dropped, and a result object deleted from storage, as soon as no unfinished
  node needs it (``deletes``); a target that other nodes still need is
  delivered once they are done with it (the client then owns its object, if
  any, and deletes it after reading it);
- a failed node fails exactly the nodes downstream of it: each of them that is
  a target gets the failing node's status, payload and error text; what no
  wanted node needs any more is cancelled;
- the client cancels a graph by cancelling its targets (`cancel`): each target
  is confirmed at once; nodes that no wanted target needs any more are
  cancelled (released ones through the scheduler, whose confirms are swallowed
  here). When no target of a graph is wanted any more, every node still
  pending is cancelled;
- a graph in which nothing runs while nodes still wait has a dependency cycle:
  those nodes are rejected;
- a client that leaves takes its graphs with it (`forget_client`); its
  objects are cleared by the scheduler as usual;
- a graph sent again (``GraphTask.again``, 1.8: its client resumed after losing its connection) replaces what
  the scheduler holds of it: the nodes it released run on (as tasks they are the client's, and their results
  come to the new graph), and the results it held are kept (`kept_results.py`) for the nodes of the new graph,
  which get them when released instead of running again; so is a result that comes for a node not released
  yet;
- a graph sent in parts is *open* until its last part: the first part names
  every target (those of later parts are *awaited*); a part's nodes join the
  graph (`_append`) and run as soon as their inputs succeeded, but nothing is
  freed (the graph index counts one more dependant for every node), no cycle
  or cancel check runs, and failures are kept for the nodes later parts bring,
  until the last part closes it (`_close`). A wrong part, or a target no part
  brought, rejects the whole graph.

Entry points return `GraphActions` for the scheduler to carry out. What
happens to one node is decided by the table of `graph_node_lifecycle.py`;
the topological bookkeeping is a `graph_index.GraphIndex` (GraphBLAS when
installed, pure Python otherwise).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Container, Dict, List, Optional, Sequence, Set, Tuple

from scaler.protocol import messages as m
from scaler.protocol.errors import ScalerError
from scaler.protocol.ids import show
from scaler.scheduler.graph_index import graphblas_available, make_graph_index
from scaler.scheduler.graph_node_lifecycle import (
    FINISHED_STATES,
    NODE_LIFECYCLE,
    NODE_STATES,
    REPORTED_TO_FINISHED,
    NodeAction,
    NodeEvent,
    NodeState,
)
from scaler.scheduler.graph_record import (
    Graph,
    GraphActions,
    HeldPayload,
    drop_result,
    graph_problem,
    rejected_result,
    unwant,
    whole_result,
)

logger = logging.getLogger(__name__)

_FAILURES = (m.TaskStatus.FAILED, m.TaskStatus.WORKER_DIED, m.TaskStatus.REJECTED)
CYCLE_REASON = "the task is part of, or depends on, a dependency cycle of its graph"
DEFAULT_INLINE_BUDGET = 256 * 1024 * 1024  # bytes of small results the scheduler holds for dependants
_FAILED = NODE_STATES.index(NodeState.FAILED)
_PENDING = NODE_STATES.index(NodeState.PENDING)
_SUCCESS, _OBJECT = m.TaskStatus.SUCCESS, m.PayloadKind.OBJECT  # read once: an enum member costs a lookup
_OBJECT_ARGUMENT, _INLINE_ARGUMENT = m.ArgumentKind.OBJECT, m.ArgumentKind.INLINE


# what a node's actions are carried out with: its graph, its position, the scheduler's to-do list, the nodes
# that finished in this round (for the graph index), and the result that came with the event, if any
_Action = Callable[[Graph, int, GraphActions, List[int], Any], None]


class GraphTasks:
    def __init__(self, use_graphblas: Optional[bool] = None, inline_budget_bytes: int = DEFAULT_INLINE_BUDGET) -> None:
        if use_graphblas and not graphblas_available():
            raise ScalerError(
                "the GraphBLAS graph sorter needs python-graphblas: pip install 'scaler-scheduler[graphblas]'"
            )
        self.use_graphblas = graphblas_available() if use_graphblas is None else use_graphblas
        if self.use_graphblas:
            import graphblas  # noqa: F401  # now, at start-up: importing it takes seconds, not to stall a graph
        self._graphs: Dict[bytes, Graph] = {}  # graph ID -> graph
        self._nodes: Dict[bytes, Graph] = {}  # task ID of every node of a live graph -> its graph
        self._awaited: Dict[bytes, Graph] = {}  # task ID of a target of an open graph, not sent yet -> its graph
        self._cancelled: Dict[bytes, Set[bytes]] = {}  # client -> released nodes cancelled here, confirm pending
        self._inline_budget = inline_budget_bytes
        self._inline_bytes = 0  # payload bytes of the inline results held for dependants, all graphs together
        carry_out: Dict[NodeAction, _Action] = {
            NodeAction.RELEASE: self._release,
            NodeAction.RETURNED: self._returned,
            NodeAction.HOLD: self._hold,
            NodeAction.DELIVER_HELD: self._deliver_held,
            NodeAction.DROP_HELD: self._drop_held,
            NodeAction.DELIVER_FAILURE: self._deliver_failure,
            NodeAction.FAIL_DOWNSTREAM: self._fail_downstream,
            NodeAction.REJECT_CYCLE: self._reject_cycle,
            NodeAction.CANCEL_IN_SCHEDULER: self._cancel_in_scheduler,
            NodeAction.FINISH: self._finished,
        }
        # the table with the actions bound to this object, keyed by the state's position in NODE_STATES (as the
        # bytearray holds it); finished nodes ignore the events reported to every node
        code = {state: position for position, state in enumerate(NODE_STATES)}
        self._plans: Dict[Tuple[int, NodeEvent], Tuple[int, Tuple[_Action, ...]]] = {
            (code[state], event): (code[t.next_state], tuple(carry_out[a] for a in t.actions))
            for (state, event), t in NODE_LIFECYCLE.table.items()
        }
        for state in FINISHED_STATES:
            for event in REPORTED_TO_FINISHED:
                self._plans[(code[state], event)] = (code[state], ())

    # ----------------------------------------------------------------- observation

    @property
    def active(self) -> bool:
        return bool(self._graphs) or bool(self._cancelled)

    @property
    def graph_count(self) -> int:
        return len(self._graphs)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def inline_bytes(self) -> int:
        return self._inline_bytes

    @property
    def nodes(self) -> Container[bytes]:
        """The task IDs of the nodes of live graphs (kept up to date: one object for the scheduler's lifetime)."""
        return self._nodes.keys()

    def is_open(self, graph_id: bytes, client_id: bytes) -> bool:
        """Whether the client's graph ``graph_id`` runs and waits for more parts."""
        graph = self._graphs.get(graph_id)
        return graph is not None and graph.open and graph.client_id == client_id

    # ----------------------------------------------------------------- entry points

    def submit(
        self, client_id: bytes, message: m.GraphTask, known: Callable[[bytes], bool], problem: Optional[str] = None
    ) -> GraphActions:
        """A new graph, or the next part of a graph sent in parts (``message.more`` on every part but the last);
        ``known(task_id)`` tells whether the scheduler already holds a task with that ID; ``problem``: what is
        wrong with this part, found before (a node that cannot be read)."""
        actions = GraphActions()
        graph = self._graphs.get(message.graph_id)
        if graph is not None and message.again and graph.client_id == client_id:
            actions.kept.extend(self._forget_for_resend(graph))
            graph = None
        if graph is not None and not (graph.open and graph.client_id == client_id):
            self._reject(client_id, message, "a graph with that ID is running", {}, actions)
            return actions
        tasks: List[Any] = message.tasks  # routed.RoutedTask
        base = len(graph.task_ids) if graph is not None else 0
        positions = {task.task_id: base + i for i, task in enumerate(tasks)}
        earlier = graph.positions if graph is not None else None
        problem = problem or graph_problem(message, positions, earlier, known, self._nodes.__contains__)
        if problem is not None:
            self._reject(client_id, message, problem, earlier or {}, actions)
            if graph is not None:  # a later part: the whole graph is rejected
                self._reject_graph(graph, problem, actions)
                self._settle(graph, actions)
            return self._tidy(client_id, actions)
        if graph is None:
            if not message.targets and not message.more:
                return actions  # nothing is wanted: nothing runs
            index = make_graph_index(0, (), (), self.use_graphblas, open=message.more)
            graph = self._graphs[message.graph_id] = Graph(message.graph_id, client_id, index, message.more)
        self._append(graph, message, positions, actions, first=not base)
        if not message.more:
            self._close(graph, actions)
        self._settle(graph, actions)
        return self._tidy(client_id, actions)

    def on_results(self, client_id: bytes, results: Sequence[m.TaskResult]) -> Tuple[List[m.TaskResult], GraphActions]:
        """Results the scheduler was about to send to ``client_id``: those of graph nodes are taken here.

        Returns the results to send on unchanged, and what to do.
        """
        passed: List[m.TaskResult] = []
        actions = GraphActions()
        touched: Dict[bytes, Tuple[Graph, List[int]]] = {}  # graph ID -> the graph, and its nodes that ended
        cancelled = self._cancelled.get(client_id)
        node_graph, step = self._nodes.get, self._step
        for result in results:
            task_id = result.task_id
            if cancelled is not None and task_id in cancelled:
                drop_result(result, actions)  # a node cancelled here whose result crossed the cancel
                continue
            graph = node_graph(task_id)
            if graph is None or graph.client_id != client_id:
                passed.append(result)
                continue
            i = graph.positions[task_id]
            if graph.state[i] == _PENDING:  # a node of a graph sent again, released by the one it replaced
                actions.kept.append(whole_result(result))
                continue
            entry = touched.get(graph.graph_id)
            if entry is None:
                entry = touched[graph.graph_id] = (graph, [])
            finished = entry[1]
            if result.status is _SUCCESS:
                step(graph, i, NodeEvent.SUCCEEDED, actions, finished, result)
                if graph.index.unfinished_dependants(i) == 0:
                    step(graph, i, NodeEvent.FREED_WANTED if graph.wanted[i] else NodeEvent.FREED, actions, [])
            else:
                if result.status not in _FAILURES:
                    logger.warning(f"Scheduler: graph node {show(result.task_id)} ended with {result.status.name}")
                self._step(graph, i, NodeEvent.FAILED, actions, finished, result)
        for graph, finished in touched.values():  # the index hears of the batch's ends at once
            self._finish(graph, finished, actions)
            self._settle(graph, actions)
        return passed, self._tidy(client_id, actions)

    def on_confirms(self, client_id: bytes, task_ids: Sequence[bytes], flags: Sequence[bool]):
        """Cancel confirms the scheduler was about to send: those of nodes cancelled here are swallowed."""
        cancelled = self._cancelled.get(client_id)
        if not cancelled:
            return list(task_ids), list(flags)
        kept_ids: List[bytes] = []
        kept_flags: List[bool] = []
        for task_id, flag in zip(task_ids, flags, strict=False):
            if task_id in cancelled:
                cancelled.discard(task_id)
            else:
                kept_ids.append(task_id)
                kept_flags.append(flag)
        if not cancelled:
            del self._cancelled[client_id]
        return kept_ids, kept_flags

    def cancel(self, client_id: bytes, task_ids: Sequence[bytes]) -> Tuple[List[bytes], GraphActions]:
        """The client cancels tasks; returns the IDs that are not graph nodes (for the scheduler) and actions.

        A wanted target is confirmed cancelled at once (no result will come for
        it); any other graph node, or a target already delivered, is refused.
        """
        others: List[bytes] = []
        actions = GraphActions()
        touched: Dict[bytes, Graph] = {}
        for task_id in task_ids:
            graph = self._nodes.get(task_id)
            if graph is None and task_id in self._awaited:  # a target of an open graph, not sent yet
                graph = self._awaited[task_id]
                if graph.client_id == client_id:
                    del self._awaited[task_id]
                    graph.awaited.discard(task_id)
                    graph.wanted_count -= 1
                    actions.confirm_ids.append(task_id)
                    actions.confirm_flags.append(True)
                    continue
            if graph is None or graph.client_id != client_id:
                others.append(task_id)
                continue
            i = graph.positions[task_id]
            actions.confirm_ids.append(task_id)
            if not graph.wanted[i]:
                actions.confirm_flags.append(False)
                continue
            actions.confirm_flags.append(True)
            touched[graph.graph_id] = graph
            unwant(graph, i)
            if graph.index.unfinished_dependants(i) == 0:
                finished: List[int] = []
                self._step(graph, i, NodeEvent.FREED, actions, finished)
                self._finish(graph, finished, actions)
        for graph in touched.values():
            self._settle(graph, actions)
        return others, self._tidy(client_id, actions)

    def forget_client(self, client_id: bytes) -> None:
        """The client left or cleared: drop its graphs (the scheduler cancels its tasks and clears its objects)."""
        for graph in [g for g in self._graphs.values() if g.client_id == client_id]:
            self._forget(graph)
        self._cancelled.pop(client_id, None)

    # ----------------------------------------------------------------- decisions

    def _reject(
        self, client_id: bytes, message: m.GraphTask, problem: str, earlier: Dict[bytes, int], actions: GraphActions
    ) -> None:
        """A graph, or a part of one, that cannot run: each target it names is rejected (but nodes of the graph's
        earlier parts, answered by `_reject_graph`)."""
        _log_rejected(message.graph_id, client_id, problem)
        for target in dict.fromkeys(message.targets):
            if target not in earlier:
                actions.results.append(rejected_result(target, f"graph rejected: {problem}"))

    def _reject_graph(self, graph: Graph, problem: str, actions: GraphActions) -> None:
        """A later part was wrong: the targets wanted so far are rejected, and the graph closes (then its
        nodes are cancelled, as for a graph nobody waits for)."""
        for i in range(len(graph.task_ids)):
            if graph.wanted[i]:
                unwant(graph, i)
                actions.results.append(rejected_result(graph.task_ids[i], f"graph rejected: {problem}"))
        for target in graph.awaited:
            del self._awaited[target]
            graph.wanted_count -= 1
            actions.results.append(rejected_result(target, f"graph rejected: {problem}"))
        graph.awaited.clear()
        self._close(graph, actions)

    def _append(
        self, graph: Graph, message: m.GraphTask, positions: Dict[bytes, int], actions: GraphActions, first: bool
    ) -> None:
        """A checked part's nodes join the graph (the first part names the targets); those whose inputs all
        succeeded already are released, those below a failure fail with it."""
        tasks: List[Any] = message.tasks  # routed.RoutedTask
        base, count = len(graph.task_ids), len(tasks)
        graph.task_ids.extend(task.task_id for task in tasks)
        graph.tasks.extend(tasks)
        if base:
            graph.positions.update(positions)
        else:
            graph.positions = positions
        for flags in (graph.state, graph.target, graph.wanted):
            flags.extend(bytes(count))
        nodes = self._nodes
        for task_id in positions:
            nodes[task_id] = graph
        every = graph.positions
        state, failures = graph.state, graph.failures
        edges = set()  # (a node, a node that needs it): an argument named twice is one edge
        failed_inputs: Dict[int, Any] = {}  # a new node -> the failure of an earlier part's node it needs
        for i, task in enumerate(tasks, base):
            for _, needed in task.dependencies:
                j = every[needed]
                edges.add((j, i))
                if j < base and state[j] == _FAILED:
                    failed_inputs.setdefault(i, failures[j])
        ready = graph.index.extend(count, [a for a, _ in edges], [b for _, b in edges])
        if first:
            for target in dict.fromkeys(message.targets):
                graph.wanted_count += 1
                if target in positions:
                    graph.target[positions[target]] = graph.wanted[positions[target]] = 1
                else:  # a later part brings it
                    graph.awaited.add(target)
                    self._awaited[target] = graph
        elif graph.awaited:
            for target in [target for target in graph.awaited if target in positions]:
                graph.awaited.discard(target)
                del self._awaited[target]
                graph.target[positions[target]] = graph.wanted[positions[target]] = 1
        finished: List[int] = []
        for i, failure in failed_inputs.items():
            for j in (i, *graph.index.descendants([i])):
                self._step(graph, j, NodeEvent.UPSTREAM_FAILED, actions, finished, failure)
        for i in ready:
            self._step(graph, i, NodeEvent.READY, actions, finished)
        self._finish(graph, finished, actions)

    def _close(self, graph: Graph, actions: GraphActions) -> None:
        """The graph's last part arrived (or it was rejected): what no unfinished node needs is freed."""
        if not graph.open:
            return
        if graph.awaited:
            problem = f"target {show(next(iter(graph.awaited)))} is not a task of the graph"
            _log_rejected(graph.graph_id, graph.client_id, problem)
            self._reject_graph(graph, problem, actions)  # closes it
            return
        graph.open = False
        graph.failures.clear()
        finished: List[int] = []
        for i in graph.index.close():
            self._step(graph, i, NodeEvent.FREED_WANTED if graph.wanted[i] else NodeEvent.FREED, actions, finished)
        self._finish(graph, finished, actions)

    def _tidy(self, client_id: bytes, actions: GraphActions) -> GraphActions:
        """A node released and cancelled in the same round is neither: the scheduler never hears of it."""
        if actions.cancel and actions.release:
            cancelled = set(actions.cancel)
            both = {task.task_id for task in actions.release if task.task_id in cancelled}
            if both:
                actions.release = [task for task in actions.release if task.task_id not in both]
                actions.cancel = [task_id for task_id in actions.cancel if task_id not in both]
                pending = self._cancelled[client_id]
                pending -= both
                if not pending:
                    del self._cancelled[client_id]
        return actions

    def _step(
        self,
        graph: Graph,
        i: int,
        event: NodeEvent,
        actions: GraphActions,
        finished: List[int],
        result: Any = None,
    ) -> None:
        """Node ``i`` receives ``event``: its next state and the actions, from the table."""
        plan = self._plans.get((graph.state[i], event))
        if plan is None:
            # the recent events of the graph, each named with its node (the table's error lists them as given)
            history: Any = [f"{show(graph.task_ids[j])} {e.value}" for j, e in graph.history]
            subject = f"{show(graph.task_ids[i])} of graph {show(graph.graph_id)}"
            NODE_LIFECYCLE.step(NODE_STATES[graph.state[i]], event, subject, history)  # raises
            return
        graph.state[i] = plan[0]
        graph.history.append((i, event))
        for action in plan[1]:
            action(graph, i, actions, finished, result)

    def _finish(self, graph: Graph, nodes: List[int], actions: GraphActions) -> None:
        """Nodes ended: tell the index; release what became ready, free what no unfinished node needs."""
        step = self._step
        wanted = graph.wanted
        while nodes:
            graph.finished += len(nodes)
            ready, freed = graph.index.finish(nodes)
            nodes = []
            for j in ready:
                step(graph, j, NodeEvent.READY, actions, nodes)
            for j in freed:
                step(graph, j, NodeEvent.FREED_WANTED if wanted[j] else NodeEvent.FREED, actions, nodes)

    def _settle(self, graph: Graph, actions: GraphActions) -> None:
        """After a round of decisions: cancel a graph nobody waits for, reject a stuck one, forget a done one."""
        if graph.open:
            return  # more parts come: they may need any result, and bring inputs to waiting nodes
        size = len(graph.task_ids)
        if graph.wanted_count == 0 and graph.finished < size:
            self._to_every_node(graph, NodeEvent.GRAPH_CANCELLED, actions)
        if graph.in_flight == 0 and graph.finished < size:
            stuck = self._to_every_node(graph, NodeEvent.STUCK, actions)
            logger.warning(
                f"Scheduler: graph {show(graph.graph_id)} of client {show(graph.client_id)} has a dependency cycle: "
                f"rejected {stuck} task(s)"
            )
        if graph.done:
            self._forget(graph)

    def _to_every_node(self, graph: Graph, event: NodeEvent, actions: GraphActions) -> int:
        """``event`` to each node of ``graph``; returns how many nodes it ended."""
        finished: List[int] = []
        for i in range(len(graph.task_ids)):
            self._step(graph, i, event, actions, finished)
        ended = len(finished)
        self._finish(graph, finished, actions)
        return ended

    def _forget_for_resend(self, graph: Graph) -> List[m.TaskResult]:
        """The graph is sent again: forgotten here; the successes it held, as results, for the one sent again."""
        held = [
            m.TaskResult(graph.task_ids[i], 0, m.TaskStatus.SUCCESS, result.payload_kind, result.payload)
            for i, result in graph.results.items()
        ]
        logger.info(
            f"Scheduler: client {show(graph.client_id)} sent graph {show(graph.graph_id)} again: "
            f"{len(held)} result(s) held for it are kept for the nodes sent again"
        )
        self._forget(graph)
        return held

    def _forget(self, graph: Graph) -> None:
        for i in list(graph.results):
            self._unhold(graph, i)
        del self._graphs[graph.graph_id]
        for target in graph.awaited:
            del self._awaited[target]
        nodes = self._nodes
        for task_id in graph.task_ids:
            nodes.pop(task_id, None)

    def _unhold(self, graph: Graph, i: int) -> Any:
        result = graph.results.pop(i)
        if result.payload_kind != m.PayloadKind.OBJECT:
            self._inline_bytes -= len(result.payload)
        return result

    # ----------------------------------------------------------------- actions (NodeAction)

    def _release(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        task = graph.tasks[i]
        assert task is not None
        graph.tasks[i] = None
        results, positions = graph.results, graph.positions
        for position, needed_id in task.dependencies:
            needed = results[positions[needed_id]]
            if needed.payload_kind is _OBJECT:
                task.set_argument(position, _OBJECT_ARGUMENT, needed.payload)
            else:  # an inline result (held here while the budget lasts)
                task.set_argument(position, _INLINE_ARGUMENT, needed.payload)
        # a result others need stays small and inline (held here) while the budget lasts, else goes to storage
        if self._inline_bytes >= self._inline_budget and graph.index.unfinished_dependants(i) > 0:
            task.store_result = True
        graph.in_flight += 1
        actions.release.append(task)

    def _returned(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        graph.in_flight -= 1

    def _hold(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        """A success kept for the nodes that need it: whole for a target (the client gets it), else its payload
        alone; copied out of the message it came in (`routed.RoutedResult`), which is not kept."""
        if graph.wanted[i]:
            held = whole_result(result)
        else:
            read = getattr(result, "kind_and_payload", None)  # a routed.RoutedResult: both fields in one read
            held = HeldPayload(*read()) if read is not None else HeldPayload(result.payload_kind, result.payload)
        graph.results[i] = held
        if held.payload_kind is not _OBJECT:
            self._inline_bytes += len(held.payload)

    def _deliver_held(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        unwant(graph, i)
        actions.results.append(self._unhold(graph, i))

    def _drop_held(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        drop_result(self._unhold(graph, i), actions)

    def _deliver_failure(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], failure: Any) -> None:
        """The failure of this node, or of the node above it that failed, to the client if it waits for it."""
        if graph.open:  # for the nodes later parts bring that need it
            graph.failures[i] = whole_result(failure)
        if not graph.wanted[i]:
            return
        unwant(graph, i)
        task_id = graph.task_ids[i]
        profiling = failure.profiling if failure.task_id == task_id else m.Profiling()
        actions.results.append(
            m.TaskResult(
                task_id, failure.attempt, failure.status, failure.payload_kind, failure.payload, failure.error_text,
                profiling,
            )
        )  # fmt: skip

    def _fail_downstream(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], failure: Any) -> None:
        step = self._step
        for j in graph.index.descendants([i]):
            step(graph, j, NodeEvent.UPSTREAM_FAILED, actions, finished, failure)

    def _reject_cycle(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        if graph.wanted[i]:
            unwant(graph, i)
            actions.results.append(rejected_result(graph.task_ids[i], CYCLE_REASON))

    def _cancel_in_scheduler(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any):
        graph.in_flight -= 1
        task_id = graph.task_ids[i]
        actions.cancel.append(task_id)
        self._cancelled.setdefault(graph.client_id, set()).add(task_id)

    def _finished(self, graph: Graph, i: int, actions: GraphActions, finished: List[int], result: Any) -> None:
        graph.tasks[i] = None
        finished.append(i)


def _log_rejected(graph_id: bytes, client_id: bytes, problem: str) -> None:
    logger.warning(f"Scheduler: rejected graph {show(graph_id)} of client {show(client_id)}: {problem}")
