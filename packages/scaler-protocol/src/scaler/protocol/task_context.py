"""The contract between the Scaler client and the process that runs the task it is used in.

A Scaler worker's processor runs user tasks; a task may hold a `Client` (one it received, or one it made)
and wait on tasks it submitted. The processor installs a `TaskContext` (`set_task_context`) before it runs
any task, and the client reads it (`task_context`):

- **Waiting.** The client's blocking waits (`ScalerFuture.result`, `Client.map`, `Client.get`, ...) call
  `wait_with_hook` before they wait, which hands the wait to the context's ``wait`` hook: the processor runs
  other tasks meanwhile, so a waiting task holds no room that its children need. The hook is told how to be
  woken: ``notify(wake)`` asks the waited-on object (a future, a batch of futures) to call ``wake()``, from
  any thread, once ``done()`` may have become true.
- **Connecting.** Every `Client` made inside the process without an address, and every Client unpickled
  there (a task received it), shares one connection to the scheduler that runs the tasks
  (``scheduler_address``): the client keeps it in ``connection``, made on first use under ``lock``. So the
  number of connections and threads of a processor does not grow with the number of waiting tasks.
- **Parents.** ``running_task()`` is the ID of the task whose code calls it (b"" from any other thread): the
  client writes it into the tasks that code submits (`Task.parent_task_id`), so that a performance report of
  the task's client shows them too.

Outside a processor no context is installed: waits are plain, and each Client has its own connection.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

Wake = Callable[[], None]
Notify = Callable[[Wake], None]
WaitHook = Callable[[Callable[[], bool], Optional[float], Notify], None]


class TaskContext:
    """What a process that runs tasks offers the client code inside them."""

    __slots__ = ("scheduler_address", "wait", "running_task", "connection", "lock")

    def __init__(self, scheduler_address: str, wait: WaitHook, running_task: Callable[[], bytes] = bytes) -> None:
        self.scheduler_address = scheduler_address
        self.running_task = running_task  # the ID of the task whose code calls it; b"" outside any task
        # wait(done, timeout, notify): may run other work; returns once done() is true or timeout seconds (None:
        # no limit) have passed, or earlier to let the caller wait as usual for the rest
        self.wait = wait
        self.connection: Any = None  # the client's one shared connection, made on first use
        self.lock = threading.Lock()  # guards making the connection


_context: Optional[TaskContext] = None


def set_task_context(context: Optional[TaskContext]) -> Optional[TaskContext]:
    """Install ``context`` for the client code of this process; return the previous one (None: none)."""
    global _context
    previous, _context = _context, context
    return previous


def task_context() -> Optional[TaskContext]:
    """The context the process that runs this code installed, or None outside a processor."""
    return _context


def wait_with_hook(done: Callable[[], bool], timeout: Optional[float], notify: Notify) -> Optional[float]:
    """Let the context's wait hook, if any, wait for ``done()``; return what is left of ``timeout`` (None: no
    limit)."""
    context = _context
    if context is None or done():
        return timeout
    if timeout is None:
        context.wait(done, None, notify)
        return None
    deadline = time.monotonic() + timeout
    context.wait(done, timeout, notify)
    return max(0.0, deadline - time.monotonic())
