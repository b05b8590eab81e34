"""The life of a task the Symphony runner took (`symphony_runner`), as one table.

A task is SUBMITTING once the runner hands it to its host, IN_SYMPHONY once Symphony gave it an ID. It ends
FINISHED (its service's output, or a failure to submit it that is the task's own), DIED (Symphony failed it,
or its session died while it ran there), or RETURNED (its session died before it reached Symphony: it goes
back to the queue). A task the worker ends early (a cancel, a timeout) is ABORTING: reported died at once,
and kept only until Symphony confirms the abort or its output comes anyway, so that it keeps its place under
the base concurrency while Symphony may still run it. Every non-terminal state has a way out on CANCEL and
SESSION_LOST.
"""

from __future__ import annotations

import enum

from scaler.protocol.lifecycle import Lifecycle, Transition


class SymphonyState(enum.Enum):
    SUBMITTING = "submitting"  # handed to the host, not in Symphony yet
    IN_SYMPHONY = "in symphony"
    ABORTING = "aborting"  # ended for the worker; Symphony may still run it
    FINISHED = "finished"
    DIED = "died"
    RETURNED = "returned"
    ENDED = "ended"  # an aborted task left Symphony

    __hash__ = object.__hash__


class SymphonyEvent(enum.Enum):
    SUBMITTED = "submitted"  # Symphony took it, under an ID
    OUTPUT = "output"  # its service's output, read (a result or the task's failure)
    FAILED = "failed"  # Symphony failed it, or would not take it
    CANCEL = "cancel"  # the worker ends it now (a cancel, or its timeout)
    ABORTED = "aborted"  # Symphony stopped it
    SESSION_LOST = "session lost"

    __hash__ = object.__hash__


class SymphonyAction(enum.Enum):
    REMEMBER_ID = "remember id"  # the tasks its clients submit are nested in it
    REPORT_FINISHED = "report finished"
    REPORT_DIED = "report died"
    REPORT_RETURNED = "report returned"
    SEND_ABORT = "send abort"
    RELEASE = "release"  # it is out of Symphony: forget it, and free its place under the base concurrency

    __hash__ = object.__hash__


_S, _E, _A = SymphonyState, SymphonyEvent, SymphonyAction


def _t(next_state: SymphonyState, *actions: SymphonyAction) -> Transition[SymphonyState]:
    return Transition(next_state, actions)


SYMPHONY_TASK_LIFECYCLE: Lifecycle[SymphonyState, SymphonyEvent] = Lifecycle(
    "symphony task",
    SymphonyState,
    terminal=(_S.FINISHED, _S.DIED, _S.RETURNED, _S.ENDED),
    table={
        (_S.SUBMITTING, _E.SUBMITTED): _t(_S.IN_SYMPHONY, _A.REMEMBER_ID),
        (_S.SUBMITTING, _E.OUTPUT): _t(_S.FINISHED, _A.REPORT_FINISHED, _A.RELEASE),
        (_S.SUBMITTING, _E.FAILED): _t(_S.DIED, _A.REPORT_DIED, _A.RELEASE),
        (_S.SUBMITTING, _E.CANCEL): _t(_S.ABORTING, _A.SEND_ABORT, _A.REPORT_DIED),
        (_S.SUBMITTING, _E.SESSION_LOST): _t(_S.RETURNED, _A.REPORT_RETURNED, _A.RELEASE),
        (_S.IN_SYMPHONY, _E.OUTPUT): _t(_S.FINISHED, _A.REPORT_FINISHED, _A.RELEASE),
        (_S.IN_SYMPHONY, _E.FAILED): _t(_S.DIED, _A.REPORT_DIED, _A.RELEASE),
        (_S.IN_SYMPHONY, _E.CANCEL): _t(_S.ABORTING, _A.SEND_ABORT, _A.REPORT_DIED),
        (_S.IN_SYMPHONY, _E.SESSION_LOST): _t(_S.DIED, _A.REPORT_DIED, _A.RELEASE),
        (_S.ABORTING, _E.SUBMITTED): _t(_S.ABORTING),
        (_S.ABORTING, _E.OUTPUT): _t(_S.ENDED, _A.RELEASE),  # too late: it was reported died
        (_S.ABORTING, _E.FAILED): _t(_S.ENDED, _A.RELEASE),
        (_S.ABORTING, _E.CANCEL): _t(_S.ABORTING),
        (_S.ABORTING, _E.ABORTED): _t(_S.ENDED, _A.RELEASE),
        (_S.ABORTING, _E.SESSION_LOST): _t(_S.ENDED, _A.RELEASE),
    },
    always_possible=(_E.CANCEL, _E.SESSION_LOST),
)
del _S, _E, _A
