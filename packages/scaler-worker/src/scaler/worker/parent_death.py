"""Make a process die with its parent, so that a killed parent leaves nothing behind.

On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG)``): the child gets a
signal when the thread that started it exits. Elsewhere, and as a safety net
for the race where the parent died before the call, a daemon thread watches
the parent's pid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Optional

PARENT_PID_ENVIRONMENT_VARIABLE = "SCALER_PARENT_PID"

_PR_SET_PDEATHSIG = 1
_WATCH_INTERVAL_SECONDS = 1.0


def _set_parent_death_signal(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: Optional[int], sig: int = signal.SIGKILL) -> None:
    """End this process with ``sig`` when ``parent_pid`` (this process's parent) exits.

    Exits at once when the parent is already gone (our parent pid is no longer ``parent_pid``).
    """
    if parent_pid is None:
        return
    _set_parent_death_signal(sig)
    if os.getppid() != parent_pid:
        os._exit(1)
    watcher = threading.Thread(target=_watch_parent, args=(parent_pid, sig), name="parent-watcher", daemon=True)
    watcher.start()


def die_with_parent_from_environment(sig: int = signal.SIGKILL) -> None:
    """`die_with_parent` for the parent pid that the parent put in ``SCALER_PARENT_PID``, if any."""
    value = os.environ.pop(PARENT_PID_ENVIRONMENT_VARIABLE, "")
    if value.isdigit():
        die_with_parent(int(value), sig)


def _watch_parent(parent_pid: int, sig: int) -> None:
    while True:
        time.sleep(_WATCH_INTERVAL_SECONDS)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), sig)
            return
