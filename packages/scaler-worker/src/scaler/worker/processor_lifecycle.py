"""The life of a task in the local processor, as the agent models it (`processor_runner`), as one table.

A task the processor was given is SENT (into its FIFO, ahead of time) or RUNNING at once. A task sent ahead
STARTs when the processor is free and it is the head of the FIFO; until then a ``Drop`` may take it back
(RECALLING: it returns to the queue; DROPPING: for a cancel), which the processor answers ``Dropped``, or not
at all if it had started. The processor reads its Pipe just before it says that a task ended or waits
(`processor_protocol`), so a Drop written while that task ran is answered before the agent takes the next
one for started; a Drop written as the processor took the next task, or one that reaches it after that
notice, may come after the START (STARTED_DROPPING: taken for started, a ``Dropped`` may still say it never
did).

A cancel of a task sent ahead is confirmed at once (the core hears it `returned`): DROPPING, it is the
core's no more, and nothing more is reported of it. Should it START all the same, it is STOPPING: the
processor is stopped once the message that said so is read, and its result, if that message brought it
too, is dropped. A started task may WAIT inside the Scaler client (its greenlet switched out: it holds no
slot) and RESUME. It ends FINISHED (its result), DIED (the processor died or was stopped), RETURNED (it
never started) or CANCELLED (its cancel was confirmed). Every non-terminal state has a way out on CANCEL and
STOP.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class SentState(enum.Enum):
    SENT = "sent"  # in the processor's FIFO, not started
    RECALLING = "recalling"  # sent, and a Drop is on its way to take it back to the queue
    DROPPING = "dropping"  # sent, cancelled (confirmed), and a Drop is on its way
    RUNNING = "running"  # started, running (not waiting)
    STARTED_DROPPING = "started, dropping"  # taken for started, but a Dropped may still say it never did
    STOPPING = "stopping"  # started though its cancel was confirmed: the processor is stopped
    WAITING = "waiting"  # started, waiting inside the Scaler client: the processor runs other tasks meanwhile
    FINISHED = "finished"
    DIED = "died"
    RETURNED = "returned"
    CANCELLED = "cancelled"  # its cancel was confirmed: the core heard the last of it

    __hash__ = object.__hash__


class SentEvent(enum.Enum):
    START = "start"  # the task before it in the FIFO ended or waits: the processor started it
    RECALL = "recall"  # take it back (a higher-priority task came)
    CANCEL = "cancel"
    DROPPED = "dropped"  # the processor took it out of its FIFO unstarted
    RESULT = "result"
    WAIT = "wait"
    RESUME = "resume"
    STOP = "stop"  # the processor is stopped or died

    __hash__ = object.__hash__


class SentAction(enum.Enum):
    SEND_DROP = "send drop"
    REPORT_RETURNED = "report returned"  # the core hears it never ran (back to the queue, or cancelled)
    LEAVE_INBOX = "leave inbox"  # it is no longer in the processor's FIFO
    LEAVE_RUNNING = "leave running"  # it was taken for started; the next one in the FIFO is
    STOP_PROCESSOR = "stop processor"  # once the event is handled, if the task is still there

    __hash__ = object.__hash__


_S, _E, _A = SentState, SentEvent, SentAction


def _t(next_state: SentState, *actions: SentAction) -> Transition[SentState]:
    return Transition(next_state, actions)


PROCESSOR_TASK_LIFECYCLE: Lifecycle[SentState, SentEvent] = Lifecycle(
    "processor task",
    SentState,
    terminal=(_S.FINISHED, _S.DIED, _S.RETURNED, _S.CANCELLED),
    table={
        (_S.SENT, _E.START): _t(_S.RUNNING),
        (_S.SENT, _E.RECALL): _t(_S.RECALLING, _A.SEND_DROP),
        (_S.SENT, _E.CANCEL): _t(_S.DROPPING, _A.SEND_DROP, _A.REPORT_RETURNED),  # confirmed at once
        (_S.SENT, _E.STOP): _t(_S.RETURNED, _A.REPORT_RETURNED),
        (_S.RECALLING, _E.START): _t(_S.STARTED_DROPPING),
        (_S.RECALLING, _E.RECALL): _t(_S.RECALLING),
        (_S.RECALLING, _E.CANCEL): _t(_S.DROPPING, _A.REPORT_RETURNED),
        (_S.RECALLING, _E.DROPPED): _t(_S.RETURNED, _A.LEAVE_INBOX, _A.REPORT_RETURNED),
        (_S.RECALLING, _E.STOP): _t(_S.RETURNED, _A.REPORT_RETURNED),
        (_S.DROPPING, _E.START): _t(_S.STOPPING, _A.STOP_PROCESSOR),  # the Drop may have come too late
        (_S.DROPPING, _E.RECALL): _t(_S.DROPPING),
        (_S.DROPPING, _E.CANCEL): _t(_S.DROPPING),
        (_S.DROPPING, _E.DROPPED): _t(_S.CANCELLED, _A.LEAVE_INBOX),
        (_S.DROPPING, _E.STOP): _t(_S.CANCELLED),
        (_S.RUNNING, _E.RESULT): _t(_S.FINISHED),
        (_S.RUNNING, _E.WAIT): _t(_S.WAITING),
        (_S.RUNNING, _E.CANCEL): _t(_S.RUNNING, _A.STOP_PROCESSOR),
        (_S.RUNNING, _E.STOP): _t(_S.DIED),
        (_S.STARTED_DROPPING, _E.RESULT): _t(_S.FINISHED),  # it had started: the Drop came too late
        (_S.STARTED_DROPPING, _E.WAIT): _t(_S.WAITING),
        (_S.STARTED_DROPPING, _E.DROPPED): _t(_S.RETURNED, _A.LEAVE_RUNNING, _A.REPORT_RETURNED),
        (_S.STARTED_DROPPING, _E.CANCEL): _t(_S.STARTED_DROPPING, _A.STOP_PROCESSOR),
        (_S.STARTED_DROPPING, _E.STOP): _t(_S.DIED),
        (_S.STOPPING, _E.RESULT): _t(_S.CANCELLED),  # it ended before the processor was stopped: no result
        (_S.STOPPING, _E.WAIT): _t(_S.STOPPING),
        (_S.STOPPING, _E.DROPPED): _t(_S.CANCELLED, _A.LEAVE_RUNNING),  # it had not started after all
        (_S.STOPPING, _E.CANCEL): _t(_S.STOPPING),
        (_S.STOPPING, _E.STOP): _t(_S.CANCELLED),
        (_S.WAITING, _E.RESUME): _t(_S.RUNNING),
        (_S.WAITING, _E.CANCEL): _t(_S.WAITING, _A.STOP_PROCESSOR),
        (_S.WAITING, _E.STOP): _t(_S.DIED),
    },
    always_possible=(_E.CANCEL, _E.STOP),
)
del _S, _E, _A
