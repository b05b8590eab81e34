"""The agent's model of its processor (`ProcessorRunner`) and the processor's own core (`ProcessorCore`), joined
by a Pipe played by hand: no process, no greenlet, no clock.

`Pair` plays what is around them: the worker core that owns the runner (`Owner`: a queue of ready tasks, and
what the runner reports of each), the Pipe in both directions (what each end wrote and the other has not read
yet), and the processor's shell (`Shell`: it carries out the core's moves as `processor.py` does: it reads one
message when idle, everything readable before a task starts and as one ends or waits, what is readable beside
a task that has run long; it runs a task until the test says it returns or waits, collects the wakes of the
waiting tasks, and dies or is replaced when the runner or the test says so). Each end reads when the test
says, so the tests see every interleaving of the two ends.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from core_harness import make_task

from scaler.protocol.messages import TaskStatus
from scaler.worker.processor_core import (
    AgentGone,
    Die,
    FromAgent,
    HeldDue,
    Idle,
    Leave,
    ProcessorCore,
    ReadAll,
    ReadBeside,
    ReadOne,
    ResumeTask,
    SendToAgent,
    StartTask,
    TaskEnded,
    TaskWaits,
)
from scaler.worker.processor_protocol import Dropped, ProcessorResult, ProcessorTask
from scaler.worker.processor_runner import (
    ProcessorEnded,
    ProcessorOutput,
    ProcessorRunner,
    SendToProcessor,
    StartProcessor,
)
from scaler.worker.task_runner import ReadyTask

OBJECT = b"O" * 16
QUICK, SLOW = 0.00001, 1.0


class FakeLoaded:
    def __init__(self, payload: bytes) -> None:
        self.name = payload.decode()


class Owner:
    """The worker core, as far as the runner sees it: ready tasks, and where the runner reports their fate."""

    def __init__(self) -> None:
        self.queue: List[Tuple[int, int]] = []  # (priority, number) of the tasks not taken, in arrival order
        self.priorities: Dict[int, int] = {}  # task number -> its priority
        self.taken: Dict[bytes, str] = {}  # task -> "taken" or "started" (since the runner last took it)
        self.ends: Dict[bytes, List[str]] = defaultdict(list)  # task -> its fates: finished, died, returned, cancelled
        self.waiting_ids: Set[bytes] = set()
        self.cancelled: Set[bytes] = set()  # the runner was asked to end them: they never come back to the queue

    @property
    def best_priority(self) -> Optional[int]:
        return max((priority for priority, _ in self.queue), default=None)

    def next_ready(self, newest_first: bool, accept: Optional[Callable[[Any], bool]] = None) -> Optional[ReadyTask]:
        if not self.queue:
            return None
        best = max(priority for priority, _ in self.queue)
        same = [entry for entry in self.queue if entry[0] == best]
        priority, number = same[-1] if newest_first else same[0]
        self.queue.remove((priority, number))
        task = make_task(number, priority)
        self.taken[task.task_id] = "taken"
        with_object = number % 3 == 0
        arguments = [("", b"argument", b"")] + ([("", b"object payload", OBJECT)] if with_object else [])
        return ReadyTask(task, b"function", None, arguments, 1 if with_object else 0)

    def started(self, task_id: bytes) -> None:
        assert self.taken.get(task_id) == "taken", f"started twice, or never taken: {task_id.hex()}"
        self.taken[task_id] = "started"

    def finished(self, task_id: bytes, *args: Any, **kwargs: Any) -> None:
        assert self.taken.get(task_id) == "started", f"finished, not started: {task_id.hex()}"
        self._end(task_id, "finished")

    def printed(self, task_id: bytes, stream: int, text: str) -> None:
        raise AssertionError("no task prints here")

    def died(self, task_id: bytes, reason: str) -> None:
        assert self.taken.get(task_id) == "started", f"died, not started: {task_id.hex()}"
        self._end(task_id, "died")

    def waiting(self, task_id: bytes) -> None:
        assert self.taken.get(task_id) == "started" and task_id not in self.waiting_ids
        self.waiting_ids.add(task_id)

    def resumed(self, task_id: bytes) -> None:
        assert task_id in self.waiting_ids, f"resumed, never waited: {task_id.hex()}"
        self.waiting_ids.discard(task_id)

    def returned(self, task_ids: List[bytes]) -> None:
        """They never started: back to the head of the queue, in this order (a cancelled one: its cancel is done)."""
        for task_id in reversed(task_ids):
            assert task_id in self.taken, f"returned, not taken: {task_id.hex()}"
            if task_id in self.cancelled:
                self._end(task_id, "cancelled")
                continue
            self._end(task_id, "returned")
            number = int.from_bytes(task_id, "big")
            self.queue.insert(0, (self.priorities[number], number))

    def _end(self, task_id: bytes, fate: str) -> None:
        del self.taken[task_id]
        self.waiting_ids.discard(task_id)
        self.ends[task_id].append(fate)


class Shell:
    """One processor: its core, its Pipe from the agent, and what its shell does."""

    def __init__(self, processor_id: int, pair: Pair) -> None:
        self.processor_id = processor_id
        self.pair = pair
        self.core = ProcessorCore(FakeLoaded, object_cache_bytes=40)
        self.pipe: List[Any] = []  # from the agent, not read
        self.running: Optional[bytes] = None
        self.switched_out: Set[bytes] = set()
        self.woken: List[bytes] = []  # waiting tasks whose wait may be over, not collected yet
        self.read: List[bytes] = []  # every task it read, in order
        self.written: List[Any] = []  # every message it wrote, one by one
        self.abandoned: List[bytes] = []  # the tasks it held when the agent left
        self.alive = True
        self.move: Any = None
        self.feed(FromAgent(()))

    def feed(self, event: Any) -> None:
        effects = self.core.handle(event, self.pair.now)
        beside = type(event) in (HeldDue, ReadBeside)  # the watcher's: the hub's move stays
        if not beside:
            self.move = effects.pop()
        for effect in effects:
            assert type(effect) is SendToAgent
            self._wrote(effect.message)
        if beside:
            return
        move = self.move
        if type(move) is StartTask:
            self.running = move.task.task.task_id
        elif type(move) is ResumeTask:
            self.switched_out.remove(move.task_id)
            self.running = move.task_id
        elif type(move) is ReadAll:
            self.feed(FromAgent(self._take_pipe(), self._collect()))
        elif type(move) is Idle and self.woken:  # the wake pipe is readable: it wakes, reading one message if any
            self.feed(FromAgent(self.pipe[:1] and [self.pipe.pop(0)], self._collect()))
        elif type(move) in (Leave, Die):
            self.alive = False

    def _wrote(self, message: Any) -> None:
        self.pair.to_agent.append((self.processor_id, message))
        self.written.extend(message if type(message) is list else [message])

    def ended(self) -> Dict[bytes, List[str]]:
        """Each task's ends the core said, or holds to say: answered, dropped (or abandoned, `Pair.agent_leaves`)."""
        ends: Dict[bytes, List[str]] = defaultdict(list)
        for part in [*self.written, *self.core.held_messages]:
            if type(part) is ProcessorResult:
                ends[part.task_id].append("answered")
            elif type(part) is Dropped:
                ends[part.task_id].append("dropped")
        for task_id in self.abandoned:
            ends[task_id].append("abandoned")
        return ends

    def _take_pipe(self) -> List[Any]:
        taken, self.pipe = self.pipe, []
        for message in taken:
            for part in message if type(message) is list else [message]:
                if type(part) is ProcessorTask:
                    self.read.append(part.task_id)
        return taken

    def _collect(self) -> List[bytes]:
        woken, self.woken = self.woken, []
        return [task_id for task_id in woken if task_id in self.switched_out]

    # --- what the test makes happen

    def read_one(self) -> bool:
        """Idle, it reads the next message (if the agent wrote one)."""
        if type(self.move) not in (ReadOne, Idle) or not self.pipe:
            return False
        message = self.pipe.pop(0)
        for part in message if type(message) is list else [message]:
            if type(part) is ProcessorTask:
                self.read.append(part.task_id)
        self.feed(FromAgent([message], self._collect() if type(self.move) is Idle else ()))
        return True

    def task_returns(self, quick: bool) -> None:
        task_id = self.running
        assert task_id is not None
        self.running = None
        result = ProcessorResult(task_id, TaskStatus.SUCCESS, b"ok", "", None, QUICK if quick else SLOW)
        self.feed(TaskEnded(result, self._take_pipe(), self._collect()))

    def task_waits(self, timeout: Optional[float]) -> None:
        task_id = self.running
        assert task_id is not None
        self.running = None
        self.switched_out.add(task_id)
        self.feed(TaskWaits(task_id, timeout, self._take_pipe(), self._collect()))

    def wait_ends(self, task_id: bytes) -> None:
        self.woken.append(task_id)
        if type(self.move) is Idle:
            self.feed(FromAgent(self.pipe[:1] and [self.pipe.pop(0)], self._collect()))

    def time_passed(self) -> None:
        """The watcher thread looks (results held, a task that runs long), and an idle hub's wait times out."""
        now = self.pair.now
        if self.core.send_held_by <= now:
            self.feed(HeldDue())
        if self.core.read_beside_from <= now and self.pipe:
            self.feed(ReadBeside(self._take_pipe()))
        if type(self.move) is Idle and self.move.deadline is not None and self.move.deadline <= now:
            self.feed(FromAgent([], self._collect()))


