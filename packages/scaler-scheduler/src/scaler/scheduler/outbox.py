"""What the scheduler core sends while it handles one event, gathered by destination.

Tasks, results, cancels and cancel confirms are gathered per peer, so that each peer gets at most one
message of each kind per event (a `Burst` of messages is one event) however many tasks the event touched;
`effects` turns them into `Send` effects, after the other effects in the order they were made and before the
graph layer's answers. Results and confirms that went through the graph layer wait apart (``checked_``), so
that a later message of the same burst does not hand them to it again.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, DefaultDict, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.scheduler.scheduler_events import Send


class Outbox:
    __slots__ = ("sends", "tasks", "sequences", "cancels", "results", "confirms", "checked_results",
                 "checked_confirms", "last")  # fmt: skip

    def __init__(self) -> None:
        self.sends: List[Any] = []  # effects in the order they were made: acks, echoes, storage requests...
        self.tasks: DefaultDict[bytes, List[Any]] = defaultdict(list)  # worker -> tasks to run
        self.sequences: Dict[bytes, int] = {}  # worker -> the sequence of its TaskBatch
        self.cancels: DefaultDict[bytes, List[bytes]] = defaultdict(list)  # worker -> task IDs to cancel
        self.results: DefaultDict[bytes, List[Any]] = defaultdict(list)  # client -> results
        self.confirms: Dict[bytes, Tuple[List[bytes], List[bool]]] = {}  # client -> (task IDs, cancelled)
        # results and confirms that went through the graph layer (None until one did)
        self.checked_results: Optional[DefaultDict[bytes, List[Any]]] = None
        self.checked_confirms: Optional[Dict[bytes, Tuple[List[bytes], List[bool]]]] = None
        self.last: List[Any] = []  # sent after all the others (the graph layer's answers)

    def confirm(self, client_id: bytes, task_id: bytes, cancelled: bool) -> None:
        add_confirms(self.confirms, client_id, [task_id], [cancelled])

    def checked(self) -> Tuple[DefaultDict[bytes, List[Any]], Dict[bytes, Tuple[List[bytes], List[bool]]]]:
        """Where results and confirms go once through the graph layer."""
        if self.checked_results is None or self.checked_confirms is None:
            self.checked_results, self.checked_confirms = defaultdict(list), {}
        return self.checked_results, self.checked_confirms

    def effects(self) -> List[Any]:
        effects = self.sends
        results, confirms = self.results, self.confirms
        if self.checked_results is not None and self.checked_confirms is not None:  # the graph layer's first
            results, confirms = self.checked_results, self.checked_confirms
            for client_id, batch in self.results.items():
                results[client_id].extend(batch)
            for client_id, (task_ids, cancelled) in self.confirms.items():
                add_confirms(confirms, client_id, task_ids, cancelled)
        for client_id, batch in results.items():
            if batch:
                effects.append(Send(client_id, m.TaskResultBatch(batch)))
        for client_id, (task_ids, cancelled) in confirms.items():
            if task_ids:
                effects.append(Send(client_id, m.TaskCancelConfirm(task_ids, cancelled)))
        for worker_id, task_ids in self.cancels.items():
            effects.append(Send(worker_id, m.TaskCancel(task_ids)))
        sequences = self.sequences
        for worker_id, tasks in self.tasks.items():
            effects.append(Send(worker_id, m.TaskBatch(tasks, sequences.get(worker_id, 0))))
        effects.extend(self.last)
        return effects


def add_confirms(
    confirms: Dict[bytes, Tuple[List[bytes], List[bool]]], client_id: bytes, task_ids: List[bytes], flags: List[bool]
) -> None:
    entry = confirms.get(client_id)
    if entry is None:
        entry = confirms[client_id] = ([], [])
    entry[0].extend(task_ids)
    entry[1].extend(flags)
