"""The contract between client code that blocks and the process it runs in.

A Scaler worker's processor runs user tasks; a task may hold a Client and wait on tasks it submitted. The
client's blocking waits (`ScalerFuture.result`, `Client.map`, ...) call the hook installed here before
they wait, so that the processor can run other tasks meanwhile (the waiting task then holds no slot its
children need). The client calls `wait_with_hook`; the processor installs its hook with `set_wait_hook`.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

WaitHook = Callable[[Callable[[], bool], Optional[float]], None]
_wait_hook: Optional[WaitHook] = None


def set_wait_hook(hook: Optional[WaitHook]) -> Optional[WaitHook]:
    """Install ``hook(done, timeout)`` for the client's blocking waits; return the previous one (None: none).

    The hook may do other work meanwhile, and returns once ``done()`` is true or ``timeout`` seconds (None:
    no limit) have passed, or earlier to let the caller wait as usual for the rest. None restores plain
    waiting.
    """
    global _wait_hook
    previous, _wait_hook = _wait_hook, hook
    return previous


def wait_with_hook(done: Callable[[], bool], timeout: Optional[float]) -> Optional[float]:
    """Let the wait hook, if any, wait for ``done()``; return what is left of ``timeout`` (None: no limit)."""
    hook = _wait_hook
    if hook is None or done():
        return timeout
    if timeout is None:
        hook(done, None)
        return None
    deadline = time.monotonic() + timeout
    hook(done, timeout)
    return max(0.0, deadline - time.monotonic())
