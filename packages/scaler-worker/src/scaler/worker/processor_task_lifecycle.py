"""The life of a task inside the processor, as its core keeps it (`processor_core`), as one table.

(The agent keeps its own model of the same task, from the other end of the Pipe: `processor_lifecycle`.)

A task read from the Pipe is QUEUED in the processor's FIFO. It STARTs when no task runs and it is the head
of the FIFO; until then a ``Drop`` takes it out (DROPPED: the agent hears ``Dropped``). A RUNNING task ends
ANSWERED (its result sent, or held for company) or WAITs inside the Scaler client (WAITING: switched out, the
processor runs other tasks); once its wait is over (WAIT_OVER: what it waited for is done, or its timeout
passed) it is RESUMABLE, and RESUMEs when no task runs and the FIFO is empty, in the order the waits ended. A
``Drop`` of a started task changes nothing (its result answers the agent). When the agent goes away
(AGENT_GONE) every task still here is ABANDONED: the processor ends. A processor that dies or is killed takes
its tasks with it; the agent's model says what became of them.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class HubState(enum.Enum):
    QUEUED = "queued"  # in the FIFO, not started
    RUNNING = "running"  # its greenlet runs (or is about to)
    WAITING = "waiting"  # switched out in a wait inside the Scaler client
    RESUMABLE = "resumable"  # its wait is over: it resumes when no task runs and the FIFO is empty
    ANSWERED = "answered"  # its result was sent, or is held for company
    DROPPED = "dropped"  # taken out of the FIFO unstarted: the agent hears Dropped
    ABANDONED = "abandoned"  # the agent went away: the processor ends

    __hash__ = object.__hash__


class HubEvent(enum.Enum):
    START = "start"
    DROP = "drop"  # the agent's Drop
    RESULT = "result"  # it returned or raised
    WAIT = "wait"  # it began a wait that is not over
    WAIT_OVER = "wait over"  # what it waits for may be done (and is), or its timeout passed
    RESUME = "resume"
    AGENT_GONE = "agent gone"

    __hash__ = object.__hash__


class HubAction(enum.Enum):
    LEAVE_FIFO = "leave fifo"
    SAY_DROPPED = "say dropped"  # Dropped, held with the results it comes among
    ANSWER = "answer"  # its result: held for company during a run of quick tasks, else sent with what is held
    SAY_WAITING = "say waiting"  # TaskWaiting(True), now; and the wait's timeout, if it has one
    QUEUE_RESUME = "queue resume"  # after the tasks whose wait ended before
    SAY_RESUMED = "say resumed"  # TaskWaiting(False), now, before it runs again

    __hash__ = object.__hash__


_S, _E, _A = HubState, HubEvent, HubAction


def _t(next_state: HubState, *actions: HubAction) -> Transition[HubState]:
    return Transition(next_state, actions)


PROCESSOR_HUB_LIFECYCLE: Lifecycle[HubState, HubEvent] = Lifecycle(
    "task in the processor",
    HubState,
    terminal=(_S.ANSWERED, _S.DROPPED, _S.ABANDONED),
    table={
        (_S.QUEUED, _E.START): _t(_S.RUNNING),
        (_S.QUEUED, _E.DROP): _t(_S.DROPPED, _A.LEAVE_FIFO, _A.SAY_DROPPED),
        (_S.QUEUED, _E.AGENT_GONE): _t(_S.ABANDONED),
        (_S.RUNNING, _E.RESULT): _t(_S.ANSWERED, _A.ANSWER),
        (_S.RUNNING, _E.WAIT): _t(_S.WAITING, _A.SAY_WAITING),
        (_S.RUNNING, _E.DROP): _t(_S.RUNNING),  # it started: its result answers the agent
        (_S.RUNNING, _E.WAIT_OVER): _t(_S.RUNNING),  # a wake of a wait that ended
        (_S.RUNNING, _E.AGENT_GONE): _t(_S.ABANDONED),
        (_S.WAITING, _E.WAIT_OVER): _t(_S.RESUMABLE, _A.QUEUE_RESUME),
        (_S.WAITING, _E.DROP): _t(_S.WAITING),
        (_S.WAITING, _E.AGENT_GONE): _t(_S.ABANDONED),
        (_S.RESUMABLE, _E.RESUME): _t(_S.RUNNING, _A.SAY_RESUMED),
        (_S.RESUMABLE, _E.WAIT_OVER): _t(_S.RESUMABLE),  # woken again, or its timeout passed meanwhile
        (_S.RESUMABLE, _E.DROP): _t(_S.RESUMABLE),
        (_S.RESUMABLE, _E.AGENT_GONE): _t(_S.ABANDONED),
    },
    always_possible=(_E.DROP, _E.AGENT_GONE),
)
del _S, _E, _A
