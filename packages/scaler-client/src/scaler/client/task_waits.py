"""Waits on any futures that hold no room when they happen inside a task.

The client's own waits (`ScalerFuture.result`, `Client.map`, `Client.get`) hand the wait to the task context
(`scaler.protocol.task_context`): the processor runs other tasks meanwhile, so a task waiting for the tasks it
submitted never keeps them from running. `wait_in_task` gives the same to waits on a group of futures of any
kind (Scaler's, or plain ones such as the Ray layer's), for `ray.get`/`ray.wait`, `Executor.shutdown` and
`scaler.progress`: the caller then waits as usual for what is left, which is at once when the wait is over.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Optional, Sequence

from scaler.protocol.task_context import Wake, task_context, wait_with_hook


def wait_in_task(futures: Sequence[concurrent.futures.Future], count: int, timeout: Optional[float]) -> Optional[float]:
    """Inside a task: let its processor run other tasks until ``count`` of ``futures`` are done or ``timeout``
    seconds (None: no limit) passed; return what is left of ``timeout``. Outside a task: at once."""
    if task_context() is None:
        return timeout
    pending = [future for future in futures if not future.done()]
    needed = count - (len(futures) - len(pending))
    if needed <= 0:
        return timeout
    countdown = _Countdown(needed)
    for future in pending:
        future.add_done_callback(countdown.ended)
    return wait_with_hook(countdown.done, timeout, countdown.notify)


class _Countdown:
    """How many more futures must end; calls the waiting task's wake once none must (from any thread)."""

    __slots__ = ("_left", "_wake", "_lock")

    def __init__(self, needed: int) -> None:
        self._left = needed
        self._wake: Optional[Wake] = None
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._left <= 0

    def notify(self, wake: Wake) -> None:
        with self._lock:
            self._wake = wake
            over = self._left <= 0
        if over:
            wake()

    def ended(self, _: concurrent.futures.Future) -> None:
        with self._lock:
            self._left -= 1
            wake = self._wake if self._left == 0 else None
        if wake is not None:
            wake()
