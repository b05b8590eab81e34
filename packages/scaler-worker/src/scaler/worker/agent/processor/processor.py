"""The earlier engine's module of this name, its names pointing at ours (docs/compatibility.md).

The earlier engine's `Processor` was the process that runs tasks; user code (Parfun, for one) asks it whether
it runs inside a worker. Ours is `scaler.worker.processor`, which sets the worker's ID and its scheduler's
address in its environment when it starts: `Processor.get_current_processor` reads them there.
"""

from __future__ import annotations

import os
from typing import Optional

from scaler.worker.processor import SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE, WORKER_ID_ENVIRONMENT_VARIABLE


class Processor:
    """The worker processor this code runs in, as far as a task sees it."""

    __slots__ = ("_scheduler_address", "_worker_id")

    def __init__(self, scheduler_address: str, worker_id: str) -> None:
        self._scheduler_address = scheduler_address
        self._worker_id = worker_id

    @staticmethod
    def get_current_processor() -> Optional[Processor]:
        """The processor running the calling task, or None outside a worker."""
        worker_id = os.environ.get(WORKER_ID_ENVIRONMENT_VARIABLE)
        if not worker_id:
            return None
        return Processor(os.environ.get(SCHEDULER_ADDRESS_ENVIRONMENT_VARIABLE, ""), worker_id)

    def scheduler_address(self) -> str:
        """The address of the scheduler the worker serves (a `Client` made with ``address=None`` connects there)."""
        return self._scheduler_address

    def worker_id(self) -> str:
        return self._worker_id

    def __repr__(self) -> str:
        return f"<Processor of worker {self._worker_id} at {self._scheduler_address}>"
