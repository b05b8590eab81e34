"""What the worker core is told (events) and what it asks its shell to do (effects).

`WorkerCore.handle(event, now)` takes one of the events below and returns a list of effects, which the
shell (`worker_agent.WorkerAgent`) carries out in order. The task runner's own effects and messages (e.g.
`processor_runner.StartProcessor`, `ProcessorOutput`) travel the same way: its effects in the list, its
messages inside `FromRunner`. `FromScheduler`, `FromStorage`, `ConnectionChanged`, `HandshakeFailed` and `Tick`
are every core's (`scaler.protocol.core_events`), named here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, NamedTuple

from scaler.protocol.core_events import (  # noqa: F401 - named here too
    ConnectionChanged,
    FromScheduler,
    FromStorage,
    HandshakeFailed,
    Tick,
)
from scaler.protocol.ids import IDGenerator

# how a worker process ends (scaler_cluster reads them to decide whether to replace it)
EXIT_OK = 0  # asked to leave: SIGTERM/SIGINT, or the scheduler's DisconnectRequest
EXIT_FAILURE = 1  # lost the scheduler or the storage server, or crashed
# the scheduler or the storage server refused us, or what answers at the address is not one (sysexits
# EX_CONFIG): retrying will not help
EXIT_REFUSED = 78


class WorkerIdentity(NamedTuple):
    """Who this worker is, looked up by the shell (the core looks nothing up)."""

    worker_id: bytes
    pid: int
    hostname: str
    object_ids: IDGenerator  # names the results this worker puts in object storage
    # the key by which the Clients made in its tasks prove their task to the scheduler (scaler.protocol.delegation)
    delegation_key: bytes = b""


# ----------------------------------------------------------------------------- events


@dataclass(slots=True)
class Start:
    """The shell is connected to the scheduler's address: say Hello, start the runner."""


@dataclass(slots=True)
class FromRunner:
    message: Any  # what the task runner's host delivered, for `TaskRunner.on_message`


@dataclass(slots=True)
class UsageMeasured:
    """The answer to `MeasureUsage`: CPU % since the previous measure, resident bytes."""

    agent_cpu: float
    agent_rss_bytes: int
    runner_cpu: float
    runner_rss_bytes: int


@dataclass(slots=True)
class StopRequested:
    """Leave cleanly (a stop signal, or the program that embeds the worker)."""

    reason: str


@dataclass(slots=True)
class Broken:
    """The shell cannot go on (a connection that cannot be made, a processor that cannot be started, an
    internal error): the worker exits with ``exit_code`` (EXIT_REFUSED: retrying will not help, e.g. its
    ``--preload`` fails), saying why."""

    reason: str
    exit_code: int = EXIT_FAILURE


@dataclass(slots=True)
class CallDone:
    """The answer to `CarryOutCall`: the worker's `WorkerCallResult`; ``uploaded``: a file was saved."""

    result: Any
    uploaded: bool = False


# ----------------------------------------------------------------------------- effects


@dataclass(slots=True)
class SendToScheduler:
    message: Any


@dataclass(slots=True)
class SendToStorage:
    message: Any
    blobs: List[Any] = field(default_factory=list)


@dataclass(slots=True)
class ConnectStorage:
    """Connect to the object storage server at ``address`` (the messages for it follow)."""

    address: str


@dataclass(slots=True)
class MeasureUsage:
    """Measure CPU and memory and answer with `UsageMeasured` (for a heartbeat)."""


@dataclass(slots=True)
class CarryOutCall:
    """Run a `WorkerCall`'s function, or save its upload (`worker_calls.py`); answer with `CallDone`."""

    call: Any


@dataclass(slots=True)
class Exit:
    """The worker is done: stop everything and end the process with ``code``."""

    code: int


Effect = Any  # one of the effects above, or one of the task runner's
