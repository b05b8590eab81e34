"""What a worker manager's shell tells its core (events) and what the core asks the shell to do (effects).

`FromScheduler`, `ConnectionChanged`, `HandshakeFailed` and `Tick` are every core's
(`scaler.protocol.core_events`), named here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scaler.protocol.core_events import ConnectionChanged, FromScheduler, HandshakeFailed, Tick  # noqa: F401

# exit codes of scaler_worker_manager
EXIT_OK = 0
EXIT_FAILURE = 1  # lost the scheduler
EXIT_REFUSED = 78  # refused, or not a scheduler: trying again will not help

# ----------------------------------------------------------------------------- events


@dataclass(slots=True)
class Begin:
    """The shell is connecting to the scheduler: say Hello."""


@dataclass(slots=True)
class GroupStarted:
    """The backend took a group (a process started, a job submitted): ``detail`` says where, for people."""

    group_id: bytes
    detail: str


@dataclass(slots=True)
class GroupStartFailed:
    group_id: bytes
    reason: str


@dataclass(slots=True)
class GroupRunning:
    """The backend says the group runs (a job left the queue)."""

    group_id: bytes


@dataclass(slots=True)
class GroupEnded:
    """The backend says the group ended (its process exited, its job is gone), and why."""

    group_id: bytes
    reason: str


@dataclass(slots=True)
class StopRequested:
    """A stop signal: drain every group, stop them, leave (a second one: stop them at once)."""

    reason: str


# ----------------------------------------------------------------------------- effects


@dataclass(slots=True)
class Send:
    message: Any


@dataclass(slots=True)
class StartGroup:
    group_id: bytes
    workers: int


@dataclass(slots=True)
class StopGroup:
    group_id: bytes


@dataclass(slots=True)
class Exit:
    code: int
    reason: str
