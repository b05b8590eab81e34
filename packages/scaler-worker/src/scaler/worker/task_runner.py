"""Where a worker's tasks run: the interface between the worker core and a task runner.

The core (`worker_core.WorkerCore`) does what every worker does the same way: the session with the
scheduler, the queue, fetching what a task needs from object storage, the answers to the scheduler. Where
the tasks then run is the runner's business. The local processor (`processor_runner.ProcessorRunner`: one
subprocess, tasks sent ahead into its FIFO, waiting tasks switched out beside the running one) is one
runner; a runner that hands tasks to IBM Symphony, at most N at a time, is another. A runner comes in two
halves:

- `TaskRunner`, sans-I/O like the core, which the core drives: it takes ready tasks when it has room
  (`fill`: a task that waits leaves room), is asked to end tasks (`cancel`, `abort`) or to give back those it
  has not started (`take_back`, as the scheduler balances), reads what its other
  half reports (`on_message`, the core's `FromRunner` events), and answers with effects for its other half
  (start a processor, write to its pipe, ...) appended to ``out``;
- `RunnerHost`, the I/O half in the worker's event loop: it carries out those effects and delivers what
  happens (a pipe message, a process that ended) as `FromRunner` events.

The runner reports what became of each task it took, through `RunnerOwner` (the core): `started` once (its
timeout counts from there), then exactly one of `finished` (its result), `died` (it ended without a result
of its own: what ran it died or was stopped) or `returned` (it never started: back to the queue). A task
the core asked to end is reported the same way, as whatever happened first. In between, a started task may
be reported `waiting` (on tasks it submitted: it holds no room) and `resumed`, any number of times.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

from scaler.protocol import messages as m


class ReadyTask(NamedTuple):
    """A task with what it needs to run, fetched from object storage."""

    task: m.Task
    function: Optional[bytes]  # the cloudpickled function; None when the runner holds it (`holds_function`)
    serializer: Optional[bytes]  # the cloudpickled serializer; None when the task has none or the runner holds it
    # (name, serialized value, object ID); name "" is positional; object ID b"": an inline argument; else an
    # object-storage argument whose value is None when the runner holds it (`holds_objects`); an object of
    # several frames is a list of them (scaler.protocol.payload)
    arguments: List[Tuple[str, Any, bytes]]
    objects: int  # how many of the arguments are object-storage arguments


class RunnerOwner(Protocol):
    """What the core offers its runner: the ready tasks, and where the runner reports what became of them."""

    @property
    def best_priority(self) -> Optional[int]:
        """The highest priority of a task waiting in the queue (None: the queue is empty)."""

    def next_ready(
        self, newest_first: bool, accept: Optional[Callable[[m.Task], bool]] = None
    ) -> Optional[ReadyTask]:
        """The task to run next (the newest of the best priority first when ``newest_first``), now the
        runner's; None when the queue is empty or the next task waits for what it needs. With ``accept``,
        the first task in that order that ``accept`` accepts (the others keep their places): a runner with
        a limit lets some tasks past it (the Symphony runner: tasks submitted from its own running tasks)."""

    def started(self, task_id: bytes) -> None: ...

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
        """Its result: ``status`` a `TaskStatus`, ``payload`` the serialized value (or the failure, see
        `task_failure`), ``profiling`` (duration seconds, CPU seconds, peak memory bytes) if it was profiled;
        ``function`` its function's ``module.qualname`` ("" if it could not be loaded) and ``seconds`` how long
        it ran, for the per-function totals of the heartbeats; ``error_line`` a failure's exception in one line
        and ``ended`` when it ended on the core's clock (0: not known, when the core hears of it), for the task
        runs (`task_runs`)."""

    def printed(self, task_id: bytes, stream: int, text: str) -> None:
        """Text the task printed (``stream`` an `OutputStream`), for a task that asked for it (``stream_output``):
        sent to its client as it comes, before the task's result."""

    def died(self, task_id: bytes, reason: str) -> None: ...

    def waiting(self, task_id: bytes) -> None:
        """This started task waits for tasks it submitted: it holds no room until it is `resumed`."""

    def resumed(self, task_id: bytes) -> None:
        """This waiting task runs again."""

    def returned(self, task_ids: List[bytes]) -> None:
        """These tasks never started: they go back to the head of the queue, in this order."""


class TaskRunner(Protocol):
    """The sans-I/O half of a runner, driven by the core."""

    def start(self, out: List[Any]) -> None:
        """Get ready to run tasks (the worker starts)."""

    def fill(self, owner: RunnerOwner, out: List[Any]) -> None:
        """Take the ready tasks there is room for now (called after every event)."""

    def cancel(self, owner: RunnerOwner, task_ids: Sequence[bytes], out: List[Any]) -> None:
        """End these tasks, which the runner holds, without a result as soon as possible."""

    def take_back(self, owner: RunnerOwner, count: int, out: List[Any]) -> None:
        """Give back up to ``count`` tasks it took that have not started (they come back through
        `RunnerOwner.returned`, now or later): the scheduler balances them onto an idle worker."""

    def abort(self, owner: RunnerOwner, task_id: bytes, why: str, out: List[Any]) -> None:
        """End this started task now (``why``: it exceeded its timeout); tasks that end with it died of ``why``."""

    def on_message(self, owner: RunnerOwner, message: Any, out: List[Any]) -> None:
        """What the runner's host delivered (`FromRunner.message`)."""

    def restart(self, owner: RunnerOwner, why: str, out: List[Any]) -> None:
        """Run the next tasks afresh (`Client.restart`): what runs them now is replaced, the tasks started there
        died of ``why``."""

    def refresh(self, out: List[Any]) -> None:
        """Files were uploaded (`Client.upload_file`): the tasks that start from now on must see them as they are
        now (the local processor is replaced as soon as no task runs there)."""

    def holds_function(self, function_id: bytes) -> bool: ...

    def holds_serializer(self, serializer_id: bytes) -> bool: ...

    def holds_objects(self, object_ids: Sequence[bytes]) -> bool:
        """Whether it holds all these objects (then their IDs alone will do)."""

    @property
    def newest_first(self) -> bool:
        """Whether the next task will run on top of a waiting one (then the newest goes first)."""

    @property
    def unstarted(self) -> int:
        """Tasks it took that have not started."""

    @property
    def running(self) -> int:
        """Tasks that run (not waiting)."""

    @property
    def suspended(self) -> int:
        """Tasks that wait for tasks they submitted."""

    @property
    def memory_kills(self) -> int:
        """Tasks it stopped for going over the worker's memory limit, since the worker started."""

    def take_memory_kills(self) -> List[m.MemoryKill]:
        """Those it stopped since the last call (at most a heartbeat's worth), for the scheduler's events."""


class RunnerHost(Protocol):
    """The I/O half of a runner, in the worker agent's event loop."""

    @property
    def effect_handlers(self) -> Mapping[type, Callable[[Any], None]]:
        """How it carries out each type of effect its `TaskRunner` emits."""

    def open(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None]) -> None:
        """Start delivering what happens, each as an event for `WorkerCore.handle`: `FromRunner(message)`,
        or `Broken(reason)` when it cannot go on (e.g. no processor can be started)."""

    async def close(self) -> None:
        """Stop everything it started (the worker is leaving)."""

    def usage(self) -> Tuple[float, int]:
        """(CPU %, resident bytes) of what runs the tasks, for heartbeats."""
