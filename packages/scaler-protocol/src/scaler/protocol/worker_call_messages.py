"""The messages of calls on every worker (protocol 1.8: `Client.upload_file`, `run`, `restart`,
`get_worker_logs`), mirrors of ``WorkerCall``, ``WorkerCallResult`` and ``WorkerCallAnswer`` in
``schema/scaler.capnp``; `messages` takes them among the members of the `Message` union."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import List


class WorkerCallKind(enum.IntEnum):
    RUN = 0
    UPLOAD = 1
    RESTART = 2
    LOGS = 3


@dataclass(slots=True)
class WorkerCall:
    call_id: int = 0
    kind: WorkerCallKind = WorkerCallKind.RUN
    client_id: bytes = b""  # written by the scheduler
    name: str = ""  # upload: the file's name
    payload: bytes = b""  # run: the cloudpickled (function, args, kwargs); upload: the file's bytes


@dataclass(slots=True)
class WorkerCallResult:
    call_id: int = 0
    client_id: bytes = b""
    worker_id: bytes = b""  # written by the scheduler
    success: bool = False
    payload: bytes = b""  # run: the cloudpickled value, or exception
    error: str = ""


@dataclass(slots=True)
class WorkerCallAnswer:
    call_id: int = 0
    results: List[WorkerCallResult] = field(default_factory=list)
