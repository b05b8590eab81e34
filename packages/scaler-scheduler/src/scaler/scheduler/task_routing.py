"""The scheduler's tasks: what it holds of each, where each goes, and every change of a task's state.

`TaskRouting` keeps a record per task the scheduler holds, the queue of tasks waiting for a worker (a
priority heap, and one per set of capabilities under the capability policy) and the queue timeouts. Every
event a task receives goes through `_step`, which looks the pair up in `task_lifecycle.TASK_LIFECYCLE` and
carries out the actions of the answer; what is sent is gathered in the event's `Outbox`.

The handlers take one message (a batch of tasks, results, cancels, confirms...) from one peer; the
scheduler core calls them through its dispatch table. `dispatch` runs after every event the core handles:
it hands queued tasks to the least loaded workers with room, when something changed since. A worker's load
is the tasks it holds less those that wait for tasks they submitted (`WaitingTasks`): a waiting task holds
no room, so a worker whose every task waits takes more, and nested tasks never deadlock (docs/scheduling.md).

Nothing here looks at every worker or every task for one event: the workers are filed by load
(`worker_loads.WorkerLoads`), the queue and the queue timeouts are heaps, and what each worker holds is kept
with its digest, so a heartbeat is checked against the few tasks sent since its last batch (`reconcile`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import Counter
from typing import Any, Callable, Container, Dict, FrozenSet, Iterable, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.ids import show
from scaler.protocol.security import RefusalLog
from scaler.scheduler.monitor_events import MonitorEvents
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client, Worker
from scaler.scheduler.scheduler_events import Send
from scaler.scheduler.task_lifecycle import TASK_LIFECYCLE, TaskAction, TaskEvent, TaskState
from scaler.scheduler.task_record import EVENT_CODES, HISTORY_MASK, TaskRecord, story
from scaler.scheduler.worker_loads import WorkerLoads

MAX_RUN = 128  # tasks given at once to the least loaded worker, while each worker's share is that large
DEFAULT_MAX_CLIENT_TASKS = 100_000  # tasks of its own batches a client may have queued here (--max-client-tasks)
_SUCCESS = m.TaskStatus.SUCCESS
_FAILURES = (m.TaskStatus.FAILED, m.TaskStatus.WORKER_DIED, m.TaskStatus.REJECTED)
_QUEUED = TaskState.QUEUED

logger = logging.getLogger(__name__)


_Action = Callable[[TaskRecord, Outbox, Any], None]


class TaskRouting:
    def __init__(
        self,
        workers: Dict[bytes, Worker],
        clients: Dict[bytes, Client],
        capability_policy: bool,
        max_task_deaths: int,
        max_client_tasks: int = DEFAULT_MAX_CLIENT_TASKS,
        graph_nodes: Container[bytes] = frozenset(),
    ) -> None:
        self._workers = workers  # shared with the core, which adds and removes peers
        self._max_client_tasks = max_client_tasks
        self._over_quota = RefusalLog()  # what is refused over a quota is logged rate-limited, per client
        self._graph_nodes = graph_nodes  # the IDs of the nodes of live graphs (graph_tasks.GraphTasks.nodes)
        self._loads = WorkerLoads()
        self._clients = clients
        self._capability_policy = capability_policy
        self._max_task_deaths = max_task_deaths
        self._tasks: Dict[bytes, TaskRecord] = {}
        self._queue: List[Tuple[int, int, bytes]] = []  # (-priority, seq, task_id), lazily pruned
        self._capability_queues: Dict[FrozenSet[str], List[Tuple[int, int, bytes]]] = {}
        self._deadlines: List[Tuple[float, bytes]] = []  # (deadline, task_id) of tasks with a timeout
        self._seq = itertools.count()
        self._changed = False  # tasks were queued or room made since the last dispatch
        self.state_counts: Counter = Counter()
        self._queued_needing: Counter = Counter()  # needs -> the tasks queued here that need them (not None)
        self.dropped_results = 0
        self._dropped_output = RefusalLog()  # output dropped by the worker that sent it: logged rate-limited
        self.recording = False  # workers record task runs: a task sent says how long it waited here
        self.events = MonitorEvents()  # the core's, where it notes what monitors show
        self._now = 0.0  # of the dispatch under way
        carry_out: Dict[TaskAction, _Action] = {
            TaskAction.SEND_TO_WORKER: self._send_to_worker,
            TaskAction.REQUEUE: self._requeue,
            TaskAction.SEND_CANCEL_TO_WORKER: self._send_cancel_to_worker,
            TaskAction.FORWARD_RESULT: self._forward_result,
            TaskAction.CONFIRM_CANCELLED: self._confirm_cancelled,
            TaskAction.CONFIRM_NOT_CANCELLED: self._confirm_not_cancelled,
            TaskAction.FINISH: self._finish,
        }
        # the table with the actions bound to this object
        self._plans: Dict[Tuple[TaskState, TaskEvent], Tuple[TaskState, Tuple[_Action, ...]]] = {
            pair: (t.next_state, tuple(carry_out[action] for action in t.actions))
            for pair, t in TASK_LIFECYCLE.table.items()
        }

    @property
    def task_count(self) -> int:
        return len(self._tasks)

    def knows(self, task_id: bytes) -> bool:
        return task_id in self._tasks

    def holder(self, task_id: bytes) -> Optional[Tuple[bytes, bytes]]:
        """The worker that holds the task now, and the task's client (None: no worker holds it)."""
        record = self._tasks.get(task_id)
        if record is None or record.worker_id is None:
            return None
        return record.worker_id, record.task.client_id

    # ----------------------------------------------------------------- peers

    def add_worker(self, worker: Worker) -> None:
        self._workers[worker.worker_id] = worker
        self._loads.add(worker)
        self._changed = True

    def remove_worker(self, worker: Worker, out: Outbox) -> None:
        """The worker left, died or timed out: what it held runs elsewhere, or ends if it was being cancelled."""
        del self._workers[worker.worker_id]
        self._loads.remove(worker)
        if worker.tasks:
            logger.warning(
                f"Scheduler: worker {show(worker.worker_id)} left holding {len(worker.tasks)} task(s): "
                f"they run elsewhere, or end if they were being cancelled"
            )
        for task_id in list(worker.tasks):
            self._step(self._tasks[task_id], TaskEvent.WORKER_GONE, out)

    def drain(self, worker: Worker, out: Outbox) -> None:
        """Send ``worker`` no new task, and ask it for the tasks it has not started (they run elsewhere): its
        group is to stop. Called again while it holds tasks, in case some came back from a balance in flight."""
        if not worker.draining:
            self._loads.drain(worker)  # no room (capacity 0): the dispatch and the balancing pass it by
        if worker.tasks and not worker.balance_pending:
            worker.balance_pending = True
            out.sends.append(Send(worker.worker_id, m.BalanceRequest(len(worker.tasks))))

    def queued_by_needs(self) -> Dict[FrozenSet[str], int]:
        """The tasks queued here, by the capabilities they need (frozenset() for those that need none, and for
        every task under the even policy)."""
        needing = {needs: count for needs, count in self._queued_needing.items() if count > 0}
        plain = self.state_counts[TaskState.QUEUED] - sum(needing.values())
        return {frozenset(): plain, **needing} if plain > 0 else needing

    def withdraw(self, client: Client, out: Outbox) -> None:
        """The client left or cleared its tasks: they are cancelled, and nobody waits for a confirm."""
        for task_id in list(client.tasks):
            self._step(self._tasks[task_id], TaskEvent.WITHDRAW, out)

    # ----------------------------------------------------------------- handlers (source, message, now, out)

    def on_client_batch(self, source: bytes, message: m.TaskBatch, now: float, out: Outbox) -> None:
        """Tasks client ``source`` submitted: queued while it has fewer than its quota of them queued here (graph
        nodes aside; a task a worker holds is not queued); each one beyond is rejected, naming the quota."""
        client = self._clients[source]
        tasks = message.tasks
        room = max(0, self._max_client_tasks - client.queued)
        if len(tasks) > room:
            self._reject_over_quota(source, tasks[room:], now, out)
            message = m.TaskBatch(tasks[:room])
        self.on_task_batch(source, message, now, out)

    def _reject_over_quota(self, source: bytes, tasks: List[Any], now: float, out: Outbox) -> None:
        quota = self._max_client_tasks
        why = (
            f"the scheduler refused this task: client {show(source)} has its quota of {quota:,} tasks queued here "
            "(scaler_scheduler --max-client-tasks)"
        )
        suppressed = self._over_quota.should_log(show(source), now)
        if suppressed is not None:
            more = f" ({suppressed} more refusals since its last line)" if suppressed else ""
            logger.warning(f"Scheduler: refused {len(tasks)} task(s) of client {show(source)}: over its quota{more}")
        known = self._tasks
        results = out.results[source]
        for task in tasks:
            if task.task_id not in known:
                results.append(
                    m.TaskResult(task.task_id, task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", why)
                )

    def on_task_batch(self, source: bytes, message: m.TaskBatch, now: float, out: Outbox) -> None:
        """Tasks client ``source`` submitted within its quota: queued. A task whose ID the scheduler holds already,
        as another client's task or as a graph node, is refused to ``source`` (the first holder keeps it); one of
        its own tasks sent again is ignored."""
        tasks = self._tasks
        graph_nodes = self._graph_nodes
        fresh = []
        duplicates = 0
        for task in message.tasks:
            task_id = task.task_id
            if task_id in tasks or task_id in graph_nodes:
                holder = tasks.get(task_id)
                if holder is not None and holder.task.client_id == source:
                    duplicates += 1
                else:
                    self._refuse_taken(source, task, out)
                continue
            fresh.append(task)
        if duplicates:
            logger.warning(f"Scheduler: client {show(source)} resubmitted {duplicates} known task ID(s), ignored")
        self.queue(source, fresh, now, submitted=True)

    def queue(self, source: bytes, new_tasks: List[Any], now: float, submitted: bool = False) -> None:
        """Queue tasks of client ``source`` whose IDs are free: checked by `on_task_batch` (``submitted``: within
        its quota, `on_client_batch`), or graph nodes the graph layer released. Each carries its client's scope
        (empty for a client that stands for itself)."""
        client = self._clients[source]
        scope = client.scope if client.scope != source else b""
        tasks = self._tasks
        counts = self.state_counts
        for task in new_tasks:
            task_id = task.task_id
            task.client_id = source
            if task.scope_id != scope:  # only a Client made in a task has one, and no client sets its own
                task.scope_id = scope
            needs = None
            if task.capabilities and self._capability_policy:
                needs = frozenset(c.name for c in task.capabilities)
            record = TaskRecord(task, needs, submitted, now)
            tasks[task_id] = record
            client.queued += submitted
            counts[TaskState.QUEUED] += 1
            if needs is not None:
                self._queued_needing[needs] += 1
            client.tasks.add(task_id)
            self._enqueue(record)
            if task.timeout_seconds > 0:
                heapq.heappush(self._deadlines, (now + task.timeout_seconds, task_id))

    def _refuse_taken(self, source: bytes, task: Any, out: Outbox) -> None:
        """A task whose ID another task holds: refused to its sender, never at the cost of the first holder."""
        why = (
            f"the scheduler refused this task: its ID {task.task_id.hex()} is taken by another task; task IDs must "
            "be 16 random bytes, never another client's"
        )
        logger.warning(f"Scheduler: refused task {task.task_id.hex()} of client {show(source)}: its ID is taken")
        out.results[source].append(
            m.TaskResult(task.task_id, task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", why)
        )

    def on_results(self, source: bytes, message: m.TaskResultBatch, now: float, out: Outbox) -> None:
        """Results from worker ``source``, accepted only for the tasks it holds, of the attempt it holds."""
        tasks = self._tasks
        step = self._step
        for result in message.results:
            record = tasks.get(result.task_id)
            if record is None or record.worker_id != source or record.task.attempt != result.attempt:
                self.dropped_results += 1
                logger.debug(f"Scheduler: dropped stale result for task {result.task_id.hex()} from {show(source)}")
                continue
            if result.status == _SUCCESS:
                step(record, TaskEvent.RESULT_SUCCESS, out, result)
            elif result.status in _FAILURES:
                step(record, self._failure_event(record, result), out, result)
            else:
                logger.warning(f"Scheduler: dropped result with status {result.status.name} from {show(source)}")

    def on_task_output(self, source: bytes, message: m.TaskOutputBatch, now: float, out: Outbox) -> None:
        """What tasks printed, from worker ``source``: on to each task's client, in the order printed, only for a
        task that worker holds now, of the client it names, that asked for its output (``stream_output``), and only
        to a client still here that reads output. The rest is dropped: a worker prints to no other client."""
        tasks = self._tasks
        by_client: Dict[bytes, List[m.TaskOutput]] = {}
        foreign = 0
        for output in message.outputs:
            record = tasks.get(output.task_id)
            if record is None:
                continue  # ended (cancelled, its client gone): nobody waits for its output
            task = record.task
            if record.worker_id != source or task.client_id != output.client_id or not task.stream_output:
                foreign += 1
                continue
            by_client.setdefault(output.client_id, []).append(output)
        for client_id, outputs in by_client.items():
            client = self._clients.get(client_id)
            if client is not None and client.reads_output:
                out.sends.append(Send(client_id, m.TaskOutputBatch(outputs)))
        suppressed = self._dropped_output.should_log(show(source), now) if foreign else None
        if suppressed is not None:
            more = f" ({suppressed} more such batches since its last line)" if suppressed else ""
            logger.warning(
                f"Scheduler: dropped {foreign} output(s) from worker {show(source)}: of tasks it does not hold, of "
                f"another client, or that did not ask for their output{more}"
            )

    def reject_damaged(self, source: bytes, damaged: List[Any], out: Outbox) -> None:
        """Tasks of client ``source`` that cannot be read whole (`codec.DamagedTask`): each is rejected to its
        client, saying what is wrong; the rest of their batch was queued as usual."""
        for task in damaged:
            if not task.task_id or task.task_id in self._tasks:
                logger.warning(f"Scheduler: dropped a task of client {show(source)} that cannot be read: {task.reason}")
                continue
            why = f"the scheduler refused this task: it cannot be read: {task.reason}"
            logger.warning(f"Scheduler: refused task {task.task_id.hex()} of client {show(source)}: {task.reason}")
            out.results[source].append(
                m.TaskResult(task.task_id, task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", why)
            )

    def reconcile(self, worker: Worker, heartbeat: m.WorkerHeartbeat, out: Outbox) -> bool:
        """Check what worker says it holds against what it was sent; True: ask it for the IDs of its tasks.

        The tasks sent in batches after the last one it had received when it sent the heartbeat
        (``last_batch``) are on their way: they do not count. A heartbeat that lists the IDs settles it: a task
        sent in time that it does not hold is queued again (the worker lost it), a task it holds that it was not
        sent (or not any more) is cancelled there. Else its count and digest are compared with ours (kept as tasks
        come and go, less the tasks on their way: the newest ones)."""
        tasks = worker.tasks
        last_batch = heartbeat.last_batch
        if len(heartbeat.held_task_ids) == heartbeat.held_tasks:  # a list of the IDs (or nothing held)
            held = set(heartbeat.held_task_ids)
            lost = [task_id for task_id, sequence in tasks.items() if sequence <= last_batch and task_id not in held]
            if lost:
                logger.warning(
                    f"Scheduler: worker {show(worker.worker_id)} does not hold {len(lost)} task(s) it was sent: "
                    "they are queued again"
                )
                for task_id in lost:
                    self._step(self._tasks[task_id], TaskEvent.WORKER_GONE, out)
            unknown = held.difference(tasks)
            if unknown:
                logger.warning(
                    f"Scheduler: worker {show(worker.worker_id)} holds {len(unknown)} task(s) not assigned to it: "
                    "cancelled there"
                )
                out.cancels[worker.worker_id].extend(unknown)
            return False
        count, digest = len(tasks), worker.digest
        for task_id, sequence in reversed(tasks.items()):  # in the order sent: the newest first
            if sequence <= last_batch:
                break
            count -= 1
            digest ^= task_term(task_id)
        return count != heartbeat.held_tasks or folded(digest) != heartbeat.held_digest

    def cancel(self, client_id: bytes, task_ids: Iterable[bytes], out: Outbox) -> None:
        """The client cancels tasks; each is confirmed, now or once its worker confirmed."""
        tasks = self._tasks
        for task_id in task_ids:
            record = tasks.get(task_id)
            if record is None or record.task.client_id != client_id:
                out.confirm(client_id, task_id, False)  # done, or not its task: not cancelled
            else:
                self._step(record, TaskEvent.CANCEL, out)

    def on_cancel_confirm(self, source: bytes, message: m.TaskCancelConfirm, now: float, out: Outbox) -> None:
        """Worker ``source`` cancelled these tasks (or no longer knows them: they do not run there either)."""
        tasks = self._tasks
        for task_id in message.task_ids:
            record = tasks.get(task_id)
            if record is not None and record.worker_id == source:
                self._step(record, TaskEvent.CANCEL_CONFIRMED, out)

    def on_waiting_tasks(self, source: bytes, message: m.WaitingTasks, now: float, out: Outbox) -> None:
        """Worker ``source``'s tasks that began or ended a wait for tasks they submitted: a waiting task takes
        no room on its worker, so that its children (and any other task) can go there."""
        if len(message.task_ids) != len(message.waiting):
            logger.warning(
                f"Scheduler: dropped WaitingTasks from {show(source)}: {len(message.task_ids)} task IDs but "
                f"{len(message.waiting)} flags"
            )
            return
        worker = self._workers[source]
        tasks = self._tasks
        for task_id, waiting in zip(message.task_ids, message.waiting, strict=True):
            record = tasks.get(task_id)
            if record is None or record.worker_id != source:
                continue  # finished, or moved since: it holds nothing there
            if waiting:
                worker.waiting.add(task_id)
            else:
                worker.waiting.discard(task_id)
        self._loads.touch(worker)
        self._changed = True

    def on_balance_response(self, source: bytes, message: m.BalanceResponse, now: float, out: Outbox) -> None:
        """Worker ``source`` gives back tasks it had not started."""
        tasks = self._tasks
        for task_id in message.task_ids:
            record = tasks.get(task_id)
            if record is not None and record.worker_id == source:
                self._step(record, TaskEvent.BALANCED, out)
        self._workers[source].balance_pending = False

    def cannot_forward(self, to: bytes, message_type: type, items: List[Any], reasons: List[str], out: Outbox):
        """Tasks for worker ``to`` that cannot be encoded are rejected to their clients; results for client
        ``to`` that cannot be encoded become failures that say why."""
        if message_type is m.TaskBatch:
            for task, reason in zip(items, reasons, strict=True):
                record = self._tasks.get(task.task_id)
                if record is None or record.worker_id != to or record.task.attempt != task.attempt:
                    continue
                why = f"the scheduler could not forward this task: {reason}"
                result = m.TaskResult(task.task_id, task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", why)
                self._step(record, TaskEvent.UNSENDABLE, out, result)
        elif to in self._clients:
            for result, reason in zip(items, reasons, strict=True):
                why = f"the scheduler could not forward this result: {reason}"
                out.results[to].append(
                    m.TaskResult(result.task_id, result.attempt, m.TaskStatus.FAILED, m.PayloadKind.NONE, b"", why)
                )

    # ----------------------------------------------------------------- time

    def expire(self, now: float, out: Outbox) -> None:
        """Queue timeouts that passed: a task no worker took in time is rejected (a running one, its worker
        stops)."""
        tasks = self._tasks
        while self._deadlines and self._deadlines[0][0] <= now:
            _, task_id = heapq.heappop(self._deadlines)
            record = tasks.get(task_id)
            if record is None:
                continue  # done
            if record.needs:
                reason = f"no worker with capabilities {','.join(sorted(record.needs))} took the task"
            else:
                reason = "no worker took the task"
            reason += f" within its timeout of {record.task.timeout_seconds:g}s"
            result = m.TaskResult(task_id, record.task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", reason)
            self._step(record, TaskEvent.EXPIRED, out, result)

    def balance(self, out: Outbox) -> None:
        """When workers are idle and nothing waits here, ask the most loaded workers to give back queued tasks:
        as many as the idle workers need to reach the mean load (one at least), none going below it (only the
        workers asked are looked at)."""
        if len(self._workers) < 2 or self._queue:
            return
        loads = self._loads
        loads.refresh()
        idle = loads.idle_count()
        if not idle:
            return
        mean = max(1, loads.total_load // loads.balanced_count)
        need = idle * mean
        for worker in loads.most_loaded():
            give = min(need, worker.load - mean)
            if give < 1:
                return
            if not worker.balance_pending:
                worker.balance_pending = True
                out.sends.append(Send(worker.worker_id, m.BalanceRequest(give)))
                need -= give

    # ----------------------------------------------------------------- dispatch

    def dispatch(self, out: Outbox, busy: bool = False, now: float = 0.0) -> None:
        """Send queued tasks to the least loaded workers that have room (and the capabilities they need): one
        at a time while there is about a task per worker, in runs of up to `MAX_RUN` while each worker's share
        of the tasks (here and on the workers) is larger, and in full runs while the scheduler is ``busy``
        (messages wait for it: each message it sends should carry more, so that it reads and writes fewer)."""
        if not self._changed or not self._workers:
            return
        self._changed = False
        self._now = now
        if not self._queue and not self._capability_queues:
            return
        loads = self._loads
        loads.refresh()
        # loads stay within one run of each other
        share = (self.state_counts[TaskState.QUEUED] + loads.total_load) // len(self._workers)
        run = MAX_RUN if busy else max(1, min(MAX_RUN, share))
        for needs, queue in list(self._capability_queues.items()):
            # tasks that need capabilities go first: fewer workers can take them
            self._assign(queue, needs, run, out)
            if not queue:
                del self._capability_queues[needs]
        if self._queue:
            self._assign(self._queue, None, run, out)

    def _assign(self, queue: List[Tuple[int, int, bytes]], needs: Optional[FrozenSet[str]], run: int, out: Outbox):
        """Queued tasks, best first, ``run`` at a time to the least loaded worker with room that has ``needs``."""
        tasks = self._tasks
        step = self._step
        loads = self._loads
        while queue:
            worker = loads.least_loaded(needs)
            if worker is None:
                return
            worker_id = worker.worker_id
            for _ in range(min(run, worker.capacity - worker.load)):
                if not queue:
                    break
                _, seq, task_id = heapq.heappop(queue)
                record = tasks.get(task_id)
                if record is None or record.queue_seq != seq:
                    continue  # done, or queued again since
                record.worker_id = worker_id
                step(record, TaskEvent.ASSIGN, out)
            loads.took(worker)

    def _enqueue(self, record: TaskRecord) -> None:
        record.queue_seq = seq = next(self._seq)
        queue = self._queue
        if record.needs is not None:
            queue = self._capability_queues.setdefault(record.needs, [])
        heapq.heappush(queue, (-record.task.priority, seq, record.task.task_id))
        self._changed = True

    def _failure_event(self, record: TaskRecord, result: Any) -> TaskEvent:
        """RETRY while the task has runs left, else RESULT_FAILED (saying so in the result if it killed its
        worker too often)."""
        if result.status == m.TaskStatus.WORKER_DIED:
            story = f"task {record.task.task_id.hex()}: {result.error_text}"
            self.events.add("processor died", record.worker_id or b"", story)
            record.deaths += 1
            if record.deaths < self._max_task_deaths:
                return TaskEvent.RETRY
            result.error_text = f"the task killed its worker {record.deaths} times; last: {result.error_text}"
        elif result.status == m.TaskStatus.FAILED and record.failures < record.task.retries:
            record.failures += 1
            return TaskEvent.RETRY
        return TaskEvent.RESULT_FAILED

    # ----------------------------------------------------------------- the lifecycle

    def _step(self, record: TaskRecord, event: TaskEvent, out: Outbox, result: Any = None) -> None:
        """``event`` reaches the task: its next state and actions, from the table."""
        old = record.state
        plan = self._plans.get((old, event))
        if plan is None:
            TASK_LIFECYCLE.step(old, event, record.task.task_id.hex(), story(record.history))  # raises
            return
        new, actions = plan
        record.state = new
        record.history = ((record.history << 4) | EVENT_CODES[event]) & HISTORY_MASK  # (inline: the hot path)
        counts = self.state_counts
        counts[old] -= 1
        counts[new] += 1
        if (old is _QUEUED) is not (new is _QUEUED):
            change = 1 if new is _QUEUED else -1
            if record.needs is not None:
                self._queued_needing[record.needs] += change
            if record.submitted:
                client = self._clients.get(record.task.client_id)
                if client is not None:
                    client.queued += change
        for action in actions:
            action(record, out, result)

    # ----------------------------------------------------------------- actions (TaskAction)

    def _send_to_worker(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        task = record.task
        task.attempt += 1
        if self.recording:
            task.queued_seconds = self._now - record.queued_at
        worker_id: bytes = record.worker_id  # type: ignore[assignment]
        worker = self._workers[worker_id]
        batch = out.tasks[worker_id]
        if not batch:  # the first task of this event for that worker: a new TaskBatch
            worker.batch_sequence += 1
            out.sequences[worker_id] = worker.batch_sequence
        worker.tasks[task.task_id] = worker.batch_sequence
        worker.digest ^= task_term(task.task_id)
        batch.append(task)

    def _requeue(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        worker = self._workers.get(record.worker_id)  # type: ignore[arg-type]
        if worker is not None:
            self._release(worker, record.task.task_id)
        record.worker_id = None
        self._enqueue(record)

    def _send_cancel_to_worker(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        out.cancels[record.worker_id].append(record.task.task_id)  # type: ignore[index]

    def _forward_result(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        client_id = record.task.client_id
        if client_id in self._clients:
            out.results[client_id].append(result)

    def _confirm_cancelled(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        if record.task.client_id in self._clients:
            out.confirm(record.task.client_id, record.task.task_id, True)

    def _confirm_not_cancelled(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        if record.task.client_id in self._clients:
            out.confirm(record.task.client_id, record.task.task_id, False)

    def _finish(self, record: TaskRecord, out: Outbox, result: Any) -> None:
        task_id = record.task.task_id
        del self._tasks[task_id]
        client = self._clients.get(record.task.client_id)
        if client is not None:
            client.tasks.discard(task_id)
        if record.worker_id is not None:
            worker = self._workers.get(record.worker_id)
            if worker is not None:
                self._release(worker, task_id)
                self._changed = True  # room on that worker

    def _release(self, worker: Worker, task_id: bytes) -> None:
        """``worker`` no longer holds the task."""
        if worker.tasks.pop(task_id, None) is not None:
            worker.digest ^= task_term(task_id)
        if worker.waiting:
            worker.waiting.discard(task_id)
        self._loads.touch(worker)

