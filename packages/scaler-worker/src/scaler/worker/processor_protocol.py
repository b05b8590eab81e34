"""What the agent and its processor say to each other over their multiprocessing Pipe.

The agent sends a `ProcessorTask`; the processor runs it and answers with its
`ProcessorResult`. A function or serializer travels as bytes only the first
time the processor needs it; afterwards its ID alone refers to the processor's
cached copy (see `lru_cache.LRUCache`).

Nested tasks ("help while waiting"): when a task waits inside the Scaler
client (on the tasks it submitted), the processor sends
``TaskWaiting(task_id, True)``: it can take another task meanwhile. The agent
then sends it queued tasks, one at a time; each runs nested on the waiting
task's stack and answers with its result as usual. Once what the task waits
for is done, the processor sends ``TaskWaiting(task_id, False)`` and runs any
task already on its way until the agent answers `WaitEnded`: then no other
task is in flight and the waiting task resumes. So the processor runs a stack
of tasks, the top one running (or waiting), the others waiting beneath it, and
the agent knows that stack exactly.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any, List, NamedTuple, Optional, Tuple

FUNCTION_CACHE_CAPACITY = 128
SERIALIZER_CACHE_CAPACITY = 16

# a task waiting inside the Scaler client checks what it waits for this often while it has nothing to run
# (less often when a check itself takes long: it then costs at most a tenth of the wait)
WAIT_CHECK_INTERVAL_SECONDS = 0.005


class ProcessorTask(NamedTuple):
    task_id: bytes
    function_id: bytes
    function: Optional[bytes]  # cloudpickled function; None: the processor holds it already
    serializer_id: bytes  # b"": cloudpickle
    serializer: Optional[bytes]  # cloudpickled serializer; None: the processor holds it already (or cloudpickle)
    arguments: List[Tuple[str, bytes]]  # (name, serialized value); name "" is positional
    profiling: bool


class TaskWaiting(NamedTuple):
    """From the processor: the task on top of its stack waits inside the Scaler client (``waiting``: it can
    take another task), or what it waited for is done and it asks to resume (answered by `WaitEnded`)."""

    task_id: bytes
    waiting: bool


class WaitEnded(NamedTuple):
    """From the agent: no task is on its way to the processor any more; the task may resume."""

    task_id: bytes


class ProcessorResult(NamedTuple):
    task_id: bytes
    status: int  # scaler.protocol.messages.TaskStatus
    payload: bytes
    error_text: str
    profiling: Optional[Tuple[float, float, int]]  # duration seconds, CPU seconds, peak memory bytes


# Plain pickle over the Pipe's byte messages: cheaper than Connection.send/recv, which build a
# multiprocessing ForkingPickler for every message. Everything sent is bytes, str, numbers and these tuples.


def send(connection: Connection, message: Any) -> None:
    connection.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def receive(connection: Connection) -> Any:
    return pickle.loads(connection.recv_bytes())
