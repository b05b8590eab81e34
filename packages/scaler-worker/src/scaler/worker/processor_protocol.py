"""What the agent and its processor say to each other over their multiprocessing Pipe.

The agent sends one `ProcessorTask` at a time and waits for its `ProcessorResult`.
A function or serializer travels as bytes only the first time a processor needs
it; afterwards its ID alone refers to the processor's cached copy (see
`lru_cache.LRUCache`). While a task runs, the processor may also send
`ProcessorBlocked` notices: the task is waiting inside the Scaler client
(typically on the results of tasks it submitted), so its processor does not
use the worker's slot and another processor may run a queued task meanwhile
(this is what keeps nested tasks from deadlocking the cluster).
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any, List, NamedTuple, Optional, Tuple

FUNCTION_CACHE_CAPACITY = 128
SERIALIZER_CACHE_CAPACITY = 16

# a task that has been inside the Scaler client (module scaler.client...) for this long is waiting on it
BLOCKED_AFTER_SECONDS = 0.1
BLOCKED_CHECK_INTERVAL_SECONDS = 0.05
CLIENT_MODULE_PREFIX = "scaler.client"
# ...except this one, which runs a graph node's own code (a graph node is not waiting because it runs there)
GRAPH_NODE_MODULE = "scaler.client.graph_evaluation"


class ProcessorTask(NamedTuple):
    task_id: bytes
    function_id: bytes
    function: Optional[bytes]  # cloudpickled function; None: the processor holds it already
    serializer_id: bytes  # b"": cloudpickle
    serializer: Optional[bytes]  # cloudpickled serializer; None: the processor holds it already (or cloudpickle)
    arguments: List[Tuple[str, bytes]]  # (name, serialized value); name "" is positional
    profiling: bool


class ProcessorBlocked(NamedTuple):
    task_id: bytes
    blocked: bool  # True: waiting inside the Scaler client; False: running again


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
