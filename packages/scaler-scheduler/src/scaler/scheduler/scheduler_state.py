"""The scheduler's decisions, without I/O.

`SchedulerCore.handle(source, message, now)` and `SchedulerCore.tick(now)`
return effects (`Send`, `Shutdown`) that the shell in `server.py` carries out
afterwards, so no decision is ever interrupted by an ``await`` and the whole
core is tested without sockets. ``source`` and ``Send.to`` are ZeroMQ
identities; `STORAGE` stands for the object storage server.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Set, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.protocol.version import PROTOCOL_VERSION, incompatibility
from scaler.scheduler.graph_tasks import DEFAULT_INLINE_BUDGET, GraphActions, GraphTasks
from scaler.scheduler.task_state_machine import TERMINAL_STATES, TRANSITIONS, TaskEvent, TaskState, next_state

STORAGE = b""
DEFAULT_QUEUE_CAPACITY = 1000
_HISTORY_LENGTH = 8

logger = logging.getLogger(__name__)


class Send(NamedTuple):
    to: bytes
    message: Any


class Shutdown(NamedTuple):
    reason: str


Effect = Any  # Send | Shutdown


@dataclass
class SchedulerSettings:
    object_storage_address: str = ""
    heartbeat_interval_seconds: float = 2.0
    client_timeout_seconds: float = 60.0
    worker_timeout_seconds: float = 60.0
    protected: bool = False
    allocate_policy: str = "even"  # or "capability": tasks go only to workers with the capabilities they need
    max_task_deaths: int = 3  # a task whose processor or worker died this many times fails
    graph_sorter: str = "auto"  # graph bookkeeping: "graphblas", "python", or "auto" (GraphBLAS if installed)
    graph_inline_bytes: int = DEFAULT_INLINE_BUDGET  # small graph results held here for dependants; 0: all in storage


class _TaskRecord:
    __slots__ = (
        "task", "state", "worker_id", "history", "queue_seq", "client_awaits_cancel", "needs", "deaths", "failures"
    )  # fmt: skip

    def __init__(self, task: m.Task, needs: Optional[FrozenSet[str]]) -> None:
        self.task = task
        self.state = TaskState.QUEUED
        self.worker_id: Optional[bytes] = None
        self.history: List[TaskEvent] = []
        self.queue_seq = 0
        self.client_awaits_cancel = False
        self.needs = needs  # capability names a worker must have, or None
        self.deaths = 0  # times its processor or worker died while holding it
        self.failures = 0  # times it raised and was retried


class _Worker:
    __slots__ = (
        "worker_id", "info", "hostname", "pid", "tasks", "last_seen", "heartbeat", "capacity", "capabilities",
        "balance_pending",
    )  # fmt: skip

    def __init__(self, worker_id: bytes, hello: m.Hello, now: float) -> None:
        self.worker_id = worker_id
        self.info = hello.worker_info
        self.hostname = hello.hostname
        self.pid = hello.pid
        self.tasks: Dict[bytes, None] = {}
        self.last_seen = now
        self.heartbeat = m.WorkerHeartbeat()
        self.capacity = max(1, hello.worker_info.queue_capacity or DEFAULT_QUEUE_CAPACITY)
        self.capabilities = frozenset(c.name for c in hello.worker_info.capabilities)
        self.balance_pending = False  # a BalanceRequest awaits its BalanceResponse


class _Client:
    __slots__ = ("client_id", "tasks", "last_seen", "heartbeat")

    def __init__(self, client_id: bytes, now: float) -> None:
        self.client_id = client_id
        self.tasks: Set[bytes] = set()
        self.last_seen = now
        self.heartbeat = m.ClientHeartbeat()  # the last one, for monitors


class SchedulerCore:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self._tasks: Dict[bytes, _TaskRecord] = {}
        self._workers: Dict[bytes, _Worker] = {}
        self._clients: Dict[bytes, _Client] = {}
        self._queue: List[Tuple[int, int, bytes]] = []  # (-priority, seq, task_id), lazily pruned
        self._capability_queues: Dict[FrozenSet[str], List[Tuple[int, int, bytes]]] = {}
        self._deadlines: List[Tuple[float, bytes]] = []  # (deadline, task_id) of tasks with a timeout
        self._seq = itertools.count()
        self.state_counts: Counter = Counter()
        self.dropped_results = 0
        self._handlers: Dict[type, Callable[[bytes, Any, float, List[Effect]], None]] = {
            m.ClientHeartbeat: self._on_client_heartbeat,
            m.TaskBatch: self._on_task_batch,
            m.TaskCancel: self._on_cancel_request,
            m.GraphTask: self._on_graph_task,
            m.ObjectInstruction: self._on_object_instruction,
            m.ClientShutdownRequest: self._on_shutdown_request,
            m.WorkerHeartbeat: self._on_worker_heartbeat,
            m.TaskResultBatch: self._on_results,
            m.TaskCancelConfirm: self._on_cancel_confirm,
            m.BalanceResponse: self._on_balance_response,
            m.DisconnectRequest: self._on_disconnect,
        }
        self._client_messages = {
            m.ClientHeartbeat, m.TaskBatch, m.TaskCancel, m.GraphTask, m.ObjectInstruction,
            m.ClientShutdownRequest, m.DisconnectRequest,
        }  # fmt: skip
        self._worker_messages = {
            m.WorkerHeartbeat, m.TaskResultBatch, m.TaskCancelConfirm, m.BalanceResponse, m.DisconnectRequest
        }  # fmt: skip
        sorter = {"auto": None, "graphblas": True, "python": False}[settings.graph_sorter]
        self._graphs = GraphTasks(sorter, settings.graph_inline_bytes)
        self._graph_sends: List[Effect] = []  # what the graph layer sends clients, after the interception

    # ----------------------------------------------------------------- entry points

    def handle(self, source: bytes, message: Any, now: float) -> List[Effect]:
        out: List[Effect] = []
        kind = type(message)
        if kind is m.Hello:
            self._on_hello(source, message, now, out)
            self._graph_effects(out, now)
            return out
        client = self._clients.get(source)
        worker = self._workers.get(source) if client is None else None
        if client is None and worker is None:
            out.append(Send(source, m.Refusal(PROTOCOL_VERSION, f"send Hello first (got {kind.__name__})")))
            return out
        allowed = self._client_messages if client is not None else self._worker_messages
        if kind not in allowed:
            role = "client" if client is not None else "worker"
            logger.warning(f"Scheduler: dropped {kind.__name__} from {role} {show(source)}: not a {role} message")
            return out
        (client or worker).last_seen = now  # type: ignore[union-attr]
        self._handlers[kind](source, message, now, out)
        self._graph_effects(out, now)
        return out

    def tick(self, now: float) -> List[Effect]:
        """Forget silent peers, reject tasks past their timeout, balance queued tasks onto idle workers."""
        out: List[Effect] = []
        for worker in list(self._workers.values()):
            if now - worker.last_seen > self.settings.worker_timeout_seconds:
                logger.warning(f"Scheduler: worker {show(worker.worker_id)} timed out")
                self._remove_worker(worker, out)
        for client in list(self._clients.values()):
            if now - client.last_seen > self.settings.client_timeout_seconds:
                logger.warning(f"Scheduler: client {show(client.client_id)} timed out")
                self._remove_client(client, out, forget=True)
        self._expire(now, out)
        self._dispatch(out)
        self._balance(out)
        self._graph_effects(out, now)
        return out

    # ----------------------------------------------------------------- peers

    def _on_hello(self, source: bytes, hello: m.Hello, now: float, out: List[Effect]) -> None:
        reason = incompatibility(hello.version)
        if reason is not None:
            logger.warning(f"Scheduler: refused {show(source)}: {reason}")
            out.append(Send(source, m.Refusal(PROTOCOL_VERSION, reason)))
            return
        if hello.role == m.PeerRole.WORKER:
            old = self._workers.get(source)
            if old is not None:
                self._remove_worker(old, out)
            self._workers[source] = _Worker(source, hello, now)
            capabilities = ",".join(c.name for c in hello.worker_info.capabilities) or "none"
            logger.info(f"Scheduler: worker {show(source)} connected, capabilities={capabilities}")
        elif hello.role == m.PeerRole.CLIENT:
            if source not in self._clients:
                self._clients[source] = _Client(source, now)
                logger.info(f"Scheduler: client {show(source)} connected")
        else:
            out.append(Send(source, m.Refusal(PROTOCOL_VERSION, f"role {hello.role.name} cannot connect here")))
            return
        timeout = self.settings.worker_timeout_seconds
        if hello.role == m.PeerRole.CLIENT:
            timeout = self.settings.client_timeout_seconds
        out.append(
            Send(
                source,
                m.HelloAck(
                    PROTOCOL_VERSION,
                    self.settings.object_storage_address,
                    self.settings.heartbeat_interval_seconds,
                    timeout,
                ),
            )
        )
        self._dispatch(out)

    def _on_client_heartbeat(self, source: bytes, message: m.ClientHeartbeat, now: float, out: List[Effect]) -> None:
        self._clients[source].heartbeat = message
        out.append(Send(source, m.ClientHeartbeatEcho()))

    def _on_worker_heartbeat(self, source: bytes, message: m.WorkerHeartbeat, now: float, out: List[Effect]) -> None:
        self._workers[source].heartbeat = message
        out.append(Send(source, m.WorkerHeartbeatEcho()))

    def _on_disconnect(self, source: bytes, message: m.DisconnectRequest, now: float, out: List[Effect]) -> None:
        client = self._clients.get(source)
        if client is not None:
            logger.info(f"Scheduler: client {show(source)} disconnected")
            self._remove_client(client, out, forget=True)
        else:
            logger.info(f"Scheduler: worker {show(source)} disconnected: {message.reason or 'no reason given'}")
            self._remove_worker(self._workers[source], out)
        out.append(Send(source, m.DisconnectResponse()))
        self._dispatch(out)

    def _on_shutdown_request(self, source: bytes, message: Any, now: float, out: List[Effect]) -> None:
        if self.settings.protected:
            reason = "the scheduler is protected (--protected): it refuses shutdown requests from clients"
            logger.warning(f"Scheduler: refused shutdown request from client {show(source)}")
            out.append(Send(source, m.ClientShutdownResponse(False, reason)))
            return
        logger.info(f"Scheduler: shutdown requested by client {show(source)}")
        out.append(Send(source, m.ClientShutdownResponse(True, "")))
        for worker_id in self._workers:
            out.append(Send(worker_id, m.DisconnectRequest("scheduler shutting down")))
        out.append(Shutdown(f"requested by client {show(source)}"))

    def _remove_worker(self, worker: _Worker, out: List[Effect]) -> None:
        del self._workers[worker.worker_id]
        confirms: Dict[bytes, List[bytes]] = defaultdict(list)
        requeued = 0
        for task_id in worker.tasks:
            record = self._tasks[task_id]
            record.worker_id = None
            self._transition(record, TaskEvent.WORKER_GONE)
            if record.state is TaskState.QUEUED:
                self._enqueue(record)
                requeued += 1
            else:
                self._finish(record)
                if record.client_awaits_cancel:
                    confirms[record.task.client_id].append(task_id)
        for client_id, task_ids in confirms.items():
            out.append(Send(client_id, m.TaskCancelConfirm(task_ids, [True] * len(task_ids))))
        if requeued:
            logger.warning(f"Scheduler: {requeued} task(s) of worker {show(worker.worker_id)} will run elsewhere")

    def _remove_client(self, client: _Client, out: List[Effect], forget: bool) -> None:
        if forget:
            del self._clients[client.client_id]
        self._graphs.forget_client(client.client_id)
        cancels: Dict[bytes, List[bytes]] = defaultdict(list)
        for task_id in list(client.tasks):
            record = self._tasks[task_id]
            record.client_awaits_cancel = False
            if record.state is TaskState.CANCELING:
                continue
            worker_id = record.worker_id
            self._transition(record, TaskEvent.CANCEL)
            if record.state is TaskState.CANCELING:
                cancels[worker_id].append(task_id)  # type: ignore[index]
            else:
                self._finish(record)
        for worker_id, task_ids in cancels.items():
            out.append(Send(worker_id, m.TaskCancel(task_ids)))
        out.append(Send(STORAGE, m.ObjectRequest(0, m.ObjectRequestKind.CLEAR_OWNER, client.client_id, [])))

    # ----------------------------------------------------------------- tasks

    def _on_task_batch(self, source: bytes, message: m.TaskBatch, now: float, out: List[Effect]) -> None:
        client = self._clients[source]
        duplicates = []
        for task in message.tasks:
            if task.task_id in self._tasks:
                duplicates.append(task.task_id)
                continue
            task.client_id = source
            needs = None
            if task.capabilities and self.settings.allocate_policy == "capability":
                needs = frozenset(c.name for c in task.capabilities)
            record = _TaskRecord(task, needs)
            self._tasks[task.task_id] = record
            self.state_counts[TaskState.QUEUED] += 1
            client.tasks.add(task.task_id)
            self._enqueue(record)
            if task.timeout_seconds > 0:
                heapq.heappush(self._deadlines, (now + task.timeout_seconds, task.task_id))
        if duplicates:
            logger.warning(f"Scheduler: client {show(source)} resubmitted {len(duplicates)} known task ID(s), ignored")
        self._dispatch(out)

    def _on_results(self, source: bytes, message: m.TaskResultBatch, now: float, out: List[Effect]) -> None:
        per_client: Dict[bytes, List[m.TaskResult]] = defaultdict(list)
        refused: Dict[bytes, List[bytes]] = defaultdict(list)
        for result in message.results:
            record = self._tasks.get(result.task_id)
            if record is None or record.worker_id != source or record.task.attempt != result.attempt:
                self.dropped_results += 1
                logger.debug(f"Scheduler: dropped stale result for task {result.task_id.hex()} from {show(source)}")
                continue
            if result.status == m.TaskStatus.SUCCESS:
                event = TaskEvent.RESULT_SUCCESS
            elif result.status in (m.TaskStatus.FAILED, m.TaskStatus.WORKER_DIED, m.TaskStatus.REJECTED):
                event = TaskEvent.RESULT_FAILED
                if self._retry_after_failure(record, result):
                    continue
            else:
                logger.warning(f"Scheduler: dropped result with status {result.status.name} from {show(source)}")
                continue
            self._transition(record, event)
            self._finish(record)
            client_id = record.task.client_id
            if client_id in self._clients:
                per_client[client_id].append(result)
                if record.client_awaits_cancel:
                    refused[client_id].append(result.task_id)
        for client_id, results in per_client.items():
            out.append(Send(client_id, m.TaskResultBatch(results)))
        for client_id, task_ids in refused.items():
            out.append(Send(client_id, m.TaskCancelConfirm(task_ids, [False] * len(task_ids))))
        self._dispatch(out)

    def _retry_after_failure(self, record: _TaskRecord, result: m.TaskResult) -> bool:
        """Queue a failed task again if it has runs left; otherwise say in the result why it stops here."""
        if record.state is not TaskState.ASSIGNED:
            return False
        if result.status == m.TaskStatus.WORKER_DIED:
            record.deaths += 1
            if record.deaths >= self.settings.max_task_deaths:
                result.error_text = f"the task killed its worker {record.deaths} times; last: {result.error_text}"
                return False
        elif result.status == m.TaskStatus.FAILED and record.failures < record.task.retries:
            record.failures += 1
        else:
            return False
        self._workers[record.worker_id].tasks.pop(record.task.task_id, None)  # type: ignore[index]
        record.worker_id = None
        self._transition(record, TaskEvent.RETRY)
        self._enqueue(record)
        return True

    def _on_client_cancel(self, source: bytes, message: m.TaskCancel, now: float, out: List[Effect]) -> None:
        confirmed: List[bytes] = []
        cancelled: List[bool] = []
        to_workers: Dict[bytes, List[bytes]] = defaultdict(list)
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is None or record.task.client_id != source:
                confirmed.append(task_id)
                cancelled.append(False)
                continue
            record.client_awaits_cancel = True
            if record.state is TaskState.CANCELING:
                continue
            worker_id = record.worker_id
            self._transition(record, TaskEvent.CANCEL)
            if record.state is TaskState.CANCELING:
                to_workers[worker_id].append(task_id)  # type: ignore[index]
            else:
                self._finish(record)
                confirmed.append(task_id)
                cancelled.append(True)
        if confirmed:
            out.append(Send(source, m.TaskCancelConfirm(confirmed, cancelled)))
        for worker_id, task_ids in to_workers.items():
            out.append(Send(worker_id, m.TaskCancel(task_ids)))

    def _on_cancel_confirm(self, source: bytes, message: m.TaskCancelConfirm, now: float, out: List[Effect]) -> None:
        per_client: Dict[bytes, List[bytes]] = defaultdict(list)
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is None or record.worker_id != source or record.state is not TaskState.CANCELING:
                continue
            # the worker no longer knowing the task also means it is not running there
            self._transition(record, TaskEvent.CANCEL_CONFIRMED)
            self._finish(record)
            if record.client_awaits_cancel and record.task.client_id in self._clients:
                per_client[record.task.client_id].append(task_id)
        for client_id, task_ids in per_client.items():
            out.append(Send(client_id, m.TaskCancelConfirm(task_ids, [True] * len(task_ids))))
        self._dispatch(out)

    def _on_balance_response(self, source: bytes, message: m.BalanceResponse, now: float, out: List[Effect]) -> None:
        for task_id in message.task_ids:
            record = self._tasks.get(task_id)
            if record is None or record.worker_id != source:
                continue
            del self._workers[source].tasks[task_id]
            record.worker_id = None
            self._transition(record, TaskEvent.BALANCED)
            if record.state is TaskState.QUEUED:
                self._enqueue(record)
            else:
                self._finish(record)
                if record.client_awaits_cancel and record.task.client_id in self._clients:
                    out.append(Send(record.task.client_id, m.TaskCancelConfirm([task_id], [True])))
        self._workers[source].balance_pending = False
        self._dispatch(out)

    def _on_object_instruction(self, source: bytes, message: m.ObjectInstruction, now: float, out: List[Effect]):
        if message.kind == m.ObjectInstructionKind.CLEAR:
            self._remove_client(self._clients[source], out, forget=False)
        elif message.kind == m.ObjectInstructionKind.DELETE:
            out.append(Send(STORAGE, m.ObjectRequest(0, m.ObjectRequestKind.DELETE, source, message.object_ids)))

    # ----------------------------------------------------------------- bookkeeping

    def _transition(self, record: _TaskRecord, event: TaskEvent) -> None:
        old = record.state
        new = TRANSITIONS.get((old, event))
        if new is None:
            new = next_state(old, event, record.task.task_id, record.history)  # raises, naming the recent events
        record.state = new
        history = record.history
        history.append(event)
        if len(history) > _HISTORY_LENGTH:
            del history[0]
        counts = self.state_counts
        counts[old] -= 1
        counts[new] += 1

    def _enqueue(self, record: _TaskRecord) -> None:
        record.queue_seq = seq = next(self._seq)
        queue = self._queue
        if record.needs is not None:
            queue = self._capability_queues.setdefault(record.needs, [])
        heapq.heappush(queue, (-record.task.priority, seq, record.task.task_id))

    def _finish(self, record: _TaskRecord) -> None:
        """Forget a task that reached its terminal state."""
        assert record.state in TERMINAL_STATES
        task_id = record.task.task_id
        del self._tasks[task_id]
        client = self._clients.get(record.task.client_id)
        if client is not None:
            client.tasks.discard(task_id)
        if record.worker_id is not None:
            worker = self._workers.get(record.worker_id)
            if worker is not None:
                worker.tasks.pop(task_id, None)

    def _dispatch(self, out: List[Effect]) -> None:
        """Send queued tasks to the least loaded workers that have room (and the capabilities they need)."""
        if not self._workers:
            return
        batches: Dict[bytes, List[m.Task]] = defaultdict(list)
        for needs, queue in list(self._capability_queues.items()):
            # tasks that need capabilities go first: fewer workers can take them
            capable = [w for w in self._workers.values() if needs <= w.capabilities]
            self._assign(queue, capable, batches)
            if not queue:
                del self._capability_queues[needs]
        if self._queue:
            self._assign(self._queue, self._workers.values(), batches)
        for worker_id, batch in batches.items():
            out.append(Send(worker_id, m.TaskBatch(batch)))

    def _assign(self, queue: List[Tuple[int, int, bytes]], workers: Iterable[_Worker], batches: Dict) -> None:
        room = [(len(w.tasks), index, w) for index, w in enumerate(workers) if len(w.tasks) < w.capacity]
        heapq.heapify(room)
        tasks = self._tasks
        while queue and room:
            _, seq, task_id = heapq.heappop(queue)
            record = tasks.get(task_id)
            if record is None or record.queue_seq != seq or record.state is not TaskState.QUEUED:
                continue
            load, index, worker = room[0]
            self._transition(record, TaskEvent.ASSIGN)
            record.worker_id = worker.worker_id
            record.task.attempt += 1
            worker.tasks[task_id] = None
            batches[worker.worker_id].append(record.task)
            if load + 1 < worker.capacity:
                heapq.heapreplace(room, (load + 1, index, worker))
            else:
                heapq.heappop(room)

    def _balance(self, out: List[Effect]) -> None:
        """Ask busy workers to give back queued tasks when another worker is idle and nothing waits here."""
        if len(self._workers) < 2 or self._queue:
            return
        workers = self._workers.values()
        if not any(len(w.tasks) == 0 for w in workers):
            return
        mean = sum(len(w.tasks) for w in workers) / len(self._workers)
        for worker in workers:
            excess = len(worker.tasks) - math.ceil(mean)
            if excess >= 1 and len(worker.tasks) >= 2 and not worker.balance_pending:
                worker.balance_pending = True
                out.append(Send(worker.worker_id, m.BalanceRequest(excess)))

    def _expire(self, now: float, out: List[Effect]) -> None:
        """Reject queued tasks whose timeout passed before any worker took them."""
        rejected: Dict[bytes, List[m.TaskResult]] = defaultdict(list)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, task_id = heapq.heappop(self._deadlines)
            record = self._tasks.get(task_id)
            if record is None or record.state is not TaskState.QUEUED:
                continue  # done, or running: its worker enforces the timeout
            self._transition(record, TaskEvent.REJECT)
            self._finish(record)
            if record.needs:
                reason = f"no worker with capabilities {','.join(sorted(record.needs))} took the task"
            else:
                reason = "no worker took the task"
            reason += f" within its timeout of {record.task.timeout_seconds:g}s"
            result = m.TaskResult(task_id, record.task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", reason)
            rejected[record.task.client_id].append(result)
        for client_id, results in rejected.items():
            if client_id in self._clients:
                out.append(Send(client_id, m.TaskResultBatch(results)))

    # ----------------------------------------------------------------- graphs (decided in graph_tasks.py)

    def _on_graph_task(self, source: bytes, message: m.GraphTask, now: float, out: List[Effect]) -> None:
        self._apply_graph(source, self._graphs.submit(source, message, self._tasks.__contains__), now, out)

    def _on_cancel_request(self, source: bytes, message: m.TaskCancel, now: float, out: List[Effect]) -> None:
        """A client's TaskCancel: the graph layer answers for graph nodes, the rest is cancelled as usual."""
        if self._graphs.active:
            others, actions = self._graphs.cancel(source, message.task_ids)
            self._apply_graph(source, actions, now, out)
            if not others:
                return
            message = m.TaskCancel(others)
        self._on_client_cancel(source, message, now, out)

    def _apply_graph(self, client_id: bytes, actions: GraphActions, now: float, out: List[Effect]) -> None:
        if actions.deletes:
            out.append(Send(STORAGE, m.ObjectRequest(0, m.ObjectRequestKind.DELETE, client_id, actions.deletes)))
        if actions.cancel:  # its confirms come back through _graph_effects, which swallows them
            self._on_client_cancel(client_id, m.TaskCancel(actions.cancel), now, out)
        if actions.release:  # released nodes are queued exactly as if the client had sent them
            self._on_task_batch(client_id, m.TaskBatch(actions.release), now, out)
        if actions.results:
            self._graph_sends.append(Send(client_id, m.TaskResultBatch(actions.results)))
        if actions.confirm_ids:
            self._graph_sends.append(Send(client_id, m.TaskCancelConfirm(actions.confirm_ids, actions.confirm_flags)))

    def _graph_effects(self, out: List[Effect], now: float) -> None:
        """Hand the results and cancel confirms of graph nodes to the graph layer before they reach a client.

        What the graph layer then decides may produce more such effects (released
        nodes are dispatched, cancels confirmed at once): they are appended to
        ``out`` and examined in turn. What the graph layer sends goes last.
        """
        if not self._graphs.active and not self._graph_sends:
            return
        graphs = self._graphs
        emptied = False
        position = 0
        while position < len(out):
            effect = out[position]
            position += 1
            if type(effect) is not Send or effect.to not in self._clients:
                continue
            message = effect.message
            if type(message) is m.TaskResultBatch:
                message.results, actions = graphs.on_results(effect.to, message.results)
                emptied = emptied or not message.results
                self._apply_graph(effect.to, actions, now, out)
            elif type(message) is m.TaskCancelConfirm:
                message.task_ids, message.cancelled = graphs.on_confirms(effect.to, message.task_ids, message.cancelled)
                emptied = emptied or not message.task_ids
        if emptied:
            out[:] = [effect for effect in out if not _emptied(effect)]
        out.extend(self._graph_sends)
        self._graph_sends = []

    # ----------------------------------------------------------------- monitor

    def snapshot(self, now: float) -> m.StateSnapshot:
        workers = [
            m.WorkerSnapshot(
                worker_id=w.worker_id,
                heartbeat=w.heartbeat,
                slots=w.info.slots,
                assigned_tasks=len(w.tasks),
                capabilities=list(w.info.capabilities),
                last_seen_seconds_ago=now - w.last_seen,
            )
            for w in self._workers.values()
        ]
        clients = [
            m.ClientSnapshot(c.client_id, c.heartbeat, len(c.tasks), now - c.last_seen) for c in self._clients.values()
        ]
        states = [m.Counter(state.value, max(0, self.state_counts[state])) for state in TaskState]
        return m.StateSnapshot(
            task_states=states, workers=workers, clients=len(self._clients), client_snapshots=clients
        )

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    @property
    def graphs(self) -> GraphTasks:
        return self._graphs

    @property
    def worker_ids(self) -> List[bytes]:
        return list(self._workers)

    @property
    def client_ids(self) -> List[bytes]:
        return list(self._clients)


def _emptied(effect: Effect) -> bool:
    """A result batch or cancel confirm whose every entry the graph layer took."""
    if type(effect) is not Send:
        return False
    message = effect.message
    if type(message) is m.TaskResultBatch:
        return not message.results
    if type(message) is m.TaskCancelConfirm:
        return not message.task_ids
    return False
