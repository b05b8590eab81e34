"""The processor's decisions, without I/O: `ProcessorCore.handle(event, now) -> effects`.

The processor (`processor.py`) is a hub greenlet that reads its Pipe to the agent and runs each task in a
greenlet of its own; this core decides, in the order `processor_protocol` promises the agent:

- the FIFO of the tasks sent ahead: each task read from the Pipe takes what it needs from the caches as it is
  read (`processor_caches`, the rule the agent's copy follows), and waits its turn; a ``Drop`` takes a task
  out of the FIFO unstarted (answered ``Dropped``), and is not answered once it started;
- when the Pipe is read: idle, one message at a time (`ReadOne`, or `Idle` while tasks wait: a wake or a
  wait's timeout also ends it); as a task ends or waits, all that is readable, by the shell before it says so
  (the messages come with `TaskEnded` and `TaskWaits`); and all that is readable before a task starts or
  resumes, unless the Pipe was read since the last task ended or waited, or the head of the FIFO was sent as
  nothing ran (`ReadAll`; such a task is never dropped);
- while a task runs long (`READ_BESIDE_SECONDS` or more), the Pipe is also read beside it, by the shell's
  watcher thread (`ReadBeside`), and a ``Drop`` answered at once: the agent takes back the tasks it sent ahead
  behind a task that may never end (to give them to an idle worker);
- the results held for company: a result waits for the next one during a run of quick tasks (the task took
  less than `RESULT_HOLD_TASK_SECONDS`, the FIFO is not empty and the oldest held is younger than
  `RESULT_HOLD_SECONDS`); what is held goes with the next message the hub sends, or when it idles, or once
  the oldest of it is `RESULT_HOLD_LIMIT_SECONDS` old (`HeldDue`: the shell's watcher thread asks, while the
  hub runs a long task);
- nested tasks: a task that waits switches out (``TaskWaiting(id, True)``, at once); a task whose wait is over
  (the shell saw what it waits for done, or its timeout passed here) is resumed when no task runs and the
  FIFO is empty, in the order the waits ended (``TaskWaiting(id, False)``, then `Resume`).

Each task's life here is one table (`processor_task_lifecycle`). Every event a hub handles ends its effects
with one move, what the hub does next (`StartTask`, `ResumeTask`, `ReadOne`, `ReadAll`, `Idle`, `Leave`,
`Die`), which the shell answers with the next event; the effects before it are `SendToAgent`s, sent in order
(`HeldDue` and `ReadBeside` come from the watcher while the hub runs a task: they only send). The shell calls
`handle` with a lock held, as its watcher thread calls it too.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

from scaler.worker.processor_caches import ProcessorCaches
from scaler.worker.processor_protocol import (
    FUNCTION_CACHE_CAPACITY,
    OBJECT_CACHE_BYTES,
    READ_BESIDE_SECONDS,
    RESULT_HOLD_LIMIT_SECONDS,
    RESULT_HOLD_SECONDS,
    RESULT_HOLD_TASK_SECONDS,
    SERIALIZER_CACHE_CAPACITY,
    Drop,
    Dropped,
    FunctionLoaded,
    ProcessorResult,
    ProcessorTask,
    TaskWaiting,
)
from scaler.worker.processor_task_lifecycle import PROCESSOR_HUB_LIFECYCLE, HubAction, HubEvent, HubState

# ----------------------------------------------------------------------------- events (from the shell)


class FromAgent(NamedTuple):
    """What the hub read as it was told (`ReadOne`, `ReadAll`, `Idle`): Pipe messages (a list of tasks and
    ``Drop``s, or a ``Drop``), and the waiting tasks whose waited-on objects said they are done."""

    messages: Sequence[Any]
    woken: Sequence[bytes] = ()


class TaskEnded(NamedTuple):
    """The task the hub ran returned or raised: its result; then the hub read what was readable."""

    result: ProcessorResult
    messages: Sequence[Any] = ()
    woken: Sequence[bytes] = ()


class TaskWaits(NamedTuple):
    """The task the hub ran began a wait inside the Scaler client (``timeout`` seconds, None: no limit) and
    switched out; then the hub read what was readable."""

    task_id: bytes
    timeout: Optional[float]
    messages: Sequence[Any] = ()
    woken: Sequence[bytes] = ()


class AgentGone(NamedTuple):
    """The Pipe ended as the hub read it."""


class HeldDue(NamedTuple):
    """The watcher thread looks: what is held goes if the oldest of it is `RESULT_HOLD_LIMIT_SECONDS` old."""


class ReadBeside(NamedTuple):
    """What the watcher thread read from the Pipe while the task that runs had run `READ_BESIDE_SECONDS` or
    more (`ProcessorCore.read_beside_from`): a ``Drop`` of a task sent ahead is answered at once."""

    messages: Sequence[Any]


# ----------------------------------------------------------------------------- effects


class SendToAgent(NamedTuple):
    message: Any  # one message, or a list of them (read as if they came one by one)


class StartTask(NamedTuple):
    """Run this task in a greenlet; answer `TaskEnded` or `TaskWaits`."""

    task: InProcessor


class ResumeTask(NamedTuple):
    """Switch back to this waiting task; answer `TaskEnded` or `TaskWaits`."""

    task_id: bytes


class ReadOne(NamedTuple):
    """Wait for the agent's next message; answer `FromAgent` (or `AgentGone`)."""


