"""The scheduler's tasks: where each goes, and what each message of a peer does to them.

`TaskRouting` is `task_records.TaskRecords` (a record per task, the queues, every change of a task's state
through `task_lifecycle.TASK_LIFECYCLE` and its actions) with the queue timeouts, the client quotas, and the
handlers of the peers' messages. What is sent is gathered in the event's `Outbox`.

The handlers take one message (a batch of tasks, results, cancels, confirms...) from one peer; the
scheduler core calls them through its dispatch table. `dispatch` runs after every event the core handles:
it hands queued tasks to the least loaded workers with room, when something changed since. A worker's load
is the tasks it holds less those that wait for tasks they submitted (`WaitingTasks`): a waiting task holds
no room, so a worker whose every task waits takes more, and nested tasks never deadlock (docs/scheduling.md).

Nothing here looks at every worker or every task for one event: the workers are filed by load
(`worker_loads.WorkerLoads`), the queue and the queue timeouts are heaps, and what each worker holds is kept
with its digest, so a heartbeat is checked against the few tasks sent since its last batch (`reconcile`).

After a restart (docs/scheduling.md, "Restarts"): a worker that says Hello again names the tasks it holds
(`adopt`), each taken as assigned to it, ADOPTED until its client sends it again; a task its client sends again
that the scheduler holds is not queued twice (SENT_AGAIN), and one whose result is kept (`kept_results.py`)
is answered with it. ADOPTED tasks nobody claims are withdrawn (cancelled on their worker) when their client
says it sent everything again (`client_resent`), or after ``claim_seconds``.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any, Callable, Container, Dict, FrozenSet, Iterable, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.ids import show
from scaler.protocol.security import RefusalLog
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Client, Worker
from scaler.scheduler.scheduler_events import Send
from scaler.scheduler.task_lifecycle import TaskEvent, TaskState
from scaler.scheduler.task_records import DEFAULT_CLAIM_SECONDS, TaskRecord, TaskRecords

MAX_RUN = 128  # tasks given at once to the least loaded worker, while each worker's share is that large
DEFAULT_MAX_CLIENT_TASKS = 100_000  # tasks of its own batches a client may have queued here (--max-client-tasks)
_SUCCESS = m.TaskStatus.SUCCESS
_FAILURES = (m.TaskStatus.FAILED, m.TaskStatus.WORKER_DIED, m.TaskStatus.REJECTED)

logger = logging.getLogger(__name__)


class TaskRouting(TaskRecords):
    def __init__(
        self,
        workers: Dict[bytes, Worker],
        clients: Dict[bytes, Client],
        max_task_deaths: int,
        max_client_tasks: int = DEFAULT_MAX_CLIENT_TASKS,
        graph_nodes: Container[bytes] = frozenset(),
        claim_seconds: float = DEFAULT_CLAIM_SECONDS,
    ) -> None:
        super().__init__(workers, clients, claim_seconds)
        self._max_client_tasks = max_client_tasks
        self._over_quota = RefusalLog()  # what is refused over a quota is logged rate-limited, per client
        self._graph_nodes = graph_nodes  # the IDs of the nodes of live graphs (graph_tasks.GraphTasks.nodes)
        self._max_task_deaths = max_task_deaths
        self._deadlines: List[Tuple[float, bytes]] = []  # (deadline, task_id) of tasks with a timeout
        self.dropped_results = 0
        self._dropped_output = RefusalLog()  # output dropped by the worker that sent it: logged rate-limited
        # where tasks that name other tasks' results go (task_inputs.TaskInputs.hold, set by the core)
        self.hold_dependents: Callable[[bytes, List[Any], Outbox], None] = lambda source, tasks, out: None

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
        """The tasks queued here, by the capabilities they need (frozenset() for those that need none)."""
        needing = {needs: count for needs, count in self._queued_needing.items() if count > 0}
        plain = self.state_counts[TaskState.QUEUED] - sum(needing.values())
        return {frozenset(): plain, **needing} if plain > 0 else needing

    def offers(self, needs: FrozenSet[str]) -> bool:
        """Whether a connected worker offers every capability in ``needs`` (with room or not)."""
        return self._loads.offers(needs)

    def holds(self, task_id: bytes, client_id: bytes) -> bool:
        """Whether the scheduler holds this task of ``client_id`` (a graph's nodes aside: they are the graph's)."""
        record = self._tasks.get(task_id)
        return record is not None and record.task.client_id == client_id and task_id not in self._graph_nodes

    def reject_queued(self, needs: FrozenSet[str], reason: str, out: Outbox) -> int:
        """Reject every task queued here that needs ``needs`` (no worker can run them), saying ``reason``; how
        many."""
        rejected = 0
        for _, seq, task_id in self._capability_queues.pop(needs, ()):
            record = self._tasks.get(task_id)
            if record is not None and record.queue_seq == seq and record.state is TaskState.QUEUED:
                result = m.TaskResult(
                    task_id, record.task.attempt, m.TaskStatus.REJECTED, m.PayloadKind.NONE, b"", reason
                )
                self._step(record, TaskEvent.EXPIRED, out, result)
                rejected += 1
        return rejected

    def hold_dispatch(self, until: float) -> None:
        """Send no task before ``until``: the workers of a scheduler that restarted say what they hold in their
        first moments, and a task one of them holds must not go to another meanwhile (it would run twice)."""
        self._hold_dispatch_until = max(self._hold_dispatch_until, until)

    def adopt(self, worker: Worker, held_tasks: List[m.HeldTask], now: float, out: Outbox) -> None:
        """``worker`` said Hello again, holding these tasks (it lost its scheduler; this one may have restarted):
        each is taken as assigned to it. One this scheduler holds queued is its (ADOPT); one it does not hold is
        ADOPTED, until its client sends it again, unless its client is here and has sent everything again
        already, or another worker has it: then it is cancelled there."""
        tasks, clients = self._tasks, self._clients
        before = len(out.cancels.get(worker.worker_id, ()))
        for held in held_tasks:
            task_id = held.task_id
            record = tasks.get(task_id)
            if record is not None:
                if record.task.client_id == held.client_id:
                    self._step(record, TaskEvent.ADOPT, out, (worker, held))
                else:
                    out.cancels[worker.worker_id].append(task_id)
                continue
            client = clients.get(held.client_id)
            if not held.client_id or (client is not None and client.resent and task_id not in self._graph_nodes):
                out.cancels[worker.worker_id].append(task_id)  # its client has all it wants (or it is nobody's)
                continue
            task = m.Task(task_id, held.client_id, attempt=held.attempt, scope_id=held.scope_id)
            record = TaskRecord(task, None, False, now)
            record.state = TaskState.ADOPTED
            record.worker_id = worker.worker_id
            tasks[task_id] = record
            self.state_counts[TaskState.ADOPTED] += 1
            self._unclaimed[task_id] = now + self._claim_seconds
            self._hold(worker, task_id, held.waiting)
        self._loads.touch(worker)
        self._changed = True
        cancelled = len(out.cancels.get(worker.worker_id, ())) - before
        self.events.info(
            "worker resumed", worker.worker_id,
            f"worker {show(worker.worker_id)} holds {len(held_tasks)} task(s) from before it lost its scheduler: "
            f"{len(held_tasks) - cancelled} kept there, {cancelled} cancelled there (their client has them, or "
            "another worker)",
        )  # fmt: skip

    def client_resent(self, client_id: bytes, keep: Container[bytes], out: Outbox) -> None:
        """The client has sent again everything it waits for (its first heartbeat after its Hello): the tasks a
        worker said it held that the client did not claim are withdrawn (but the graph nodes in ``keep``, which
        its graphs may release later)."""
        unclaimed = [task_id for task_id in self._unclaimed if task_id not in keep]
        tasks = self._tasks
        for task_id in unclaimed:
            record = tasks[task_id]
            if record.task.client_id == client_id:
                self._step(record, TaskEvent.WITHDRAW, out)

    def expire_claims(self, now: float, out: Outbox) -> None:
        """Tasks a worker said it held that no client claimed in time: withdrawn (cancelled on their worker)."""
        due = [task_id for task_id, deadline in self._unclaimed.items() if deadline <= now]
        for task_id in due:
            self._step(self._tasks[task_id], TaskEvent.WITHDRAW, out)

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
            known = self._tasks  # a task sent again that the scheduler holds takes no more room
            fresh = [task for task in tasks if task.task_id not in known]
            if len(fresh) > room:
                over = fresh[room:]
                self._reject_over_quota(source, over, now, out)
                refused = {task.task_id for task in over}
                message = m.TaskBatch([task for task in tasks if task.task_id not in refused])
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
        its own tasks sent again (after a reconnect) is not queued twice (`queue`)."""
        tasks = self._tasks
        graph_nodes = self._graph_nodes
        fresh = []
        dependents = []
        for task in message.tasks:
            task_id = task.task_id
            if task_id in tasks or task_id in graph_nodes:
                holder = tasks.get(task_id)
                if holder is not None and holder.task.client_id == source:
                    fresh.append(task)
                else:
                    self._refuse_taken(source, task, out)
                continue
            if task.dependencies:  # it takes other tasks' results: held until they end (task_inputs.py)
                dependents.append(task)
                continue
            fresh.append(task)
        self.queue(source, fresh, now, out, submitted=True)
        if dependents:
            self.hold_dependents(source, dependents, out)

    def queue(self, source: bytes, new_tasks: List[Any], now: float, out: Outbox, submitted: bool = False) -> None:
        """Queue tasks of client ``source``: checked by `on_task_batch` (``submitted``: within its quota,
        `on_client_batch`), or graph nodes the graph layer released. Each carries its client's scope (empty for a
        client that stands for itself). A task the scheduler holds for that client already (it resumed, and sent
        it again) is not queued twice (SENT_AGAIN), and one whose result is kept is answered with it."""
        client = self._clients[source]
        scope = client.scope if client.scope != source else b""
        tasks = self._tasks
        counts = self.state_counts
        kept = self.kept
        again = 0
        for task in new_tasks:
            task_id = task.task_id
            held = tasks.get(task_id)
            if held is not None:
                again += 1
                self._step(held, TaskEvent.SENT_AGAIN, out, (task, scope, submitted))
                continue
            if kept:
                result = kept.take(task_id, source)
                if result is not None:
                    again += 1
                    out.results[source].append(result)
                    continue
            task.client_id = source
            if task.scope_id != scope:  # only a Client made in a task has one, and no client sets its own
                task.scope_id = scope
            needs = frozenset(c.name for c in task.capabilities) if task.capabilities else None
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
        if again and submitted:  # a client that resumed
            what = f"{again} task(s) held or ended here"
            logger.info(f"Scheduler: client {show(source)} sent again {what}: not run again")

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
        (messages wait for it: each message it sends should carry more, so that it reads and writes fewer). A
        scheduler that restarted sends nothing for a moment (`hold_dispatch`)."""
        if not self._changed or not self._workers or now < self._hold_dispatch_until:
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
