"""The worker's session with the scheduler and the object storage server, without I/O.

The handshake: the worker says `Hello` (its role, protocol version, pid, host, slots, queue capacity and
capabilities) and waits up to the worker timeout for the scheduler's `HelloAck`; a `Refusal` ends it (an
incompatible scheduler: exit 78, not worth replacing). The `HelloAck` names the object storage server (the
scheduler's port + 1 when it names none) and may shorten the heartbeat interval; the worker then says
Hello to storage too. A storage `Refusal` of that Hello ends the worker (78); a later one (a request
refused, or a restarted server that forgot us) is answered by saying Hello again.

What answers must be what it should be: a `HelloAck` whose role (protocol 1.5) is not the scheduler's (an
object storage server's port given by mistake), or a connection closed during its ZeroMQ handshake (a
scheduler's monitor port), ends the worker (78) naming the problem; the same for the storage address the
scheduler named.

Liveness: a heartbeat every interval once connected (its resource numbers are measured by the shell on
`MeasureUsage`; its task counts, what it holds and its per-function totals are the core's). The connection
is the session: when the connection to the scheduler closes (its socket monitor says so, within
milliseconds of the scheduler's death, or seconds after its host vanished: `connection_liveness`), the
scheduler, which sees the same close, has forgotten this worker and queued its tasks again (or it died). The
worker then waits up to the worker timeout for the connection to come back (a partition that heals, a
scheduler restarted on its address), its tasks running on: it says Hello again when it is back, naming the
tasks it holds and those whose results it holds (``WorkerInfo.heldTasks``, protocol 1.8: a scheduler that
restarted takes them for this worker's, docs/protocol.md "Reconnecting"), and sends those results once
answered; or it exits (1) past the timeout, and `scaler_cluster` replaces it. Meanwhile it sends the
scheduler nothing (the core holds its answers), takes a `Refusal` for the refusal of something sent before
the connection closed, and waits out a handshake that fails (a scheduler that starts); what it still holds
when it is back is settled by its heartbeats (the scheduler cancels here what it no longer gave this worker). A
scheduler silent for longer than the worker timeout counts as gone too (1). A scheduler that refuses us
after its `HelloAck` restarted and forgot us: exit (1) too. A `DisconnectRequest` from the scheduler, or a
stop signal, ends the worker (0); leaving on our own, the worker first says `DisconnectRequest`, so that its
tasks go elsewhere at once rather than after the scheduler's timeout. Before the `HelloAck`, a dropped
connection is waited out: the Hello is said again when it is back.

The storage server: when its connection closes, what waits on it fails at once and what is asked meanwhile
waits (the core), and the worker says Hello again when the connection is back (a restarted server knows
nobody).

The conversation with the scheduler is one table, `SESSION` (``(state, event) -> (next state, actions)``),
by state, each event -> next state [actions]:

- connecting: hello_ack -> ready [join]; connection_lost -> connecting [hello_lost]; connection_up -> connecting
  [hello_again]; wrong_peer, handshake_refused -> ended [leave_not_a_scheduler]; refused, keys_refused -> ended
  [leave_refused]; deadline -> ended [leave_unanswered]; sent_away -> ended [leave_sent_away]
- ready: connection_lost -> away [wait_for_scheduler]; silent -> ended [leave_silent]; refused -> ended
  [leave_forgotten]; keys_refused -> ended [leave_refused]; sent_away -> ended [leave_sent_away]; hello_ack ->
  ready [drop_second_ack]; wrong_peer, connection_up, handshake_refused -> ready
- away: connection_up -> resuming [hello_on_return]; deadline -> ended [leave_unanswered]; refused -> away
  [drop_stale_refusal]; keys_refused -> away [wait_out_refusal]; sent_away -> ended [leave_sent_away]; hello_ack,
  wrong_peer, connection_lost, handshake_refused -> away
- resuming: hello_ack -> ready [rejoin]; connection_lost -> away; deadline -> ended [leave_unanswered]; wrong_peer ->
  ended [leave_not_a_scheduler]; refused -> resuming [drop_stale_refusal]; keys_refused -> resuming
  [wait_out_refusal]; sent_away -> ended [leave_sent_away]; connection_up, handshake_refused -> resuming

`ended` is terminal: the worker leaves (`leave`), with the exit code and the goodbye each way to end says.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
from typing import Any, Callable, Dict, List, Tuple

from scaler.protocol import connection_events
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.connection_events import closed_in_handshake, role_name
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.message_limits import message_budget
from scaler.protocol.version import PROTOCOL_VERSION, TASK_OUTPUT_VERSION, WAITING_TASKS_VERSION, knows, show_version
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_events import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REFUSED,
    ConnectStorage,
    MeasureUsage,
    SendToScheduler,
    SendToStorage,
    UsageMeasured,
    WorkerIdentity,
)

logger = logging.getLogger(__name__)

Leave = Callable[[int, str, bool], None]  # (exit code, why, whether to say DisconnectRequest)


class SessionState(enum.Enum):
    CONNECTING = "connecting"  # the first Hello said, waiting for the HelloAck (the worker timeout)
    HELLO_LOST = "hello_lost"  # the connection closed before the HelloAck: say Hello again when it is back
    READY = "ready"  # answered: tasks come, answers and heartbeats go
    AWAY = "away"  # the connection closed after the HelloAck: waiting for it to come back (the worker timeout)
    RESUMING = "resuming"  # it is back: Hello said again, naming what the worker holds; waiting for the HelloAck
    ENDED = "ended"  # the worker leaves

    __hash__ = object.__hash__


class SessionEvent(enum.Enum):
    HELLO_ACK = "hello_ack"  # from a scheduler
    WRONG_PEER = "wrong_peer"  # a HelloAck from a peer that is not a scheduler
    REFUSED = "refused"  # a Refusal
    KEYS_REFUSED = "keys_refused"  # the connection's handshake failed over keys
    HANDSHAKE_REFUSED = "handshake_refused"  # the connection closed during its handshake, without a reason
    CONNECTION_UP = "connection_up"
    CONNECTION_LOST = "connection_lost"
    DEADLINE = "deadline"  # no HelloAck (or no scheduler back) within the worker timeout
    SILENT = "silent"  # nothing heard from the scheduler for the worker timeout
    SENT_AWAY = "sent_away"  # a DisconnectRequest from the scheduler

    __hash__ = object.__hash__


class SessionAction(enum.Enum):
    JOIN = "join"  # connect to storage, Hello there, heartbeats
    HELLO_AGAIN = "hello_again"  # it is back: the Hello again, lost with the connection
    DROP_SECOND_ACK = "drop_second_ack"
    WAIT_FOR_SCHEDULER = "wait_for_scheduler"  # hold the answers; the worker timeout from now
    HELLO_ON_RETURN = "hello_on_return"  # Hello again, naming what the worker holds
    REJOIN = "rejoin"  # heartbeats again; the answers held go
    DROP_STALE_REFUSAL = "drop_stale_refusal"  # of something sent before the connection closed
    WAIT_OUT_REFUSAL = "wait_out_refusal"  # a handshake that failed while the scheduler starts
    LEAVE_NOT_A_SCHEDULER = "leave_not_a_scheduler"  # 78
    LEAVE_REFUSED = "leave_refused"  # 78: the Hello refused (another protocol version, keys)
    LEAVE_UNANSWERED = "leave_unanswered"  # 1: no answer (or the scheduler not back) within the worker timeout
    LEAVE_SILENT = "leave_silent"  # 1
    LEAVE_FORGOTTEN = "leave_forgotten"  # 1: refused after its HelloAck: it forgot this worker
    LEAVE_SENT_AWAY = "leave_sent_away"  # 0

    __hash__ = object.__hash__


def _session_table() -> Dict[Tuple[SessionState, SessionEvent], Transition[SessionState]]:
    S, E, A = SessionState, SessionEvent, SessionAction
    T = Transition
    table = {
        (S.CONNECTING, E.HELLO_ACK): T(S.READY, (A.JOIN,)),
        (S.CONNECTING, E.CONNECTION_LOST): T(S.HELLO_LOST),
        (S.CONNECTING, E.CONNECTION_UP): T(S.CONNECTING),
        (S.CONNECTING, E.WRONG_PEER): T(S.ENDED, (A.LEAVE_NOT_A_SCHEDULER,)),
        (S.CONNECTING, E.HANDSHAKE_REFUSED): T(S.ENDED, (A.LEAVE_NOT_A_SCHEDULER,)),
        (S.CONNECTING, E.REFUSED): T(S.ENDED, (A.LEAVE_REFUSED,)),
        (S.CONNECTING, E.KEYS_REFUSED): T(S.ENDED, (A.LEAVE_REFUSED,)),
        (S.CONNECTING, E.DEADLINE): T(S.ENDED, (A.LEAVE_UNANSWERED,)),
        (S.READY, E.CONNECTION_LOST): T(S.AWAY, (A.WAIT_FOR_SCHEDULER,)),
        (S.READY, E.SILENT): T(S.ENDED, (A.LEAVE_SILENT,)),
        (S.READY, E.REFUSED): T(S.ENDED, (A.LEAVE_FORGOTTEN,)),
        (S.READY, E.HELLO_ACK): T(S.READY, (A.DROP_SECOND_ACK,)),
        (S.AWAY, E.CONNECTION_UP): T(S.RESUMING, (A.HELLO_ON_RETURN,)),
        (S.RESUMING, E.HELLO_ACK): T(S.READY, (A.REJOIN,)),
        (S.RESUMING, E.CONNECTION_LOST): T(S.AWAY),  # (the deadline goes on)
        (S.RESUMING, E.WRONG_PEER): T(S.ENDED, (A.LEAVE_NOT_A_SCHEDULER,)),
    }
    for (state, event), transition in list(table.items()):  # with the Hello lost, as while connecting, but:
        if state is S.CONNECTING:
            table[(S.HELLO_LOST, event)] = transition
    # its HelloAck, read after the connection it came on closed (ZeroMQ keeps what it received): joined, and away
    table[(S.HELLO_LOST, E.HELLO_ACK)] = T(S.AWAY, (A.JOIN, A.WAIT_FOR_SCHEDULER))
    table[(S.HELLO_LOST, E.CONNECTION_LOST)] = T(S.HELLO_LOST)
    table[(S.HELLO_LOST, E.CONNECTION_UP)] = T(S.CONNECTING, (A.HELLO_AGAIN,))
    for event in (E.WRONG_PEER, E.CONNECTION_UP, E.HANDSHAKE_REFUSED):
        table[(S.READY, event)] = T(S.READY)  # a second HelloAck, or what a live connection cannot say
    table[(S.READY, E.KEYS_REFUSED)] = T(S.ENDED, (A.LEAVE_REFUSED,))
    for state in (S.AWAY, S.RESUMING):
        table[(state, E.DEADLINE)] = T(S.ENDED, (A.LEAVE_UNANSWERED,))
        table[(state, E.REFUSED)] = T(state, (A.DROP_STALE_REFUSAL,))
        table[(state, E.KEYS_REFUSED)] = T(state, (A.WAIT_OUT_REFUSAL,))
        table[(state, E.HANDSHAKE_REFUSED)] = T(state)
    for event in (E.HELLO_ACK, E.WRONG_PEER, E.CONNECTION_LOST):
        table[(S.AWAY, event)] = T(S.AWAY)  # of the lost connection
    table[(S.RESUMING, E.CONNECTION_UP)] = T(S.RESUMING)
    for state in (S.CONNECTING, S.HELLO_LOST, S.READY, S.AWAY, S.RESUMING):
        table[(state, E.SENT_AWAY)] = T(S.ENDED, (A.LEAVE_SENT_AWAY,))
    return table


# what the scheduler and the connection's monitor may say in any state (the table is checked to answer each)
_ANY_TIME = [e for e in SessionEvent if e not in (SessionEvent.DEADLINE, SessionEvent.SILENT)]
SESSION = Lifecycle("worker session", SessionState, [SessionState.ENDED], _session_table(), always_possible=_ANY_TIME)
_CONNECTION_EVENTS = {
    connection_events.UP: SessionEvent.CONNECTION_UP,
    connection_events.DOWN: SessionEvent.CONNECTION_LOST,
    connection_events.REFUSED: SessionEvent.HANDSHAKE_REFUSED,
}


class WorkerSession:
    def __init__(
        self, config: WorkerConfig, identity: WorkerIdentity, name: str, leave: Leave,
        held: Callable[[], List[m.HeldTask]] = list,
    ) -> None:  # fmt: skip
        self._config = config
        self._held = held  # what the worker holds, for a Hello said again
        self._memory_limit = config.memory_limit_bytes()  # told in each heartbeat
        self._name = name
        self._leave = leave
        self._hello = m.Hello(
            PROTOCOL_VERSION,
            m.PeerRole.WORKER,
            identity.pid,
            identity.hostname,
            m.WorkerInfo(
                slots=1,
                queue_capacity=config.queue_capacity,
                capabilities=config.capabilities,
                group_id=config.group_id.encode(),
                delegation_key=identity.delegation_key,
            ),
        )
        self.state = SessionState.CONNECTING
        self.story = 0  # its recent events (`Lifecycle.advance`), for the error of a missing transition
        self.scheduler_reads_output = False  # its protocol version knows TaskOutputBatch (from its HelloAck)
        self.tells_waits = False  # the scheduler understands WaitingTasks (nested tasks)
        self.accepted = False  # the scheduler answered on the connection that is up (a goodbye may go on it)
        self.storage_address = ""  # named by the scheduler's HelloAck
        self._storage_accepted = False
        self.storage_down = False  # its connection closed; what waits on it failed, Hello again when back
        self.max_message_size = 0  # the largest message the scheduler takes (its HelloAck, 1.8); 0: not said
        self.storage_max_message_size = 0  # the largest frame the storage server takes, likewise
        self.inline_threshold = config.task_inline_threshold  # a successful result larger goes through storage
        self._heartbeat_interval = config.heartbeat_interval_seconds
        self._last_heard = 0.0
        self._hello_deadline = math.inf
        self._next_heartbeat = math.inf
        A = SessionAction
        actions: Dict[SessionAction, Callable[[Any, float, List[Any]], None]] = {
            A.JOIN: self._join,
            A.HELLO_AGAIN: self._hello_again,
            A.DROP_SECOND_ACK: self._drop_second_ack,
            A.WAIT_FOR_SCHEDULER: self._wait_for_scheduler,
            A.HELLO_ON_RETURN: self._hello_on_return,
            A.REJOIN: self._rejoin,
            A.DROP_STALE_REFUSAL: self._drop_stale_refusal,
            A.WAIT_OUT_REFUSAL: self._wait_out_refusal,
            A.LEAVE_NOT_A_SCHEDULER: self._leave_not_a_scheduler,
            A.LEAVE_REFUSED: self._leave_refused,
            A.LEAVE_UNANSWERED: self._leave_unanswered,
            A.LEAVE_SILENT: self._leave_silent,
            A.LEAVE_FORGOTTEN: self._leave_forgotten,
            A.LEAVE_SENT_AWAY: self._leave_sent_away,
        }
        self._plans = SESSION.plans(actions.__getitem__)
        self.scheduler_handlers: Dict[type, Callable[[Any, float, List[Any]], None]] = {
            m.HelloAck: self._on_hello_ack,
            m.Refusal: self._on_refusal,
            m.DisconnectResponse: self._on_nothing_to_do,  # the answer to our own leaving
            m.DisconnectRequest: self._on_disconnect_request,
        }
        self.storage_handlers: Dict[type, Callable[[Any, List[Any]], None]] = {
            m.HelloAck: self._on_storage_hello_ack,
            m.Refusal: self._on_storage_refusal,
        }

    def _on_refusal(self, refusal: m.Refusal, now: float, out: List[Any]) -> None:
        self._step(SessionEvent.REFUSED, refusal, now, out)

    def _on_disconnect_request(self, request: m.DisconnectRequest, now: float, out: List[Any]) -> None:
        self._step(SessionEvent.SENT_AWAY, request, now, out)

    def start(self, now: float, out: List[Any]) -> None:
        config = self._config
        logger.info(
            f"{self._name}: connecting to scheduler {config.scheduler_address}, "
            f"capabilities={','.join(c.name for c in config.capabilities) or 'none'}, "
            f"queue_capacity={config.queue_capacity}, "
            f"heartbeat_interval_seconds={config.heartbeat_interval_seconds:g}, "
            f"worker_timeout_seconds={config.worker_timeout_seconds:g}, "
            f"task_inline_threshold={config.task_inline_threshold}"
        )
        out.append(SendToScheduler(self._hello))
        self._hello_deadline = now + config.worker_timeout_seconds

    def heard(self, now: float) -> None:
        """A message from the scheduler arrived (any message: it is alive)."""
        self._last_heard = now

    @property
    def connected(self) -> bool:
        """The scheduler answered the Hello (and the connection is up): tasks come, answers go."""
        return self.state is SessionState.READY

    @property
    def rejoining(self) -> bool:
        """The connection was lost after a HelloAck: the worker waits for the scheduler, holding its answers."""
        return self.state is SessionState.AWAY or self.state is SessionState.RESUMING

    @property
    def wake_time(self) -> float:
        """When `tick` has something to do."""
        return self._next_heartbeat if self.connected else self._hello_deadline

    def tick(self, now: float, out: List[Any]) -> None:
        """Heartbeat when it is time (`MeasureUsage` first); give up on a silent scheduler, or on one that did not
        answer (or come back) within the worker timeout."""
        if not self.connected:
            if now >= self._hello_deadline:
                self._hello_deadline = math.inf
                self._step(SessionEvent.DEADLINE, None, now, out)
            return
        if now < self._next_heartbeat:
            return
        silence = now - self._last_heard
        if silence > self._timeout:
            self._next_heartbeat = math.inf
            self._step(SessionEvent.SILENT, silence, now, out)
            return
        out.append(MeasureUsage())
        self._next_heartbeat = now + self._heartbeat_interval

    def on_handshake_failed(self, failed: Any, now: float, out: List[Any]) -> None:
        """The connection to the scheduler failed its handshake over keys (`HandshakeFailed`)."""
        self._step(SessionEvent.KEYS_REFUSED, failed, now, out)

    def _step(self, event: SessionEvent, detail: Any, now: float, out: List[Any]) -> None:
        """``event`` in the conversation with the scheduler: the next state and the actions, from `SESSION`."""
        SESSION.advance(self._plans, self, event, self._name, (detail, now, out))

    def heartbeat(
        self,
        usage: UsageMeasured,
        queued: int,
        running: int,
        suspended: int,
        functions: List[m.FunctionStats],
        held: Tuple[int, int, int, List[bytes]],
        runs: Tuple[m.TaskRuns, m.TaskRuns],
        memory: Tuple[int, List[m.MemoryKill]],
    ) -> SendToScheduler:
        """What a heartbeat reports: the usage the shell measured, the task counts, what ran per function, what
        the worker holds: (last TaskBatch sequence, count, digest, IDs or []), the task runs (ended, current), and
        the tasks stopped for memory (how many since the start, those since the last heartbeat)."""
        last_batch, held_tasks, held_digest, held_task_ids = held
        memory_kills, memory_killed = memory
        return SendToScheduler(
            m.WorkerHeartbeat(
                agent_cpu=usage.agent_cpu,
                agent_rss_bytes=usage.agent_rss_bytes,
                processor_cpu=usage.runner_cpu,
                processor_rss_bytes=usage.runner_rss_bytes,
                queued_tasks=queued,
                running_tasks=running,
                suspended_tasks=suspended,
                functions=functions,
                last_batch=last_batch,
                held_tasks=held_tasks,
                held_digest=held_digest,
                held_task_ids=held_task_ids,
                ended_runs=runs[0],
                current_runs=runs[1],
                memory_limit_bytes=self._memory_limit,
                memory_kills=memory_kills,
                memory_killed=memory_killed,
            )
        )

    def on_connection(self, to_storage: bool, change: str, now: float, out: List[Any]) -> None:
        """What the socket monitor of a connection saw (`connection_events`)."""
        if to_storage:
            self._on_storage_connection(change, out)
            return
        self._step(_CONNECTION_EVENTS[change], None, now, out)

    @property
    def _address(self) -> str:
        return self._config.scheduler_address

    @property
    def _timeout(self) -> float:
        return self._config.worker_timeout_seconds

    # ------------------------------------------------------------------------- the session's actions

    def _hello_again(self, detail: Any, now: float, out: List[Any]) -> None:
        out.append(SendToScheduler(self._hello))

    def _wait_for_scheduler(self, detail: Any, now: float, out: List[Any]) -> None:
        self._hello_deadline = now + self._timeout
        self._next_heartbeat = math.inf
        self.accepted = False
        logger.warning(
            f"{self._name}: lost the connection to scheduler {self._address}; this worker goes on with its tasks and "
            f"waits up to {self._timeout:g} seconds for the scheduler to be reachable again"
        )

    def _hello_on_return(self, detail: Any, now: float, out: List[Any]) -> None:
        """The Hello said again after the connection was lost: the tasks it holds, for the scheduler to take."""
        held = self._held()
        info = dataclasses.replace(self._hello.worker_info, held_tasks=held)
        logger.info(f"{self._name}: scheduler {self._address} is reachable again; saying Hello, "
                    f"holding {len(held)} task(s)")  # fmt: skip
        out.append(SendToScheduler(dataclasses.replace(self._hello, worker_info=info)))

    def _rejoin(self, ack: m.HelloAck, now: float, out: List[Any]) -> None:
        """Answered again (the same storage server serves: its connection is its own): heartbeats at once."""
        self._take_limits(ack)
        self.accepted = True
        self._hello_deadline = math.inf
        self._next_heartbeat = now
        logger.info(f"{self._name}: connected to scheduler {self._address} again")

    def _take_limits(self, ack: m.HelloAck) -> None:
        self.max_message_size = ack.max_message_size  # (a scheduler that came back may take other sizes)
        # a result sent inline must fit in a message the scheduler takes, with company
        self.inline_threshold = min(self._config.task_inline_threshold, message_budget(ack.max_message_size) // 4)

    def _leave_not_a_scheduler(self, ack: Any, now: float, out: List[Any]) -> None:
        if ack is None:  # the connection closed during its handshake
            self._leave(EXIT_REFUSED, closed_in_handshake(self._address, "a scheduler"), False)
        else:
            self._leave(EXIT_REFUSED, f"{self._address} is {role_name(ack.role)}, not a scheduler", False)

    def _leave_refused(self, refusal: Any, now: float, out: List[Any]) -> None:
        if isinstance(refusal, m.Refusal):
            why = f"refused by scheduler (protocol {show_version(refusal.version)}): {refusal.reason}"
        else:  # a handshake that failed over keys
            why = refusal.reason
        self._leave(EXIT_REFUSED, why, False)

    def _leave_unanswered(self, detail: Any, now: float, out: List[Any]) -> None:
        self._leave(EXIT_FAILURE, f"no answer from scheduler {self._address} within {self._timeout:g} seconds", True)

    def _leave_silent(self, silence: float, now: float, out: List[Any]) -> None:
        self._leave(EXIT_FAILURE, f"nothing heard from scheduler for {silence:.0f} seconds", True)

    def _leave_forgotten(self, refusal: m.Refusal, now: float, out: List[Any]) -> None:
        self._leave(EXIT_FAILURE, f"scheduler no longer knows us: {refusal.reason}", False)

    def _leave_sent_away(self, request: m.DisconnectRequest, now: float, out: List[Any]) -> None:
        self._leave(EXIT_OK, f"scheduler asked us to leave: {request.reason or 'no reason given'}", False)

    def _drop_second_ack(self, ack: m.HelloAck, now: float, out: List[Any]) -> None:
        logger.warning(f"{self._name}: dropped a second HelloAck")

    def _drop_stale_refusal(self, refusal: m.Refusal, now: float, out: List[Any]) -> None:
        logger.warning(f"{self._name}: scheduler refused a message sent before the connection closed: {refusal.reason}")

    def _wait_out_refusal(self, failed: Any, now: float, out: List[Any]) -> None:
        logger.warning(f"{self._name}: {failed.reason}; waiting for the scheduler to come back")

    # ------------------------------------------------------------------------- the scheduler

    def _on_hello_ack(self, ack: m.HelloAck, now: float, out: List[Any]) -> None:
        """A HelloAck says who answered (protocol 1.5): a storage server's port given by mistake says so."""
        scheduler = ack.role in (m.PeerRole.SCHEDULER, m.PeerRole.CLIENT)  # CLIENT: an older one, which does not say
        self._step(SessionEvent.HELLO_ACK if scheduler else SessionEvent.WRONG_PEER, ack, now, out)

    def _join(self, ack: m.HelloAck, now: float, out: List[Any]) -> None:
        """The first HelloAck: the storage server it names, the scheduler's versions and intervals, heartbeats."""
        self._take_limits(ack)
        self.accepted = True
        self.scheduler_reads_output = knows(ack.version, TASK_OUTPUT_VERSION)
        self.tells_waits = knows(ack.version, WAITING_TASKS_VERSION)  # an older scheduler drops the message
        self._hello_deadline = math.inf
        if 0 < ack.heartbeat_interval_seconds < self._heartbeat_interval:
            self._heartbeat_interval = ack.heartbeat_interval_seconds
        scheduler_address = self._address
        storage_address = ack.object_storage_address
        if not storage_address:
            storage_address = default_storage_address(scheduler_address)
            logger.warning(f"{self._name}: scheduler named no object storage server, using {storage_address}")
        self.storage_address = storage_address
        out.append(ConnectStorage(storage_address))
        out.append(SendToStorage(self._hello))
        out.append(MeasureUsage())  # the first heartbeat goes at once
        self._next_heartbeat = now + self._heartbeat_interval
        logger.info(
            f"{self._name}: connected to scheduler {scheduler_address} "
            f"(protocol {show_version(ack.version)}), object storage {storage_address}"
        )

    def _on_nothing_to_do(self, message: Any, now: float, out: List[Any]) -> None:
        pass

    # ------------------------------------------------------------------------- the storage server

    def _on_storage_hello_ack(self, ack: m.HelloAck, out: List[Any]) -> None:
        if ack.role not in (m.PeerRole.OBJECT_STORAGE, m.PeerRole.CLIENT):  # CLIENT: an older server
            what = f"is {role_name(ack.role)}, not an object storage server"
            why = f"{self.storage_address}, named by the scheduler, {what}"
            self._leave(EXIT_REFUSED, why, True)
            return
        self._storage_accepted = True
        self.storage_max_message_size = ack.max_message_size
        logger.debug(f"{self._name}: object storage {self.storage_address} accepted us")

    def _on_storage_connection(self, change: str, out: List[Any]) -> None:
        address = self.storage_address
        if change == connection_events.UP:
            if self.storage_down:
                self.storage_down = False
                logger.info(f"{self._name}: connected to object storage {address} again")
                out.append(SendToStorage(self._hello))
        elif change == connection_events.REFUSED:
            why = closed_in_handshake(f"{address}, named by the scheduler,", "an object storage server")
            self._leave(EXIT_REFUSED, why, True)
        else:
            self.storage_down = True
            logger.warning(f"{self._name}: lost the connection to object storage {address}")

    def _on_storage_refusal(self, refusal: m.Refusal, out: List[Any]) -> None:
        if not self._storage_accepted:  # our Hello itself was refused: an incompatible server
            self._leave(EXIT_REFUSED, f"refused by object storage {self.storage_address}: {refusal.reason}", True)
            return
        # one of our requests was refused (its tasks fail when it times out), or the server restarted and
        # forgot us: saying Hello again costs nothing and covers the second case
        logger.warning(f"{self._name}: object storage {self.storage_address} refused a message: {refusal.reason}")
        out.append(SendToStorage(self._hello))
