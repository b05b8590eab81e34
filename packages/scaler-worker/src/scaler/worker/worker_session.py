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
scheduler, which sees the same close, has forgotten this worker and queued its tasks again. The worker then
waits up to the worker timeout for the connection to come back (a partition that heals, a scheduler
restarted on its address): it says Hello again when it is back and goes on as a new worker of that
scheduler, or exits (1) past the timeout, and `scaler_cluster` replaces it. Meanwhile it sends the
scheduler nothing (the core drops its answers: they answer tasks the scheduler gave to others) and takes a
`Refusal` for the refusal of something sent before the connection closed; what it still holds when it is
back is settled by its heartbeats (the scheduler cancels here what it no longer gave this worker). A
scheduler silent for longer than the worker timeout counts as gone too (1). A scheduler that refuses us
after its `HelloAck` restarted and forgot us: exit (1) too. A `DisconnectRequest` from the scheduler, or a
stop signal, ends the worker (0); leaving on our own, the worker first says `DisconnectRequest`, so that its
tasks go elsewhere at once rather than after the scheduler's timeout. Before the `HelloAck`, a dropped
connection is waited out: the Hello is said again when it is back.

The storage server: when its connection closes, what waits on it fails at once and what is asked meanwhile
waits (the core), and the worker says Hello again when the connection is back (a restarted server knows
nobody).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Dict, List, Tuple

from scaler.protocol import connection_events
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_storage_address
from scaler.protocol.connection_events import closed_in_handshake, role_name
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


class WorkerSession:
    def __init__(self, config: WorkerConfig, identity: WorkerIdentity, name: str, leave: Leave) -> None:
        self._config = config
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
        self.connected = False  # the scheduler's HelloAck came
        self.scheduler_reads_output = False  # its protocol version knows TaskOutputBatch (from its HelloAck)
        self.tells_waits = False  # the scheduler understands WaitingTasks (nested tasks)
        self._hello_lost = False  # the connection dropped before the HelloAck: say Hello again when it is back
        self.rejoining = False  # the connection dropped after a HelloAck: waiting for it, then Hello again
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
    def wake_time(self) -> float:
        """When `tick` has something to do."""
        return self._next_heartbeat if self.connected else self._hello_deadline

    def tick(self, now: float, out: List[Any]) -> None:
        """Heartbeat when it is time (`MeasureUsage` first); give up on a silent scheduler."""
        config = self._config
        if not self.connected:
            if now >= self._hello_deadline:
                self._hello_deadline = math.inf
                silent = f"within {config.worker_timeout_seconds:g} seconds"
                self._leave(EXIT_FAILURE, f"no answer from scheduler {config.scheduler_address} {silent}", True)
            return
        if now < self._next_heartbeat:
            return
        silence = now - self._last_heard
        if silence > config.worker_timeout_seconds:
            self._next_heartbeat = math.inf
            self._leave(EXIT_FAILURE, f"nothing heard from scheduler for {silence:.0f} seconds", True)
            return
        out.append(MeasureUsage())
        self._next_heartbeat = now + self._heartbeat_interval

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
        address = self._config.scheduler_address
        if change == connection_events.UP:
            if self._hello_lost:
                self._hello_lost = False
                out.append(SendToScheduler(self._hello))
        elif change == connection_events.REFUSED:
            if not self.connected:
                self._leave(EXIT_REFUSED, closed_in_handshake(address, "a scheduler"), False)
        elif self.connected:
            self.connected = False
            self.rejoining = self._hello_lost = True
            timeout = self._config.worker_timeout_seconds
            self._hello_deadline = now + timeout
            logger.warning(
                f"{self._name}: lost the connection to scheduler {address}; its tasks run elsewhere now, and this "
                f"worker waits up to {timeout:g} seconds for the scheduler to be reachable again"
            )
        else:
            self._hello_lost = True

    # ------------------------------------------------------------------------- the scheduler

    def _on_hello_ack(self, ack: m.HelloAck, now: float, out: List[Any]) -> None:
        if self.connected:
            logger.warning(f"{self._name}: dropped a second HelloAck from scheduler")
            return
        if ack.role not in (m.PeerRole.SCHEDULER, m.PeerRole.CLIENT):  # CLIENT: an older scheduler, which does not say
            address = self._config.scheduler_address
            self._leave(EXIT_REFUSED, f"{address} is {role_name(ack.role)}, not a scheduler", False)
            return
        self.connected = True
        self.max_message_size = ack.max_message_size  # (a scheduler that came back may take other sizes)
        # a result sent inline must fit in a message the scheduler takes, with company
        self.inline_threshold = min(self._config.task_inline_threshold, message_budget(ack.max_message_size) // 4)
        if self.rejoining:  # the same storage server still serves us: its connection is its own
            self.rejoining = False
            self._hello_deadline = math.inf
            self._next_heartbeat = now
            logger.info(f"{self._name}: connected to scheduler {self._config.scheduler_address} again")
            return
        self.scheduler_reads_output = knows(ack.version, TASK_OUTPUT_VERSION)
        self.tells_waits = knows(ack.version, WAITING_TASKS_VERSION)  # an older scheduler drops the message
        self._hello_deadline = math.inf
        if 0 < ack.heartbeat_interval_seconds < self._heartbeat_interval:
            self._heartbeat_interval = ack.heartbeat_interval_seconds
        scheduler_address = self._config.scheduler_address
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

    def _on_refusal(self, refusal: m.Refusal, now: float, out: List[Any]) -> None:
        if self.rejoining:  # of a message sent before the connection closed: the Hello after it is answered
            logger.warning(f"{self._name}: scheduler refused a message sent before the connection closed: "
                           f"{refusal.reason}")  # fmt: skip
            return
        if self.connected:  # it accepted us before: it restarted and forgot us; a new worker will say Hello
            self._leave(EXIT_FAILURE, f"scheduler no longer knows us: {refusal.reason}", False)
            return
        self._leave(
            EXIT_REFUSED, f"refused by scheduler (protocol {show_version(refusal.version)}): {refusal.reason}", False
        )

    def _on_nothing_to_do(self, message: Any, now: float, out: List[Any]) -> None:
        pass

    def _on_disconnect_request(self, request: m.DisconnectRequest, now: float, out: List[Any]) -> None:
        self._leave(EXIT_OK, f"scheduler asked us to leave: {request.reason or 'no reason given'}", False)

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
