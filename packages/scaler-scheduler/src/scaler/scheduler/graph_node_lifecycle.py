"""The life of one node of a task graph in the scheduler, as one table: ``(state, event) -> (next state, actions)``.

`NODE_LIFECYCLE` is a `scaler.protocol.lifecycle.Lifecycle`; `graph_tasks.GraphTasks._step` looks up every
event a node receives in it and carries out the actions of the answer, in order. A graph keeps the state
of each node in one ``bytearray``, as the state's position in `NODE_STATES`.

The graph index reports some events for every node it reaches, finished or not (`REPORTED_TO_FINISHED`: a
node whose inputs all finished, a node whose dependants all finished, the nodes below a failure) and some
are sent to every node of a graph (its targets all cancelled, a dependency cycle): a finished node ignores
them. Any other pair missing from the table is a bug and raises `TransitionError` with the recent events of
the node's graph.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class NodeState(enum.Enum):
    PENDING = "pending"  # waiting for nodes it needs
    RELEASED = "released"  # handed to the scheduler's task queue: queued or running
    HELD = "held"  # succeeded; its result is held for the nodes that still need it
    DONE = "done"  # succeeded; its result was delivered to the client or dropped
    FAILED = "failed"  # failed, or a node it needs failed, or it is part of a dependency cycle
    CANCELLED = "cancelled"  # nothing needed it any more

    __hash__ = object.__hash__


NODE_STATES = tuple(NodeState)  # a node's state is kept as its position here (PENDING: 0)


class NodeEvent(enum.Enum):
    READY = "ready"  # every node it needs finished
    SUCCEEDED = "succeeded"  # its result came back, successful
    FAILED = "failed"  # its result came back, failed
    UPSTREAM_FAILED = "upstream_failed"  # a node it needs, directly or not, failed
    FREED = "freed"  # no unfinished node needs it, and the client does not wait for it
    FREED_WANTED = "freed_wanted"  # no unfinished node needs it, but the client waits for it
    GRAPH_CANCELLED = "graph_cancelled"  # the client waits for no target of the graph any more
    STUCK = "stuck"  # nothing runs while it still waits: it is part of, or depends on, a cycle

    __hash__ = object.__hash__


class NodeAction(enum.Enum):
    RELEASE = "release"  # its task arguments rewritten to the results it needs; handed to the scheduler
    RETURNED = "returned"  # the scheduler is done with it
    HOLD = "hold"  # keep its result for the nodes that need it
    DELIVER_HELD = "deliver_held"  # its held result to the client
    DROP_HELD = "drop_held"  # nobody reads its held result: delete its object
    DELIVER_FAILURE = "deliver_failure"  # the failure to the client, if it waits for this node
    FAIL_DOWNSTREAM = "fail_downstream"  # every node below it fails with the same failure
    REJECT_CYCLE = "reject_cycle"  # tell the client, if it waits for this node, that it is in a cycle
    CANCEL_IN_SCHEDULER = "cancel_in_scheduler"  # cancel its task (the confirm is taken back here)
    FINISH = "finish"  # it ended: the graph index releases what became ready and frees what is not needed

    __hash__ = object.__hash__


FINISHED_STATES = frozenset({NodeState.DONE, NodeState.FAILED, NodeState.CANCELLED})
REPORTED_TO_FINISHED = frozenset(
    {
        NodeEvent.READY, NodeEvent.UPSTREAM_FAILED, NodeEvent.FREED, NodeEvent.FREED_WANTED,
        NodeEvent.GRAPH_CANCELLED, NodeEvent.STUCK,
    }
)  # fmt: skip

S, E, A, T = NodeState, NodeEvent, NodeAction, Transition
NODE_LIFECYCLE: Lifecycle[NodeState, NodeEvent] = Lifecycle(
    "graph node",
    states=NodeState,
    terminal=FINISHED_STATES,
    always_possible=(E.FREED, E.FREED_WANTED, E.GRAPH_CANCELLED, E.STUCK),
    table={
        (S.PENDING, E.READY): T(S.RELEASED, (A.RELEASE,)),
        (S.PENDING, E.UPSTREAM_FAILED): T(S.FAILED, (A.DELIVER_FAILURE, A.FINISH)),
        (S.PENDING, E.FREED): T(S.CANCELLED, (A.FINISH,)),
        (S.PENDING, E.FREED_WANTED): T(S.PENDING),  # the client still wants it: it runs when it can
        (S.PENDING, E.GRAPH_CANCELLED): T(S.CANCELLED, (A.FINISH,)),
        (S.PENDING, E.STUCK): T(S.FAILED, (A.REJECT_CYCLE, A.FINISH)),
        (S.RELEASED, E.SUCCEEDED): T(S.HELD, (A.RETURNED, A.HOLD, A.FINISH)),
        (S.RELEASED, E.FAILED): T(S.FAILED, (A.RETURNED, A.DELIVER_FAILURE, A.FINISH, A.FAIL_DOWNSTREAM)),
        (S.RELEASED, E.FREED): T(S.CANCELLED, (A.CANCEL_IN_SCHEDULER, A.FINISH)),
        (S.RELEASED, E.FREED_WANTED): T(S.RELEASED),
        (S.RELEASED, E.GRAPH_CANCELLED): T(S.CANCELLED, (A.CANCEL_IN_SCHEDULER, A.FINISH)),
        (S.RELEASED, E.STUCK): T(S.RELEASED),  # never sent: a graph is stuck only when nothing is released
        (S.HELD, E.FREED): T(S.DONE, (A.DROP_HELD,)),
        (S.HELD, E.FREED_WANTED): T(S.DONE, (A.DELIVER_HELD,)),
        (S.HELD, E.GRAPH_CANCELLED): T(S.HELD),  # freed (and dropped) once the nodes that need it end
        (S.HELD, E.STUCK): T(S.HELD),
    },
)
del S, E, A, T
