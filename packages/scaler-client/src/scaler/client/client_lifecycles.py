"""The two lifecycles of the client's core, each one table: ``(state, event) -> (next state, actions)``.

- `SESSION`: the client's conversation with its scheduler (handshake, ready, closing, stopped; and, when the
  connection is lost, reconnecting and resuming: the client waits up to its ``reconnect_seconds`` for the
  scheduler to come back, says Hello again, and sends again what has not ended). What a command that needs a
  connected client does in each state (run, or be refused) is the table's entry for `SessionEvent.COMMAND`;
  the core compiles it into the dispatch table of each state.
- `TASK`: one task of this client, from its submission to its one end: a result (`DONE`), an error on the
  client's side (`FAILED`), or `CANCELLED`. A graph's targets are tasks too.

The core (`client_core.py`, `tasks_in_flight.py`) steps each subject with `Lifecycle.move` or `advance`: the
next state, the event told in the subject's story, the actions carried out in order; it never re-checks the
state after the table answered. A pair missing from a table is a bug: it raises naming the subject's story.
Messages from the peers that make no sense in a state (a result for a task the scheduler never got) have
entries that drop them, so bad input is dropped, never raised.
"""

from __future__ import annotations

import enum

from scaler.protocol import connection_events
from scaler.protocol.ids import show
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.messages import PeerRole


class SessionState(enum.Enum):
    IDLE = "idle"  # not started
    CONNECTING = "connecting"  # Hello sent, waiting for HelloAck
    READY = "ready"
    CLOSING = "closing"  # DisconnectRequest sent, waiting (bounded) for DisconnectResponse
    RECONNECTING = "reconnecting"  # the connection closed: waiting (bounded) for the scheduler to be reachable
    RESUMING = "resuming"  # reachable again: Hello said again, waiting for HelloAck to send again what is not done
    STOPPED = "stopped"

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C


class SessionEvent(enum.Enum):
    CONNECT = "connect"
    HELLO_ACK = "hello_ack"
    REFUSED = "refused"  # the scheduler sent a Refusal
    SILENT = "silent"  # nothing heard from the scheduler for the timeout (away: the wait for it is over)
    SCHEDULER_LEAVING = "scheduler_leaving"  # the scheduler sent a DisconnectRequest
    COMMAND = "command"  # submit, submit graph, put object, clear, shutdown
    DISCONNECT = "disconnect"
    DISCONNECT_RESPONSE = "disconnect_response"
    CLOSING_EXPIRED = "closing_expired"  # no DisconnectResponse within its bound
    ABORT = "abort"
    CONNECTION_UP = "connection_up"  # the socket monitor: connected, handshake done
    CONNECTION_LOST = "connection_lost"  # the socket monitor: the connection closed
    HANDSHAKE_REFUSED = "handshake_refused"  # the socket monitor: closed during the ZeroMQ handshake
    KEYS_REFUSED = "keys_refused"  # the socket monitor: the handshake failed over keys (CurveZMQ)
    WRONG_PEER = "wrong_peer"  # a HelloAck from a peer that is not a scheduler (an object storage server)

    __hash__ = object.__hash__


class SessionAction(enum.Enum):
    SAY_HELLO = "say_hello"
    JOIN = "join"  # reply to Connect, connect storage, start heartbeats
    RUN_COMMAND = "run_command"
    REFUSE_COMMAND_EARLY = "refuse_command_early"  # not connected yet
    REFUSE_COMMAND = "refuse_command"  # disconnected
    SAY_GOODBYE = "say_goodbye"  # send DisconnectRequest, wait (bounded) for the answer
    ANSWER_DISCONNECT = "answer_disconnect"  # a second disconnect while closing: answered at once
    # each way to stop has its own error
    STOP_REFUSED = "stop_refused"  # ProtocolError: refused in the handshake (another protocol version)
    STOP_EXPELLED = "stop_expelled"  # refused later
    STOP_UNANSWERED = "stop_unanswered"  # no scheduler answered the Hello
    STOP_LOST = "stop_lost"  # the scheduler went silent
    STOP_LEFT = "stop_left"  # the scheduler closed the connection
    STOP_DISCONNECTED = "stop_disconnected"  # the user disconnected before the scheduler answered
    STOP_ABORTED = "stop_aborted"  # the error the Abort carries
    FINISH_DISCONNECT = "finish_disconnect"  # the disconnect the user asked for is done
    HELLO_LOST = "hello_lost"  # the connection dropped before the answer: say Hello again once it is back
    HELLO_AGAIN = "hello_again"  # it is back: Hello again, if the one sent was lost
    STOP_NOT_A_SCHEDULER = "stop_not_a_scheduler"  # the address answers, but not as a scheduler
    WAIT_FOR_SCHEDULER = "wait_for_scheduler"  # the connection closed: withhold what goes to the scheduler, wait
    RENEW_CONNECTION = "renew_connection"  # a new socket: what the old one still queued never reaches the scheduler
    HELLO_ON_RETURN = "hello_on_return"  # reachable again: say Hello again
    REJOIN = "rejoin"  # HelloAck again: send again every task and graph not done, resume heartbeats
    STOP_GONE = "stop_gone"  # the scheduler did not come back within reconnect_seconds
    LEAVE_AWAY = "leave_away"  # a disconnect while the scheduler is away: done at once
    NOTE_REFUSAL = "note_refusal"  # a handshake refused while the scheduler restarts: told if the wait ends

    __hash__ = object.__hash__


