"""Results the scheduler keeps for a client that will send their tasks again (sans-I/O).

A client that loses its connection and resumes sends again every task it has not seen end
(docs/protocol.md, "Reconnecting"). Meanwhile results come that the scheduler cannot forward:

- those of a client that is away (its connection closed; the scheduler keeps it for the wait it said in its
  Hello, ``reconnectSeconds``): whatever the scheduler would have sent it;
- those of tasks a worker said it held when it said Hello again to a scheduler that restarted, whose client
  has not sent them again yet (ADOPTED tasks, `task_lifecycle.py`).

Each is kept by task ID, for its client only, until that client sends the task again (`take`: the result
answers it, and the task is not run again), says it is done sending again (its first heartbeat after its
Hello: `drop_client`), or a deadline passes (`due`). A dropped result's object in storage, if it has one,
is deleted by the caller (`stored_objects`).
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Dict, List, Optional, Tuple

from scaler.protocol import messages as m


class KeptResults:
    def __init__(self) -> None:
        self._kept: Dict[bytes, Tuple[bytes, Any, float]] = {}  # task ID -> (client, result, deadline)
        self._deadlines: List[Tuple[float, bytes]] = []  # (deadline, task ID), lazily pruned

    def __bool__(self) -> bool:
        return bool(self._kept)

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, client_id: bytes, result: Any, until: float) -> None:
        """``result`` (an `m.TaskResult`, copied out of the message it came in) for ``client_id``, until then."""
        self._kept[result.task_id] = (client_id, result, until)
        heapq.heappush(self._deadlines, (until, result.task_id))

    def take(self, task_id: bytes, client_id: bytes) -> Optional[Any]:
        """The result kept for this task, if it is ``client_id``'s (it is forgotten here)."""
        kept = self._kept.get(task_id)
        if kept is None or kept[0] != client_id:
            return None
        del self._kept[task_id]
        return kept[1]

    def due(self, now: float) -> List[Tuple[bytes, Any]]:
        """The (client, result) pairs whose deadline passed: forgotten here."""
        gone: List[Tuple[bytes, Any]] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            until, task_id = heapq.heappop(deadlines)
            kept = self._kept.get(task_id)
            if kept is not None and kept[2] == until:
                del self._kept[task_id]
                gone.append((kept[0], kept[1]))
        return gone

    def drop_client(self, client_id: bytes, keep: Callable[[bytes], bool] = lambda task_id: False) -> List[Any]:
        """The results kept for ``client_id`` (but those ``keep`` names: graph nodes not released yet), forgotten."""
        dropped = [
            (task_id, result)
            for task_id, (owner, result, _) in self._kept.items()
            if owner == client_id and not keep(task_id)
        ]
        for task_id, _ in dropped:
            del self._kept[task_id]
        return [result for _, result in dropped]


def stored_objects(results: List[Any]) -> List[bytes]:
    """The objects in storage of these results (successes whose payload is an object ID)."""
    return [
        result.payload
        for result in results
        if result.status == m.TaskStatus.SUCCESS and result.payload_kind == m.PayloadKind.OBJECT and result.payload
    ]
