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
  there (a task received it), shares a connection to the scheduler that runs the tasks
  (``scheduler_address``) with the Clients of every task of the same scope (``running_task()``: the ID and
  scope of the task whose code runs, the client whose objects it reads): the client keeps them in
  ``connections`` by scope, each made on first use under ``lock``, while a Client uses it (and the one used
  last, in ``last_connection``). So the number of connections and threads of a processor grows with the
  clients whose tasks hold Clients there, not with the number of waiting tasks.
- **Standing for the task's client.** The Client that opens a scope's connection tells the scheduler the task
  it was made in, with a proof made with ``delegation_key`` (`scaler.protocol.delegation`): its tasks then
  read the objects of that scope (an `ObjectReference` the task received, passed on to the tasks it submits).

Outside a processor no context is installed: waits are plain, and each Client has its own connection.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable, Optional, Tuple

Wake = Callable[[], None]
Notify = Callable[[Wake], None]
WaitHook = Callable[[Callable[[], bool], Optional[float], Notify], None]


class TaskContext:
    """What a process that runs tasks offers the client code inside them."""

    __slots__ = (
        "scheduler_address", "wait", "running_task", "delegation_key", "connections", "last_connection", "lock",
    )  # fmt: skip

    def __init__(
        self,
        scheduler_address: str,
        wait: WaitHook,
        running_task: Callable[[], Optional[Tuple[bytes, bytes]]] = lambda: None,
        delegation_key: bytes = b"",
    ) -> None:
        self.scheduler_address = scheduler_address
        # wait(done, timeout, notify): may run other work; returns once done() is true or timeout seconds (None:
        # no limit) have passed, or earlier to let the caller wait as usual for the rest
        self.wait = wait
        # running_task(): (task ID, scope) of the task whose code calls it; None outside one (its Clients then
        # stand for themselves)
        self.running_task = running_task
        self.delegation_key = delegation_key  # proves to the scheduler the task a Client was made in
        # the client's shared connections, by scope, made on first use; each lives while a Client uses it
        self.connections: weakref.WeakValueDictionary[bytes, Any] = weakref.WeakValueDictionary()
        self.last_connection: Any = None  # the one used last, kept for the next task even when no Client holds it
        self.lock = threading.Lock()  # guards making a connection


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