def _session_table():
    S, E, A = SessionState, SessionEvent, SessionAction
    table = {
        (S.IDLE, E.CONNECT): Transition(S.CONNECTING, (A.SAY_HELLO,)),
        (S.IDLE, E.DISCONNECT): Transition(S.STOPPED, (A.STOP_DISCONNECTED,)),
        (S.IDLE, E.ABORT): Transition(S.STOPPED, (A.STOP_ABORTED,)),
        (S.CONNECTING, E.HELLO_ACK): Transition(S.READY, (A.JOIN,)),
        (S.CONNECTING, E.REFUSED): Transition(S.STOPPED, (A.STOP_REFUSED,)),
        (S.CONNECTING, E.SILENT): Transition(S.STOPPED, (A.STOP_UNANSWERED,)),
        (S.CONNECTING, E.COMMAND): Transition(S.CONNECTING, (A.REFUSE_COMMAND_EARLY,)),
        (S.CONNECTING, E.DISCONNECT): Transition(S.STOPPED, (A.STOP_DISCONNECTED,)),
        (S.READY, E.COMMAND): Transition(S.READY, (A.RUN_COMMAND,)),
        (S.READY, E.DISCONNECT): Transition(S.CLOSING, (A.SAY_GOODBYE,)),
        (S.CLOSING, E.COMMAND): Transition(S.CLOSING, (A.REFUSE_COMMAND,)),
        (S.CLOSING, E.DISCONNECT): Transition(S.CLOSING, (A.ANSWER_DISCONNECT,)),
        (S.CLOSING, E.DISCONNECT_RESPONSE): Transition(S.STOPPED, (A.FINISH_DISCONNECT,)),
        (S.CLOSING, E.CLOSING_EXPIRED): Transition(S.STOPPED, (A.FINISH_DISCONNECT,)),
    }
    for state in (S.CONNECTING, S.READY, S.CLOSING):
        table[(state, E.SCHEDULER_LEAVING)] = Transition(S.STOPPED, (A.STOP_LEFT,))
        table[(state, E.ABORT)] = Transition(S.STOPPED, (A.STOP_ABORTED,))
    for state in (S.READY, S.CLOSING):
        table[(state, E.HELLO_ACK)] = Transition(state)  # a duplicate: nothing to do
        table[(state, E.REFUSED)] = Transition(S.STOPPED, (A.STOP_EXPELLED,))
        table[(state, E.SILENT)] = Transition(S.STOPPED, (A.STOP_LOST,))
    for state in (S.CONNECTING, S.READY):
        table[(state, E.DISCONNECT_RESPONSE)] = Transition(state)  # not asked for: nothing to do
    # the connection: it is the session (the scheduler forgets a client whose connection closes)
    for event in (E.CONNECTION_UP, E.CONNECTION_LOST, E.HANDSHAKE_REFUSED, E.WRONG_PEER):
        table[(S.IDLE, event)] = Transition(S.IDLE)  # not connecting yet: nothing to do
    table[(S.CONNECTING, E.CONNECTION_UP)] = Transition(S.CONNECTING, (A.HELLO_AGAIN,))
    table[(S.CONNECTING, E.CONNECTION_LOST)] = Transition(S.CONNECTING, (A.HELLO_LOST,))  # the Hello waits it out
    table[(S.CONNECTING, E.HANDSHAKE_REFUSED)] = Transition(S.STOPPED, (A.STOP_NOT_A_SCHEDULER,))
    table[(S.CONNECTING, E.WRONG_PEER)] = Transition(S.STOPPED, (A.STOP_NOT_A_SCHEDULER,))
    table[(S.CLOSING, E.CONNECTION_LOST)] = Transition(S.STOPPED, (A.FINISH_DISCONNECT,))
    for state in (S.READY, S.CLOSING):
        table[(state, E.CONNECTION_UP)] = Transition(state)  # a reconnect after a loss: stopped already
        table[(state, E.HANDSHAKE_REFUSED)] = Transition(state)  # the same
        table[(state, E.WRONG_PEER)] = Transition(state)  # a second HelloAck: the first said who answered
    # the scheduler is away (it restarted, or the network failed): wait for it, bounded (SILENT), then resume
    table[(S.READY, E.CONNECTION_LOST)] = Transition(S.RECONNECTING, (A.WAIT_FOR_SCHEDULER, A.RENEW_CONNECTION))
    table[(S.RECONNECTING, E.CONNECTION_UP)] = Transition(S.RESUMING, (A.HELLO_ON_RETURN,))
    table[(S.RESUMING, E.HELLO_ACK)] = Transition(S.READY, (A.REJOIN,))
    table[(S.RESUMING, E.CONNECTION_LOST)] = Transition(S.RECONNECTING, (A.RENEW_CONNECTION,))
    table[(S.RESUMING, E.WRONG_PEER)] = Transition(S.STOPPED, (A.STOP_NOT_A_SCHEDULER,))
    table[(S.RESUMING, E.REFUSED)] = Transition(S.STOPPED, (A.STOP_REFUSED,))  # the answer to the new Hello
    table[(S.RECONNECTING, E.REFUSED)] = Transition(S.STOPPED, (A.STOP_EXPELLED,))
    for state in (S.RECONNECTING, S.RESUMING):
        table[(state, E.SILENT)] = Transition(S.STOPPED, (A.STOP_GONE,))
        table[(state, E.COMMAND)] = Transition(state, (A.RUN_COMMAND,))  # held, and sent when the scheduler is back
        table[(state, E.DISCONNECT)] = Transition(S.STOPPED, (A.LEAVE_AWAY,))
        table[(state, E.SCHEDULER_LEAVING)] = Transition(S.STOPPED, (A.STOP_LEFT,))
        table[(state, E.ABORT)] = Transition(S.STOPPED, (A.STOP_ABORTED,))
        table[(state, E.HANDSHAKE_REFUSED)] = Transition(state)  # a handshake that failed while it starts: waited out
        table[(state, E.DISCONNECT_RESPONSE)] = Transition(state)
    for event in (E.HELLO_ACK, E.WRONG_PEER, E.CONNECTION_LOST):
        table[(S.RECONNECTING, event)] = Transition(S.RECONNECTING)  # of the lost connection: nothing to do
    table[(S.RESUMING, E.CONNECTION_UP)] = Transition(S.RESUMING)
    # a handshake refused over keys: the scheduler's answer, but while it restarts, a handshake may fail on its way
    table[(S.IDLE, E.KEYS_REFUSED)] = Transition(S.IDLE)
    table[(S.CONNECTING, E.KEYS_REFUSED)] = Transition(S.STOPPED, (A.STOP_REFUSED,))
    for state in (S.READY, S.CLOSING):
        table[(state, E.KEYS_REFUSED)] = Transition(S.STOPPED, (A.STOP_EXPELLED,))
    for state in (S.RECONNECTING, S.RESUMING):
        table[(state, E.KEYS_REFUSED)] = Transition(state, (A.NOTE_REFUSAL,))
    return table


