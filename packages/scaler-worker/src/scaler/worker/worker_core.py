"""The worker agent's decisions, without I/O: `WorkerCore.handle(event, now) -> effects`.

One entry point takes everything that happens to the worker (`worker_events`: a message from the scheduler
or the storage server, what the task runner reports, a timer, a stop signal) and returns what to do about
it, which the shell (`worker_agent.py`) carries out. Nothing here reads a socket or a clock or looks up a
pid: the shell passes the time and the worker's identity in.

What the core decides: the session (`worker_session`: Hello, heartbeats, a silent scheduler, leaving); the
queue and the tasks staged ahead (`task_staging`, `task_queue`); what each task needs from object storage
and what comes back (`storage_requests`); each task's life (`task_lifecycle`, one table); task timeouts; the
answers to the scheduler, and when they go (`scheduler_answers`: results in batches, cancel confirms, balance
responses). Where the tasks run is
the task runner's business (`task_runner`): after every event the runner takes the ready tasks it has room
for (`TaskRunner.fill` calls back `next_ready`) and reports what became of them through the `RunnerOwner`
methods below.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import codec, connection_events
from scaler.protocol import messages as m
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.ids import show
from scaler.worker.function_stats import FunctionStatsTable
from scaler.worker.scheduler_answers import RESULT_BATCH_SECONDS, SchedulerAnswers, add_output, profile, timeout_error
from scaler.worker.storage_requests import StorageRequests
from scaler.worker.task_lifecycle import (
    TASK_LIFECYCLE,
    TERMINAL_STATES,
    Detail,
    PendingConfirm,
    TaskAction,
    TaskEntry,
    TaskEvent,
    TaskState,
)
from scaler.worker.task_runner import ReadyTask, TaskRunner
from scaler.worker.task_runs import TaskRunRecorder
from scaler.worker.task_staging import TaskStaging
from scaler.worker.worker_calls import WorkerCalls
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_events import (
    EXIT_OK,
    EXIT_REFUSED,
    Broken,
    CallDone,
    ConnectionChanged,
    Effect,
    Exit,
    FromRunner,
    FromScheduler,
    FromStorage,
    HandshakeFailed,
    SendToScheduler,
    SendToStorage,
    Start,
    StopRequested,
    Tick,
    UsageMeasured,
    WorkerIdentity,
)
from scaler.worker.worker_session import WorkerSession

DEFAULT_PREFETCH_TASKS = 4  # tasks staged ahead: their data is fetched while others run
RECONNECT_SECONDS = 5.0  # how long a storage request made while its connection is down waits for it

logger = logging.getLogger(__name__)

_IDLE: List[Effect] = []  # the effects list between two events: nothing may be added to it
_E = TaskEvent


class WorkerCore:
    def __init__(
        self,
        config: WorkerConfig,
        identity: WorkerIdentity,
        runner: TaskRunner,
        *,
        prefetch_tasks: int = DEFAULT_PREFETCH_TASKS,
        result_batch_seconds: float = RESULT_BATCH_SECONDS,
    ) -> None:
        self._name = f"Worker {show(identity.worker_id)}"
        self._runner = runner
        self._session = WorkerSession(config, identity, self._name, self._leave, self._held_tasks)
        self._storage_timeout = config.worker_timeout_seconds

        self._tasks: Dict[bytes, TaskEntry] = {}
        self._last_batch = 0  # the sequence of the last TaskBatch received
        self._usage = UsageMeasured(0.0, 0, 0.0, 0)  # the last measured, for a heartbeat that lists the tasks
        self._unsent: List[SendToStorage] = []  # storage requests made while its connection was down
        self._storage = StorageRequests(identity.object_ids)
        self._staging = TaskStaging(self._storage, prefetch_tasks, self._apply)  # the queue, and what is staged
        self._queue = self._staging.queue
        self._answers = SchedulerAnswers(result_batch_seconds)
        self._function_stats = FunctionStatsTable()  # what ran, per function, for the heartbeats
        self._task_runs = TaskRunRecorder()  # each run, for the heartbeats, while the scheduler asks (task_runs.py)
        self._deadlines: List[Tuple[float, int, bytes]] = []  # (when, run, task ID) of started tasks with a timeout
        self._runs = itertools.count(1)
        self._wake_at = math.inf  # the Tick asked of the shell (`next_wakeup`)
        self._exited = False
        self._now = 0.0
        self._out: List[Effect] = []  # the effects of the event being handled
        self._to_runner: List[bytes] = []  # tasks to ask the runner to end, collected by the actions
        self._requeued: List[TaskEntry] = []
        self._calls = WorkerCalls(runner, self._answers)  # Client.upload_file, run, restart (worker_calls.py)

        self._event_handlers: Dict[type, Callable[[Any], None]] = {
            FromScheduler: self._on_scheduler_message,
            FromStorage: self._on_storage_message,
            FromRunner: self._on_runner_message,
            Tick: self._on_tick,
            UsageMeasured: self._on_usage,
            Start: self._on_start,
            ConnectionChanged: self._on_connection,
            StopRequested: self._on_stop,
            Broken: self._on_broken,
            HandshakeFailed: self._on_handshake_failed,
            CallDone: lambda done: self._calls.on_done(done, self._out),
        }
        self._task_handlers: Dict[type, Callable[[Any], None]] = {
            m.TaskBatch: self._on_task_batch,
            codec.DamagedTaskBatch: self._on_damaged_batch,
            m.TaskCancel: self._on_task_cancel,
            m.BalanceRequest: self._on_balance_request,
            m.WorkerHeartbeatEcho: self._on_heartbeat_echo,
            m.WorkerCall: lambda call: self._calls.on_call(call, self, self._out),
        }
        A = TaskAction
        answers = self._answers
        actions: Dict[TaskAction, Callable[[TaskEntry, Detail], None]] = {
            A.DEQUEUE: self._staging.dequeue,
            A.DEQUEUE_STAGED: self._staging.dequeue_staged,
            A.REQUEUE: self._requeue,
            A.PUT_RESULT: self._put_result,
            A.ASK_RUNNER: self._ask_runner,
            A.ABORT: self._abort,
            A.NEW_ATTEMPT: self._new_attempt,
            A.TELL_WAITING: answers.tell_waiting,
            A.TELL_RESUMED: answers.tell_resumed,
            A.SEND_RESULT: answers.send_result,
            A.SEND_STORED: answers.send_stored,
            A.SEND_FAILURE: answers.send_failure,
            A.SEND_TIMEOUT: answers.send_timeout,
            A.SEND_WORKER_DIED: answers.send_worker_died,
            A.CONFIRM_NOW: answers.confirm_now,
            A.RESOLVE_CANCELLED: answers.resolve_cancelled,
            A.RESOLVE_NOT_CANCELLED: answers.resolve_not_cancelled,
        }
        self._plans = TASK_LIFECYCLE.plans(actions.__getitem__)

    # ------------------------------------------------------------------------- the entry point

    def handle(self, event: Any, now: float) -> List[Effect]:
        """What to do about ``event`` (see `worker_events`), at monotonic time ``now``: the event's handler,
        then the runner takes what it has room for, tasks are staged ahead, what was collected is sent (or
        held: `scheduler_answers`), and the time of the next Tick noted (`next_wakeup`)."""
        out: List[Effect] = []
        if self._exited:
            return out
        self._out = out
        self._now = now
        try:
            self._event_handlers[type(event)](event)
            if self._exited:
                return out
            self._runner.fill(self, out)
            self._staging.stage_ahead(self._runner)
            answers = self._answers
            storage = self._storage
            answering = answers.pending and self._session.accepted  # (held while the scheduler is away)
            if answering or storage.has_requests:
                if storage.has_requests or not answers.may_hold(now, self.queued_count > 0):
                    self._send(out)
            when = self._session.wake_time
            if answering and answers.send_by < when:
                when = answers.send_by
            oldest = storage.oldest_request
            if oldest < when:  # (math.inf while no request waits: the usual case, told without more)
                when = min(when, oldest + self._storage_limit)
            if storage.retry_at < when:
                when = storage.retry_at
            if self._deadlines and self._deadlines[0][0] < when:
                when = self._deadlines[0][0]
            if when < self._wake_at:
                self._wake_at = when
        finally:
            self._out = _IDLE  # what was sent is the shell's (keeping it here would keep large buffers alive)
        return out

    @property
    def next_wakeup(self) -> float:
        """When the core next wants a `Tick` (as ``now``; the earliest since the last one): the heartbeat, the
        HelloAck's deadline, results held for company, a storage request timing out, a task's timeout."""
        return self._wake_at

    # ------------------------------------------------------------------------- events

    def _on_start(self, event: Start) -> None:
        self._session.start(self._now, self._out)
        self._runner.start(self._out)

    def _on_scheduler_message(self, event: FromScheduler) -> None:
        message = event.message
        session = self._session
        session.heard(self._now)
        handler = session.scheduler_handlers.get(type(message))
        if handler is not None:
            handler(message, self._now, self._out)
            return
        task_handler = self._task_handlers.get(type(message))
        if task_handler is None:
            logger.warning(f"{self._name}: dropped unexpected {type(message).__name__} from scheduler")
        elif not session.connected:
            logger.warning(f"{self._name}: dropped {type(message).__name__} from scheduler before HelloAck")
        else:
            task_handler(message)

    def _on_storage_message(self, event: FromStorage) -> None:
        message = event.message
        if type(message) is m.ObjectResponse:
            self._on_object_response(message, event.blobs)
            return
        handler = self._session.storage_handlers.get(type(message))
        if handler is None:
            logger.warning(f"{self._name}: dropped unexpected {type(message).__name__} from object storage")
            return
        handler(message, self._out)

    def _on_runner_message(self, event: FromRunner) -> None:
        self._runner.on_message(self, event.message, self._out)

    def _on_tick(self, event: Tick) -> None:
        now = self._now
        self._wake_at = math.inf
        self._session.tick(now, self._out)
        if now >= self._storage.oldest_request + self._storage_limit:
            self._expire_storage_requests(now)
        if now >= self._storage.retry_at:
            self._storage.put_refused_again()
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, run, task_id = heapq.heappop(deadlines)
            entry = self._tasks.get(task_id)
            if entry is not None and entry.run == run:  # else it finished, or went back to the queue, in time
                self._apply(entry, _E.TIMEOUT)
                if self._to_runner:
                    self._to_runner = []
                    self._runner.abort(self, task_id, str(timeout_error(entry.task)), self._out)

    def _on_usage(self, usage: UsageMeasured) -> None:
        self._usage = usage
        if self._session.connected:  # (not while the connection is away: nothing goes before the new Hello)
            self._heartbeat([])

    def _on_heartbeat_echo(self, echo: m.WorkerHeartbeatEcho) -> None:
        """Whether to record task runs; and if the scheduler's view of what we hold differs from our heartbeat's,
        it asks for the IDs."""
        self._task_runs.recording = echo.record_tasks
        if echo.send_task_ids:
            self._heartbeat(list(self._tasks))

    def _heartbeat(self, task_ids: List[bytes]) -> None:
        """A heartbeat; what waits for company goes first, so that the tasks it answers (no longer held
        here) reach the scheduler before the heartbeat that no longer counts them."""
        self._send(self._out)
        runner = self._runner
        counts = (self.queued_count, runner.running, runner.suspended)
        digest = 0  # made here, once a heartbeat, rather than kept up to date at every task
        for task_id in self._tasks:
            digest ^= task_term(task_id)
        held = (self._last_batch, len(self._tasks), folded(digest), task_ids)
        current = []
        if self._task_runs.recording:
            current = [(e.task, e.received, e.started) for e in self._tasks.values() if e.started is not None]
        runs = self._task_runs.heartbeat_runs(self._now, current)
        report = self._function_stats.report()
        memory = (runner.memory_kills, runner.take_memory_kills())
        self._out.append(self._session.heartbeat(self._usage, *counts, report, held, runs, memory))

    def _on_connection(self, event: ConnectionChanged) -> None:
        """Storage: what was in flight when its connection closed fails at once (the answers are lost, and a
        restarted server holds nothing); what is asked while it is down waits (`RECONNECT_SECONDS`), and goes
        after the Hello the session says when it is back."""
        was_down = self._session.storage_down
        self._session.on_connection(event.to_storage, event.change, self._now, self._out)
        if not event.to_storage:
            if self._session.rejoining:  # the scheduler forgot us: its batches will be numbered anew
                self._last_batch = 0
            return
        if event.change == connection_events.DOWN:
            self._fail_storage_requests(f"lost the connection to object storage {self._session.storage_address}")
        elif was_down and not self._session.storage_down:
            unsent, self._unsent = self._unsent, []
            self._out.extend(effect for effect in unsent if self._storage.waiting(effect.message.request_id))

    def _on_stop(self, event: StopRequested) -> None:
        self._leave(EXIT_OK, event.reason, True)

    def _on_broken(self, event: Broken) -> None:
        self._leave(event.exit_code, event.reason, True)

    def _on_handshake_failed(self, event: HandshakeFailed) -> None:
        session = self._session
        if not event.from_storage:  # the session's table decides (a scheduler that restarts is waited out)
            session.on_handshake_failed(event, self._now, self._out)
        elif session.storage_down:  # a storage server that restarts may fail a handshake on its way: waited out
            logger.warning(f"{self._name}: {event.reason}; waiting for it to come back")
        else:  # refused by the storage server: the scheduler is told, so our tasks move at once
            self._leave(EXIT_REFUSED, event.reason, True)

    # ------------------------------------------------------------------------- the scheduler's requests

    def _on_task_batch(self, batch: m.TaskBatch) -> None:
        tasks = self._tasks
        queue = self._queue
        if batch.sequence > self._last_batch:
            self._last_batch = batch.sequence
        for task in batch.tasks:
            known = tasks.get(task.task_id)
            if known is not None:
                self._apply(known, _E.REASSIGNED, task.attempt)
                continue
            entry = TaskEntry(task, self._now)
            tasks[task.task_id] = entry
            queue.push(entry)

    def _on_damaged_batch(self, batch: codec.DamagedTaskBatch) -> None:
        """Tasks that cannot be read are refused alone, each naming its problem; the rest run."""
        self._on_task_batch(m.TaskBatch(batch.tasks, batch.sequence))
        for damaged in batch.damaged:
            if damaged.task_id in self._tasks:
                continue
            why = f"the worker cannot read this task: {damaged.reason}"
            logger.error(f"{self._name}: refused task {damaged.task_id.hex()}: {damaged.reason}")
            self._answers.reject(damaged.task_id, damaged.attempt, why)

    def _on_task_cancel(self, cancel: m.TaskCancel) -> None:
        """Every ID is confirmed, cancelled or not (unknown, or finished: its result is on the way), in one
        confirm per cancel. Queued tasks are cancelled at once; the runner is asked to end the others, and
        the confirm goes once it has answered for each."""
        confirm = PendingConfirm(list(cancel.task_ids))
        tasks = self._tasks
        for position, task_id in enumerate(confirm.task_ids):
            entry = tasks.get(task_id)
            if entry is not None:
                self._apply(entry, _E.CANCEL, (confirm, position))
        if self._to_runner:
            task_ids, self._to_runner = self._to_runner, []
            self._runner.cancel(self, task_ids, self._out)  # answered, maybe at once, by died/returned/finished
        else:
            self._answers.message(m.TaskCancelConfirm(confirm.task_ids, confirm.cancelled))

    def _on_balance_request(self, request: m.BalanceRequest) -> None:
        """Give back up to ``count`` queued tasks: those that would run last. Short of them, the runner is asked
        for those it took and has not started (they come back to the queue, for the next request)."""
        given = self._queue.last(request.count, self._runner.newest_first)
        for entry in given:
            self._apply(entry, _E.BALANCE)
        if len(given) < request.count:
            self._runner.take_back(self, request.count - len(given), self._out)
        self._answers.message(m.BalanceResponse([entry.task.task_id for entry in given]))

    # ------------------------------------------------------------------------- the storage server's answers

    def _on_object_response(self, response: m.ObjectResponse, blobs: Sequence[Any]) -> None:
        storage = self._storage
        if response.kind == m.ObjectRequestKind.GET:
            failed = storage.on_get_response(response, blobs)
            if failed:
                self._staging.fail_needing(failed, self._runner)
        elif response.kind == m.ObjectRequestKind.PUT:
            for (entry, object_id, _, profiling), error in storage.on_put_response(
                response, self._now, self._storage_limit
            ):
                if error is None:
                    self._apply(entry, _E.STORED, (object_id, profiling))
                else:
                    self._apply(entry, _E.FAIL, (error, profiling))
        else:
            logger.warning(f"{self._name}: dropped storage response of unexpected kind {response.kind.name}")

    @property
    def _storage_limit(self) -> float:
        """How long a storage request may wait: for its answer, or for the connection to come back."""
        return RECONNECT_SECONDS if self._session.storage_down else self._storage_timeout

    def _expire_storage_requests(self, now: float) -> None:
        """Fail the tasks whose storage requests went unanswered for too long."""
        limit = self._storage_limit
        address = self._session.storage_address
        if self._session.storage_down:
            why = f"object storage {address} was unreachable for {limit:g} seconds"
        else:
            why = f"object storage did not answer within {limit:g} seconds"
        self._fail_storage_requests(why, now, limit)

    def _fail_storage_requests(self, why: str, now: float = math.inf, limit: float = 0.0) -> None:
        """Fail the tasks whose storage requests are older than ``limit`` seconds (all of them by default)."""
        fetches, puts = self._storage.expire(now, limit)
        if not (fetches or puts):
            return
        problem = DisconnectedError(why)
        logger.error(f"{self._name}: {problem}")
        if fetches:
            self._staging.fail_needing(dict.fromkeys(fetches, problem), self._runner)
        for entry, _, _, profiling in puts:
            self._apply(entry, _E.FAIL, (problem, profiling))

    # ------------------------------------------------------------------------- the runner (RunnerOwner)
    # The runner's way back into the core, while `handle` runs (from `TaskRunner.fill`, `cancel`, `abort`,
    # `on_message`): nothing else calls them.

    @property
    def best_priority(self) -> Optional[int]:
        return self._queue.best_priority

    def next_ready(
        self, newest_first: bool, accept: Optional[Callable[[m.Task], bool]] = None
    ) -> Optional[ReadyTask]:
        return self._staging.next_ready(self._runner, newest_first, accept)

    def started(self, task_id: bytes) -> None:
        entry = self._tasks[task_id]
        entry.started = self._now
        timeout = entry.task.timeout_seconds
        if timeout > 0:
            entry.run = next(self._runs)
            heapq.heappush(self._deadlines, (self._now + timeout, entry.run, task_id))

    def finished(
        self,
        task_id: bytes,
        status: int,
        payload: Any,
        error_text: str,
        profiling: Optional[Tuple[float, float, int]],
        function: str,
        seconds: float,
        error_line: str = "",
        ended: float = 0.0,
    ) -> None:
        self._function_stats.record(function, status == m.TaskStatus.SUCCESS, seconds)
        entry = self._tasks.get(task_id)
        if entry is None:
            logger.warning(f"{self._name}: dropped result of task {task_id.hex()}: not known here")
            return
        task = entry.task
        if self._task_runs.recording:
            ended = min(ended, self._now) if ended else self._now
            self._task_runs.ended(task, entry.received, ended, seconds, function, status, error_line or error_text)
        # a result of several frames (large buffers kept out of its pickle) never goes inline
        stored = task.store_result or type(payload) is list or len(payload) > self._session.inline_threshold
        event = _E.LARGE_RESULT if stored and status == m.TaskStatus.SUCCESS else _E.RESULT
        self._apply(entry, event, (status, payload, error_text, profiling))

    def printed(self, task_id: bytes, stream: int, text: str) -> None:
        entry = self._tasks.get(task_id)
        if entry is None:  # printed by a thread of a task that ended: its client has its result already
            logger.debug(f"{self._name}: dropped output of task {task_id.hex()}: not known here")
            return
        if not self._session.scheduler_reads_output:  # older than protocol 1.3: it could not read it
            return
        output = m.TaskOutput(task_id, entry.task.client_id, m.OutputStream(stream), text)
        add_output(self._out, output, self._session.max_message_size)

    def died(self, task_id: bytes, reason: str) -> None:
        entry = self._tasks.get(task_id)
        if entry is None:
            logger.warning(f"{self._name}: dropped end of task {task_id.hex()}: not known here")
            return
        if self._task_runs.recording and entry.started is not None:
            self._task_runs.died(entry, self._now, reason)
        self._apply(entry, _E.DIED, reason)

    def waiting(self, task_id: bytes) -> None:
        entry = self._tasks.get(task_id)
        if entry is not None and self._session.tells_waits:  # (a scheduler older than 1.4 counts it as running)
            self._apply(entry, _E.WAIT)

    def resumed(self, task_id: bytes) -> None:
        entry = self._tasks.get(task_id)
        if entry is not None and self._session.tells_waits:
            self._apply(entry, _E.RESUME)

    def returned(self, task_ids: List[bytes]) -> None:
        tasks = self._tasks
        for task_id in task_ids:
            entry = tasks.get(task_id)
            if entry is not None:
                self._apply(entry, _E.RETURNED)
        if self._requeued:
            self._staging.push_front(self._requeued)
            self._requeued = []

    # ------------------------------------------------------------------------- transitions and actions

    def _apply(self, entry: TaskEntry, event: TaskEvent, detail: Detail = None) -> None:
        """Move ``entry`` on ``event`` as the lifecycle table says and carry out the transition's actions (a pair
        missing from the table is a bug: it raises, naming the task and its recent events)."""
        plan = TASK_LIFECYCLE.advance(self._plans, entry, event, entry.task.task_id, (entry, detail))
        if plan.next_state in TERMINAL_STATES:
            del self._tasks[entry.task.task_id]

    def _requeue(self, entry: TaskEntry, detail: Detail) -> None:
        entry.run = 0  # a timer of its start is stale
        self._requeued.append(entry)

    def _put_result(self, entry: TaskEntry, detail: Detail) -> None:
        self._storage.put(entry, detail[1], profile(detail[3]))

    def _ask_runner(self, entry: TaskEntry, detail: Detail) -> None:
        """The cancel waits for the runner to end ``entry`` (the handler asks it once its transitions are done)."""
        confirm, position = detail
        if entry.confirms is None:
            entry.confirms = []
        entry.confirms.append((confirm, position))
        confirm.unresolved += 1
        self._to_runner.append(entry.task.task_id)

    def _abort(self, entry: TaskEntry, detail: Detail) -> None:
        """The runner is to end ``entry`` now (the handler asks it once the transition is done)."""
        self._to_runner.append(entry.task.task_id)

    def _held_tasks(self) -> List[m.HeldTask]:
        """What a Hello said again names: every task held here, and every task whose result waits to be sent."""
        held = [
            m.HeldTask(task.task_id, task.client_id, task.scope_id, task.attempt, entry.waiting)
            for entry in self._tasks.values()
            for task in (entry.task,)
        ]
        return held + self._answers.held()

    def _new_attempt(self, entry: TaskEntry, attempt: Detail) -> None:
        logger.warning(
            f"{self._name}: task {entry.task.task_id.hex()} assigned again (attempt {entry.task.attempt} -> "
            f"{attempt}) while {entry.state.value} here; its result will answer the new attempt"
        )
        entry.task.attempt = attempt

    # ------------------------------------------------------------------------- sending and leaving

    def _send(self, out: List[Effect]) -> None:
        # nothing goes to storage while its connection is down: it goes after the Hello, when it is back
        session = self._session
        requests = self._unsent if session.storage_down else out
        refused = self._storage.requests(self._now, requests, session.storage_max_message_size)
        for (entry, _, _, profiling), error in refused:  # results larger than the storage server takes
            self._apply(entry, _E.FAIL, (error, profiling))
        if session.accepted:  # held while the scheduler is away: it hears of them once it answered again
            self._answers.send(out, session.max_message_size)

    def _leave(self, code: int, why: str, say_goodbye: bool) -> None:
        """Send what is left, and unless the scheduler sent us away, tell it we leave (our tasks then go
        elsewhere at once instead of after the worker timeout); then exit with ``code``."""
        if self._exited:
            return
        self._exited = True
        log = logger.info if code == EXIT_OK else logger.error
        log(f"{self._name}: {why}, exiting")
        self._send(self._out)
        if say_goodbye and self._session.accepted:
            self._out.append(SendToScheduler(m.DisconnectRequest(f"worker {why}")))
        self._out.append(Exit(code))

    # ------------------------------------------------------------------------- observation

    @property
    def queued_count(self) -> int:
        """Tasks held here that have not started: queued, and taken by the runner but not started."""
        return len(self._queue) + self._runner.unstarted

    @property
    def exited(self) -> bool:
        return self._exited

    def task_states(self) -> Dict[bytes, TaskState]:
        return {task_id: entry.state for task_id, entry in self._tasks.items()}

    @property
    def held_object_count(self) -> int:
        return self._storage.held_object_count

    @property
    def pending_fetch_count(self) -> int:
        return self._storage.pending_fetch_count
