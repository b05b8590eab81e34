"""A worker manager's conversation with its scheduler, as one table: `SESSION` (``(state, event) -> (next state,
actions)``), which `manager_core.ManagerCore` steps (`Lifecycle.advance`), as the client and the worker step theirs.

- connecting: Hello said, no HelloAck yet (``hello_lost``: its connection went down meanwhile; Hello again when it is
  up). A HelloAck joins (heartbeats from now on); what answers as something else than a scheduler, a Refusal, a
  handshake refused over keys or closed in it, or no answer within the timeout ends the manager (exit 78, or 1
  for no answer). A stop before the HelloAck leaves at once: nothing was started.
- ready: the scheduler's commands are obeyed; a Refusal (it no longer knows this manager), a lost connection or
  its silence stops every group and ends the manager (exit 1). A stop drains every group (``draining``).
- draining: groups retire and stop as the scheduler names them, all of them once the leave timeout passed or at a
  second stop (``stopping``); once none is left the manager says DisconnectRequest and ends (exit 0).
"""

from __future__ import annotations

import enum
from typing import Dict, Tuple

from scaler.protocol.ids import show
from scaler.protocol.lifecycle import Lifecycle, Transition


class SessionState(enum.Enum):
    CONNECTING = "connecting"
    HELLO_LOST = "hello_lost"  # connecting, and the connection went down: Hello again once it is up
    READY = "ready"
    DRAINING = "draining"  # leaving: every group retires, the scheduler drains them
    STOPPING = "stopping"  # leaving: every group stopped, drained or not
    LEAVING_EARLY = "leaving_early"  # leaving before the scheduler answered: no group was started
    ENDED = "ended"


class SessionEvent(enum.Enum):
    HELLO_ACK = "hello_ack"
    NOT_A_SCHEDULER = "not_a_scheduler"  # a HelloAck of another role
    REFUSED = "refused"  # a Refusal
    COMMAND = "command"  # a WorkerManagerCommand
    CONNECTION_UP = "connection_up"
    CONNECTION_DOWN = "connection_down"
    CLOSED_IN_HANDSHAKE = "closed_in_handshake"  # the socket monitor says refused, without a reason
    KEYS_REFUSED = "keys_refused"  # HandshakeFailed
    UNANSWERED = "unanswered"  # no HelloAck within the timeout
    SILENT = "silent"  # nothing heard within the timeout
    STOP = "stop"  # a stop signal
    LEAVE_EXPIRED = "leave_expired"  # draining for the leave timeout
    EMPTIED = "emptied"  # leaving, and no group is left


class SessionAction(enum.Enum):
    JOIN = "join"  # connected: heartbeats from now on
    HELLO_AGAIN = "hello_again"
    OBEY = "obey"  # stop the groups named, start what is desired
    DROP_COMMAND = "drop_command"  # a command before the HelloAck
    DRAIN_ALL = "drain_all"  # every group retires; leave within the leave timeout
    STOP_ALL = "stop_all"
    STOP_LATE = "stop_late"  # the leave timeout passed: every group stopped
    SAY_GOODBYE = "say_goodbye"  # DisconnectRequest
    END_OK = "end_ok"
    END_NOT_A_SCHEDULER = "end_not_a_scheduler"
    END_REFUSED = "end_refused"
    END_KEYS_REFUSED = "end_keys_refused"
    END_CLOSED_IN_HANDSHAKE = "end_closed_in_handshake"
    END_UNANSWERED = "end_unanswered"
    LOSE = "lose"  # the scheduler is lost: every group stopped, exit 1


def _session_table() -> Dict[Tuple[SessionState, SessionEvent], Transition]:
    S, E, A = SessionState, SessionEvent, SessionAction
    table: Dict[Tuple[SessionState, SessionEvent], Transition] = {}
    for state in (S.CONNECTING, S.HELLO_LOST, S.LEAVING_EARLY):  # before the HelloAck
        table.update({
            (state, E.HELLO_ACK): Transition(S.STOPPING if state is S.LEAVING_EARLY else S.READY,
                                             (A.JOIN, A.STOP_ALL) if state is S.LEAVING_EARLY else (A.JOIN,)),
            (state, E.NOT_A_SCHEDULER): Transition(S.ENDED, (A.END_NOT_A_SCHEDULER,)),
            (state, E.REFUSED): Transition(S.ENDED, (A.END_REFUSED,)),
            (state, E.COMMAND): Transition(state, (A.DROP_COMMAND,)),
            (state, E.CONNECTION_UP): Transition(state),
            (state, E.CONNECTION_DOWN): Transition(S.HELLO_LOST if state is S.CONNECTING else state),
            (state, E.CLOSED_IN_HANDSHAKE): Transition(S.ENDED, (A.END_CLOSED_IN_HANDSHAKE,)),
            (state, E.KEYS_REFUSED): Transition(S.ENDED, (A.END_KEYS_REFUSED,)),
            (state, E.UNANSWERED): Transition(S.ENDED, (A.END_UNANSWERED,)),
            (state, E.STOP): Transition(S.LEAVING_EARLY, (A.STOP_ALL,)),
        })  # fmt: skip
    table[(S.HELLO_LOST, E.CONNECTION_UP)] = Transition(S.CONNECTING, (A.HELLO_AGAIN,))
    table[(S.LEAVING_EARLY, E.EMPTIED)] = Transition(S.ENDED, (A.END_OK,))
    for state in (S.READY, S.DRAINING, S.STOPPING):  # answered
        table.update({
            (state, E.HELLO_ACK): Transition(state),  # a second one
            (state, E.NOT_A_SCHEDULER): Transition(S.ENDED, (A.END_NOT_A_SCHEDULER,)),
            (state, E.REFUSED): Transition(S.ENDED, (A.LOSE,)),
            (state, E.COMMAND): Transition(state, (A.OBEY,)),
            (state, E.CONNECTION_UP): Transition(state),
            (state, E.CONNECTION_DOWN): Transition(S.ENDED, (A.LOSE,)),
            (state, E.CLOSED_IN_HANDSHAKE): Transition(state),
            (state, E.KEYS_REFUSED): Transition(S.ENDED, (A.END_KEYS_REFUSED,)),
            (state, E.SILENT): Transition(S.ENDED, (A.LOSE,)),
        })  # fmt: skip
    table[(S.READY, E.STOP)] = Transition(S.DRAINING, (A.DRAIN_ALL,))
    for state in (S.DRAINING, S.STOPPING):
        table[(state, E.STOP)] = Transition(S.STOPPING, (A.STOP_ALL,))
        table[(state, E.LEAVE_EXPIRED)] = Transition(S.STOPPING, (A.STOP_LATE,))
        table[(state, E.EMPTIED)] = Transition(S.ENDED, (A.SAY_GOODBYE, A.END_OK))
    return table


def _of_manager(manager_id: bytes) -> str:
    return f"of {show(manager_id)}"


SESSION = Lifecycle(
    "worker manager session",
    states=SessionState,
    terminal=[SessionState.ENDED],
    table=_session_table(),
    always_possible=[SessionEvent.STOP, SessionEvent.CONNECTION_DOWN, SessionEvent.KEYS_REFUSED],
    show=_of_manager,
)
CONNECTED = frozenset({SessionState.READY, SessionState.DRAINING, SessionState.STOPPING})
LEAVING = frozenset({SessionState.DRAINING, SessionState.STOPPING, SessionState.LEAVING_EARLY})