def _of_client(client_id: bytes) -> str:
    return f"of {show(client_id)}"


SESSION = Lifecycle(
    "client session",
    states=SessionState,
    terminal=[SessionState.STOPPED],
    table=_session_table(),
    always_possible=[SessionEvent.DISCONNECT, SessionEvent.ABORT],
    show=_of_client,
)
# the session's events of a connection's changes (its socket monitor's), and of a HelloAck's role
CONNECTION_EVENTS = {
    connection_events.UP: SessionEvent.CONNECTION_UP,
    connection_events.DOWN: SessionEvent.CONNECTION_LOST,
    connection_events.REFUSED: SessionEvent.HANDSHAKE_REFUSED,
}
SCHEDULER_ROLES = (PeerRole.SCHEDULER, PeerRole.CLIENT)  # CLIENT: an older scheduler, which does not say


class TaskState(enum.Enum):
    NEW = "new"  # being submitted: it leaves NEW before the Submit is handled
    HELD = "held"  # waiting for room in storage for its large arguments, or under the scheduler's quota (nothing put)
    STORING = "storing"  # waiting for the acknowledgements of the objects it needs
    SENT = "sent"  # at the scheduler
    CANCELLING = "cancelling"  # cancel sent, waiting for the confirmation (or the result)
    FETCHING = "fetching"  # its result's payload is being read from storage
    PARKED = "parked"  # waiting here for the tasks whose results it takes (the scheduler does not hold it for them)
    DONE = "done"  # ended with a result from the scheduler (success, failure, cancelled, ...)
    FAILED = "failed"  # ended with an error on the client's side
    CANCELLED = "cancelled"

    __hash__ = object.__hash__