class Pair:
    def __init__(self, pipeline_depth: int, tiny_tasks_depth: int = 0) -> None:
        self.now = 0.0
        self.owner = Owner()
        self.runner = ProcessorRunner(pipeline_depth, object_cache_bytes=40, tiny_tasks_depth=tiny_tasks_depth)
        self.to_agent: List[Tuple[int, Any]] = []  # (processor, message) written, not read by the agent
        self.shells: Dict[int, Shell] = {}
        self.current: Optional[Shell] = None
        self.numbers = 0
        self.act(self.runner.start)

    def act(self, call: Callable[..., None], *args: Any) -> None:
        """Call the runner (it appends its effects), then let it fill, as the worker core does after every event."""
        out: List[Any] = []
        call(*args, out)
        self.runner.fill(self.owner, out)
        for effect in out:
            if type(effect) is StartProcessor:
                if self.current is not None:
                    self.current.alive = False  # killed
                self.current = self.shells[effect.processor_id] = Shell(effect.processor_id, self)
            elif type(effect) is SendToProcessor:
                shell = self.shells[effect.processor_id]
                if shell.alive:
                    shell.pipe.append(effect.message)
            else:
                raise AssertionError(f"unexpected effect {effect!r}")

    def assign(self, priority: int) -> None:
        self.numbers += 1
        self.owner.priorities[self.numbers] = priority
        self.owner.queue.append((priority, self.numbers))
        self.act(lambda out: None)

    def agent_reads(self, count: int) -> None:
        for _ in range(count):
            if not self.to_agent:
                return
            processor_id, message = self.to_agent.pop(0)
            self.act(self.runner.on_message, self.owner, ProcessorOutput(processor_id, message))

    def processor_dies(self) -> None:
        shell = self.current
        assert shell is not None and shell.alive
        shell.alive = False
        last = [message for processor_id, message in self.to_agent if processor_id == shell.processor_id]
        self.to_agent = [(p, message) for p, message in self.to_agent if p != shell.processor_id]
        self.act(self.runner.on_message, self.owner, ProcessorEnded(shell.processor_id, "killed by signal 9", last))

    def agent_leaves(self) -> None:
        """The agent closes the Pipe (the worker stops): the processor ends, gracefully only if it held nothing."""
        shell = self.current
        assert shell is not None and shell.alive and type(shell.move) in (ReadOne, Idle) and not shell.pipe
        held = [*shell.core.started_tasks, *shell.core.fifo]
        shell.feed(AgentGone())
        assert type(shell.move) is (Die if held else Leave)
        for task_id in held:  # abandoned: the processor ends with them
            assert shell.core.state_of(task_id) is None
            shell.abandoned.append(task_id)

    def settled(self) -> bool:
        """Nothing in flight: each end has read what the other wrote, and the processor holds nothing back."""
        shell = self.current
        return (
            not self.to_agent
            and shell is not None
            and shell.alive
            and not shell.pipe
            and shell.core.send_held_by == float("inf")
        )