class ReadAll(NamedTuple):
    """Read every message readable now, without waiting, and the wakes; answer `FromAgent` (or `AgentGone`)."""


class Idle(NamedTuple):
    """Tasks wait: wait for the agent's next message, a wake, or ``deadline`` (monotonic; None: no limit); answer
    `FromAgent` with what came (or `AgentGone`)."""

    deadline: Optional[float]


class Leave(NamedTuple):
    """The agent closed the Pipe while nothing was here: end, saying goodbye to the scheduler."""


class Die(NamedTuple):
    """The agent is gone while tasks were here: exit at once."""


_READ_ONE = ReadOne()
_READ_ALL = ReadAll()
_LEAVE = Leave()
_DIE = Die()

# ----------------------------------------------------------------------------- the core

_WAITING = HubState.WAITING
_RESULT = HubEvent.RESULT
_START = HubEvent.START
_EVENTS = list(HubEvent)
_EVENT_CODES = {event: code for code, event in enumerate(_EVENTS, start=1)}
_HISTORY_MASK = (1 << 32) - 1  # a task's last eight events, four bits each (no list per task)
assert len(_EVENTS) < 16


class InProcessor:
    """A task the processor holds (read, running, waiting, resumable), with what it needs, taken from the caches
    as it was read: its function and serializer (None: none, or missing), its arguments with each object-storage
    argument's payload, and the problem of a missing one."""

    __slots__ = ("task", "function", "serializer", "arguments", "problem", "state", "history", "waits")

    def __init__(self, task: ProcessorTask, needs: Tuple[Any, Any, List[Tuple[str, Any, bytes]], Any]) -> None:
        self.task = task
        self.function, self.serializer, self.arguments, self.problem = needs
        self.state = HubState.QUEUED
        self.history = 0  # its last events (`_EVENT_CODES`), for the error of a missing transition
        self.waits = 0  # the waits it began (a timeout belongs to one of them)


_Plan = Tuple[HubState, Tuple[Callable[[InProcessor, Any], None], ...], bool, int]


def _story(history: int) -> List[HubEvent]:
    events = []
    while history:
        events.append(_EVENTS[(history & 15) - 1])
        history >>= 4
    return events[::-1]