class TaskEvent(enum.Enum):
    HOLD = "hold"  # no room yet: in storage for its large arguments, or under the client's quota at the scheduler
    STORE = "store"  # some object it needs is not acknowledged yet
    SEND = "send"  # every object it needs is stored
    SENT_IN_GRAPH = "sent_in_graph"  # a graph's target: the graph was sent
    RESULT = "result"  # its result, payload inline
    RESULT_STORED = "result_stored"  # its result, payload in object storage
    FETCHED = "fetched"  # that payload was read
    CANCEL = "cancel"
    CANCEL_CONFIRMED = "cancel_confirmed"
    CANCEL_REFUSED = "cancel_refused"
    FAIL = "fail"  # a put it needs failed, storage refused the client, its result could not be read
    CLEAR = "clear"  # Client.clear: storage and scheduler forget everything of this client
    STOP = "stop"  # the client stopped (scheduler lost, disconnected)
    RESEND = "resend"  # the scheduler answered again after the connection was lost: what it may not hold goes again
    PARK = "park"  # its inputs' values are taken here: the scheduler does not hold one of them, or is older than 1.8

    __hash__ = object.__hash__


class TaskAction(enum.Enum):
    HOLD = "hold"  # queue it for room (in storage, at the scheduler)
    SEND = "send"  # add it to the next TaskBatch
    SEND_AGAIN = "send_again"  # add it to the next TaskBatch again (a graph's target goes with its graph)
    SEND_CANCEL = "send_cancel"  # add it to the next TaskCancel
    FETCH = "fetch"  # read the result's payload from storage
    DROP_RESULT = "drop_result"  # a result it cannot have: delete its payload from storage, if stored
    END = "end"  # forget the task and delete its temporary objects from storage
    FORGET = "forget"  # forget the task, leave its objects (none put yet, or storage forgets them anyway)
    GIVE_RESULT = "give_result"
    GIVE_ERROR = "give_error"
    GIVE_CANCELLED = "give_cancelled"
    TELL_CANCEL_REFUSED = "tell_cancel_refused"
    RESOLVE_INPUTS = "resolve_inputs"  # ask the agent for its inputs' outcomes once they ended (`ResolveInputs`)

    __hash__ = object.__hash__


# A task is NEW only while its Submit is handled: then it is in one of these, until it ends.
LIVE = (TaskState.HELD, TaskState.STORING, TaskState.SENT, TaskState.CANCELLING, TaskState.FETCHING, TaskState.PARKED)
# What may come to any live task, whatever its state: each has an entry in every state of LIVE.
ANY_TIME = (
    TaskEvent.CANCEL, TaskEvent.FAIL, TaskEvent.CLEAR, TaskEvent.STOP,  # the user, storage, the client's end
    TaskEvent.RESEND,  # the scheduler came back
    TaskEvent.RESULT, TaskEvent.RESULT_STORED, TaskEvent.CANCEL_CONFIRMED, TaskEvent.CANCEL_REFUSED,  # the scheduler
    TaskEvent.PARK,
)  # fmt: skip


def _task_table():
    S, E, A = TaskState, TaskEvent, TaskAction
    give_result, give_error, give_cancelled = (A.END, A.GIVE_RESULT), (A.END, A.GIVE_ERROR), (A.END, A.GIVE_CANCELLED)
    table = {
        (S.NEW, E.HOLD): Transition(S.HELD, (A.HOLD,)),
        (S.NEW, E.STORE): Transition(S.STORING),
        (S.NEW, E.SEND): Transition(S.SENT, (A.SEND,)),
        (S.NEW, E.SENT_IN_GRAPH): Transition(S.SENT),
        (S.HELD, E.STORE): Transition(S.STORING),
        (S.HELD, E.SEND): Transition(S.SENT, (A.SEND,)),  # held under the quota, what it needs stored
        (S.STORING, E.SEND): Transition(S.SENT, (A.SEND,)),
        (S.STORING, E.SENT_IN_GRAPH): Transition(S.SENT),
        (S.SENT, E.CANCEL): Transition(S.CANCELLING, (A.SEND_CANCEL,)),
        (S.CANCELLING, E.CANCEL): Transition(S.CANCELLING),
        (S.FETCHING, E.CANCEL): Transition(S.FETCHING),  # its result is being read: too late to cancel
        (S.FETCHING, E.FETCHED): Transition(S.DONE, give_result),
    }
    # Nothing of a task not yet stored is at the scheduler: it ends here. New or held, it has put nothing.
    for state in (S.NEW, S.HELD):
        table[(state, E.FAIL)] = Transition(S.FAILED, (A.FORGET, A.GIVE_ERROR))
    table[(S.HELD, E.CANCEL)] = Transition(S.CANCELLED, (A.FORGET, A.GIVE_CANCELLED))
    table[(S.STORING, E.CANCEL)] = Transition(S.CANCELLED, give_cancelled)
    for state in (S.STORING, S.SENT, S.CANCELLING, S.FETCHING):
        table[(state, E.FAIL)] = Transition(S.FAILED, give_error)
    for state in LIVE:
        # clear: scheduler and storage forget this client's tasks and objects themselves
        table[(state, E.CLEAR)] = Transition(S.CANCELLED, (A.FORGET, A.GIVE_CANCELLED))
        table[(state, E.STOP)] = Transition(S.FAILED, (A.FORGET, A.GIVE_ERROR))
    # At the scheduler: a result wins over a cancel that crossed it on the wire.
    for state in (S.SENT, S.CANCELLING):
        table[(state, E.RESULT)] = Transition(S.DONE, give_result)
        table[(state, E.RESULT_STORED)] = Transition(S.FETCHING, (A.FETCH,))
        table[(state, E.CANCEL_CONFIRMED)] = Transition(S.CANCELLED, give_cancelled)
        table[(state, E.CANCEL_REFUSED)] = Transition(S.SENT, (A.TELL_CANCEL_REFUSED,))
    # The scheduler came back (maybe a new one, knowing nothing): a task it may hold is sent again (it ignores
    # what it holds); a cancel whose confirm was lost ends the task here, and is sent again for what still runs.
    table[(S.SENT, E.RESEND)] = Transition(S.SENT, (A.SEND_AGAIN,))
    table[(S.CANCELLING, E.RESEND)] = Transition(S.CANCELLED, (A.SEND_CANCEL, A.END, A.GIVE_CANCELLED))
    for state in (S.HELD, S.STORING, S.FETCHING):  # not at the scheduler yet, or its result here already
        table[(state, E.RESEND)] = Transition(state)
    # Answers it cannot have (never sent, or its result already here): dropped.
    for state in (S.HELD, S.STORING, S.FETCHING, S.PARKED):
        table[(state, E.RESULT)] = Transition(state)
        table[(state, E.RESULT_STORED)] = Transition(state, (A.DROP_RESULT,))
        table[(state, E.CANCEL_CONFIRMED)] = Transition(state)
        table[(state, E.CANCEL_REFUSED)] = Transition(state)
        table[(state, E.PARK)] = Transition(state)
    # A task that takes other tasks' results (futures as arguments), when the scheduler does not hold it for them:
    # it waits here for them to end, then goes with their values (or ends as the first failed or cancelled one).
    table[(S.NEW, E.PARK)] = Transition(S.PARKED, (A.RESOLVE_INPUTS,))
    table[(S.SENT, E.PARK)] = Transition(S.PARKED, (A.RESOLVE_INPUTS,))
    table[(S.CANCELLING, E.PARK)] = Transition(S.CANCELLED, give_cancelled)  # the scheduler never held it
    table[(S.PARKED, E.HOLD)] = Transition(S.HELD, (A.HOLD,))
    table[(S.PARKED, E.STORE)] = Transition(S.STORING)
    table[(S.PARKED, E.SEND)] = Transition(S.SENT, (A.SEND,))
    table[(S.PARKED, E.FAIL)] = Transition(S.FAILED, give_error)
    table[(S.PARKED, E.CANCEL)] = Transition(S.CANCELLED, give_cancelled)
    table[(S.PARKED, E.RESEND)] = Transition(S.PARKED)
    return table


TASK = Lifecycle(
    "client task",
    states=TaskState,
    terminal=[TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED],
    table=_task_table(),
    always_possible=[TaskEvent.FAIL],  # NEW too: a new task whose function's put failed
    show=show,
)