class ProcessorCore:
    def __init__(
        self,
        load: Callable[[bytes], Any],
        object_cache_bytes: int = OBJECT_CACHE_BYTES,
        function_cache_capacity: int = FUNCTION_CACHE_CAPACITY,
        serializer_cache_capacity: int = SERIALIZER_CACHE_CAPACITY,
    ) -> None:
        """``load`` makes a function or a serializer of its bytes (what the caches keep: it has a ``name``)."""
        self._load = load
        self.caches: ProcessorCaches[Any] = ProcessorCaches(
            object_cache_bytes, function_cache_capacity, serializer_cache_capacity
        )
        self._tasks: Dict[bytes, InProcessor] = {}
        self._fifo: Deque[InProcessor] = deque()  # the tasks read, not started, in the order they start
        self._resumable: Deque[InProcessor] = deque()  # the tasks whose wait is over, in the order the waits ended
        self._running: Optional[InProcessor] = None
        self._running_since = 0.0  # when the task that runs started or resumed
        self._waiting = 0
        self._deadlines: List[Tuple[float, int, int, bytes]] = []  # (when, sequence, wait, task ID) of timed waits
        self._sequence = itertools.count()
        self._read: Any = _READ_ONE  # what the hub was last told to read (`ReadOne`, `ReadAll`)
        self._drained = False  # the Pipe was read since the last task ended or waited: start without reading
        self._held: List[Any] = []  # messages for the agent held for company
        self._held_since = 0.0
        self.holds = 0  # how many times messages were held (the watcher looks again while it grows)
        self.starts = 0  # how many times a task started or resumed (likewise)
        self._now = 0.0
        self._out: List[Any] = []
        self._handlers: Dict[type, Callable[[Any], None]] = {
            FromAgent: self._on_from_agent,
            TaskEnded: self._on_task_ended,
            TaskWaits: self._on_task_waits,
            AgentGone: self._on_agent_gone,
            HeldDue: self._on_held_due,
            ReadBeside: self._on_read_beside,
        }
        self._message_handlers: Dict[type, Callable[[Any], None]] = {
            list: self._on_list,
            Drop: self._on_drop,
        }
        A = HubAction
        carry_out: Dict[HubAction, Callable[[InProcessor, Any], None]] = {
            A.LEAVE_FIFO: self._leave_fifo,
            A.SAY_DROPPED: self._say_dropped,
            A.ANSWER: self._answer,
            A.SAY_WAITING: self._say_waiting,
            A.QUEUE_RESUME: self._queue_resume,
            A.SAY_RESUMED: self._say_resumed,
        }
        terminal = PROCESSOR_HUB_LIFECYCLE.terminal
        # the table with the actions bound to this object: (next state, actions, whether it ends, the event's code)
        self._plans: Dict[Tuple[HubState, HubEvent], _Plan] = {
            (state, event): (
                step.next_state,
                tuple(carry_out[action] for action in step.actions),
                step.next_state in terminal,
                _EVENT_CODES[event],
            )
            for (state, event), step in PROCESSOR_HUB_LIFECYCLE.table.items()
        }

    def handle(self, event: Any, now: float) -> List[Any]:
        """What to do about ``event`` at monotonic time ``now``: `SendToAgent`s, then (for every event but the
        watcher's, `HeldDue` and `ReadBeside`) the hub's next move."""
        out: List[Any] = []
        self._out = out
        self._now = now
        self._handlers[type(event)](event)
        return out

    # ------------------------------------------------------------------------- events

    def _on_from_agent(self, event: FromAgent) -> None:
        self._take(event.messages)
        self._wakes(event.woken)
        fifo = self._fifo
        if self._read is _READ_ALL:
            self._drained = True
        else:  # one message, read idle: a task sent as nothing ran starts without reading (it is never dropped)
            self._drained = bool(fifo) and not fifo[0].task.sent_ahead
        self._move()

    def _on_task_ended(self, event: TaskEnded) -> None:
        running = self._running
        assert running is not None, "a task ended while none ran"
        self._running = None
        if event.messages:
            self._take(event.messages)  # a Dropped it answers goes before the result
        self._drained = True
        self._step(running, _RESULT, event.result)
        if event.woken or self._deadlines:
            self._wakes(event.woken)
        self._move()

    def _on_task_waits(self, event: TaskWaits) -> None:
        running = self._running
        assert running is not None and running.task.task_id == event.task_id, "a wait of a task not running"
        self._running = None
        self._take(event.messages)
        self._drained = True
        self._step(running, HubEvent.WAIT, event.timeout)
        self._wakes(event.woken)  # (its own wait may be over already)
        self._move()

    def _on_agent_gone(self, event: AgentGone) -> None:
        read = self._read
        for held in list(self._tasks.values()):
            self._step(held, HubEvent.AGENT_GONE)
        self._fifo.clear()
        self._resumable.clear()
        self._running = None
        # told to wait for a message while nothing was here: the agent closed the Pipe; otherwise it is gone
        self._out.append(_LEAVE if read is _READ_ONE and not self._waiting else _DIE)
        self._waiting = 0

    def _on_held_due(self, event: HeldDue) -> None:
        if self._held and self._now >= self._held_since + RESULT_HOLD_LIMIT_SECONDS:
            self._flush()

    def _on_read_beside(self, event: ReadBeside) -> None:
        self._take(event.messages)
        self._flush()  # a Dropped goes at once: the task that runs may not end soon

    def _take(self, messages: Sequence[Any]) -> None:
        handlers = self._message_handlers
        for message in messages:
            handlers[type(message)](message)

    def _on_list(self, messages: List[Any]) -> None:
        """Tasks for the FIFO, to start in order (and maybe ``Drop``s)."""
        tasks = self._tasks
        fifo = self._fifo
        for message in messages:
            if type(message) is ProcessorTask:
                held = InProcessor(message, self.caches.incoming(message, self._load))
                if message.function is not None and held.function is not None:  # sent, and loaded now: its name
                    self._hold(FunctionLoaded(message.function_id, held.function.name))  # (a task stopped for memory)
                tasks[message.task_id] = held
                fifo.append(held)
            else:
                self._message_handlers[type(message)](message)

    def _on_drop(self, drop: Drop) -> None:
        held = self._tasks.get(drop.task_id)
        if held is not None:  # (else it ended: its result answered the agent)
            self._step(held, HubEvent.DROP)

    def _wakes(self, woken: Sequence[bytes]) -> None:
        """The waits that are over: those the shell saw done, and those whose timeout passed."""
        tasks = self._tasks
        for task_id in woken:
            held = tasks.get(task_id)
            if held is not None:
                self._step(held, HubEvent.WAIT_OVER)
        deadlines = self._deadlines
        now = self._now
        while deadlines and deadlines[0][0] <= now:
            _, _, wait, task_id = heapq.heappop(deadlines)
            held = tasks.get(task_id)
            if held is not None and held.waits == wait and held.state is _WAITING:
                self._step(held, HubEvent.WAIT_OVER)

    # ------------------------------------------------------------------------- the next move

    def _move(self) -> None:
        """What the hub does next: start the head of the FIFO, or resume a task whose wait is over, having read
        the Pipe first unless it did since the last task ended or waited; with nothing to run, send what is
        held and wait for the agent (or, while tasks wait, for a wake or a timeout too)."""
        fifo = self._fifo
        out = self._out
        if fifo or self._resumable:
            if not self._drained:
                self._read = _READ_ALL
                out.append(_READ_ALL)
                return
            self._drained = False
            if fifo:
                held = fifo.popleft()
                self._step(held, _START)
                self._running = held
                self._running_since = self._now
                self.starts += 1
                out.append(StartTask(held))
            else:
                held = self._resumable.popleft()
                self._step(held, HubEvent.RESUME)
                self._running = held
                self._running_since = self._now
                self.starts += 1
                out.append(ResumeTask(held.task.task_id))
            return
        self._flush()
        self._read = _READ_ONE
        if self._waiting:
            out.append(Idle(self._deadlines[0][0] if self._deadlines else None))
        else:
            out.append(_READ_ONE)

    # ------------------------------------------------------------------------- transitions and actions

    def _step(self, held: InProcessor, event: HubEvent, detail: Any = None) -> None:
        """Move ``held`` on ``event`` as the table says and carry out the transition's actions; a pair missing
        from the table raises `TransitionError` naming the task and its recent events (a bug)."""
        plan = self._plans.get((held.state, event))
        if plan is None:
            PROCESSOR_HUB_LIFECYCLE.step(held.state, event, held.task.task_id.hex(), _story(held.history))  # raises
            return
        held.state, actions, ends, code = plan
        held.history = ((held.history << 4) | code) & _HISTORY_MASK
        for action in actions:
            action(held, detail)
        if ends:
            del self._tasks[held.task.task_id]

    def _leave_fifo(self, held: InProcessor, detail: Any) -> None:
        self._fifo.remove(held)

    def _say_dropped(self, held: InProcessor, detail: Any) -> None:
        self._hold(Dropped(held.task.task_id))  # with the results it comes among

    def _answer(self, held: InProcessor, result: ProcessorResult) -> None:
        """Hold the result for company only during a run of quick tasks, and never long: the head of the FIFO
        starts now, and should it run long, the watcher sends what is held (`HeldDue`)."""
        if (
            self._fifo
            and result.seconds < RESULT_HOLD_TASK_SECONDS
            and (not self._held or self._now - self._held_since < RESULT_HOLD_SECONDS)
        ):
            self._hold(result)
        else:
            self._send(result)

    def _say_waiting(self, held: InProcessor, timeout: Optional[float]) -> None:
        held.waits += 1
        self._waiting += 1
        if timeout is not None:
            entry = (self._now + timeout, next(self._sequence), held.waits, held.task.task_id)
            heapq.heappush(self._deadlines, entry)
        self._send(TaskWaiting(held.task.task_id, True))

    def _queue_resume(self, held: InProcessor, detail: Any) -> None:
        self._waiting -= 1
        self._resumable.append(held)

    def _say_resumed(self, held: InProcessor, detail: Any) -> None:
        self._send(TaskWaiting(held.task.task_id, False))

    # ------------------------------------------------------------------------- what goes to the agent

    def _hold(self, message: Any) -> None:
        """Keep ``message`` for the next send."""
        held = self._held
        if not held:
            self._held_since = self._now
        held.append(message)
        self.holds += 1

    def _send(self, message: Any) -> None:
        """Send ``message`` now, after what is held, in one message."""
        self._held.append(message)
        self._flush()

    def _flush(self) -> None:
        held = self._held
        if held:
            self._out.append(SendToAgent(held[0] if len(held) == 1 else held))
            self._held = []

    # ------------------------------------------------------------------------- observation

    @property
    def send_held_by(self) -> float:
        """When what is held must go (math.inf: nothing is held)."""
        return self._held_since + RESULT_HOLD_LIMIT_SECONDS if self._held else math.inf

    @property
    def held_messages(self) -> List[Any]:
        """What is held for company, in the order it will go."""
        return list(self._held)

    @property
    def read_beside_from(self) -> float:
        """From when the Pipe is read beside the task that runs (math.inf: none runs)."""
        return self._running_since + READ_BESIDE_SECONDS if self._running is not None else math.inf

    @property
    def started_tasks(self) -> List[bytes]:
        """The IDs of the tasks started: running, waiting, or resumable."""
        return [task_id for task_id, held in self._tasks.items() if held.state is not HubState.QUEUED]

    def state_of(self, task_id: bytes) -> Optional[HubState]:
        held = self._tasks.get(task_id)
        return held.state if held is not None else None

    @property
    def fifo(self) -> List[bytes]:
        """The IDs of the tasks read and not started, in the order they start."""
        return [held.task.task_id for held in self._fifo]

    @property
    def waiting(self) -> int:
        return self._waiting
