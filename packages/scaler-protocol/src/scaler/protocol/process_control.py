"""How Scaler's processes live and die: stopping on a signal from their first line, ending with their parent,
starting children that end with them, and reusing the memory of freed payloads."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Optional, Sequence

PARENT_PID_ENVIRONMENT_VARIABLE = "SCALER_PARENT_PID"

_PR_SET_PDEATHSIG = 1
_WATCH_INTERVAL_SECONDS = 1.0


def die_with_parent(sig: int = signal.SIGTERM, parent_pid: Optional[int] = None) -> None:
    """End this process with ``sig`` when its parent exits.

    On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG)``: the signal comes when the thread that started
    this process exits); this much is safe in a ``preexec_fn``. Given ``parent_pid`` (the pid of the parent
    that started this process), it also exits at once if that parent is already gone, and a daemon thread
    watches the parent (other platforms, and the race where the parent died before the call).
    """
    _set_parent_death_signal(sig)
    if parent_pid is None:
        return
    if os.getppid() != parent_pid:
        os._exit(1)
    watcher = threading.Thread(target=_watch_parent, args=(parent_pid, sig), name="parent-watcher", daemon=True)
    watcher.start()


def die_with_parent_from_environment(sig: int = signal.SIGTERM) -> None:
    """`die_with_parent` for the parent pid that the parent put in ``SCALER_PARENT_PID``, if any."""
    value = os.environ.pop(PARENT_PID_ENVIRONMENT_VARIABLE, "")
    if value.isdigit():
        die_with_parent(sig, int(value))


def start_child(command: Sequence[str], **options: Any) -> subprocess.Popen:
    """``subprocess.Popen(command, **options)``, ending (SIGTERM) when this process ends, however it ends: the
    kernel's parent-death signal, set in the child before it runs the program, and this pid in
    ``SCALER_PARENT_PID``, which Scaler's programs check first (this process may have died before the
    signal was set)."""
    environment = dict(options.pop("env", None) or os.environ)
    environment[PARENT_PID_ENVIRONMENT_VARIABLE] = str(os.getpid())
    return subprocess.Popen(command, env=environment, preexec_fn=die_with_parent, **options)


def stop_child(process: subprocess.Popen, timeout: float) -> None:
    """End ``process``: SIGTERM, then SIGKILL if it has not ended within ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def stop_on_signals() -> None:
    """From the first line of a program until it installs its own handlers: SIGTERM and SIGINT end it quietly
    (`SystemExit`, so the ``finally`` blocks of what it started run; no traceback), whatever it is doing."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_quietly)


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _set_parent_death_signal(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        # the symbols this process has loaded, libc's among them (ctypes.util.find_library would run ldconfig in
        # a subprocess: most of what a processor's start cost)
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, sig: int) -> None:
    while True:
        time.sleep(_WATCH_INTERVAL_SECONDS)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), sig)
            return


# glibc's malloc gives every block over its mmap threshold (at most 32 MiB, adjusted upwards as such blocks are
# freed, but a block of the same size again is still mapped afresh) memory of its own, and returns it to the
# kernel when freed; heap memory beyond the trim threshold is returned too. A process that receives one 10 MB
# payload after another thus has every one of them written into fresh pages, which the kernel must fault in and
# zero: several milliseconds per 10 MB, more than the copy itself. Payload buffers up to this size come from the
# heap instead, and this much freed memory is kept for the next payload.
_HEAP_BLOCKS_UP_TO_BYTES = 32 * 1024 * 1024
_KEEP_FREED_BYTES = 64 * 1024 * 1024
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def reuse_payload_memory() -> bool:
    """Make malloc reuse the memory of freed payloads (glibc on Linux; elsewhere a no-op): called at the start of
    the processes that move large payloads (storage server, worker agent, processor). True when it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCKS_UP_TO_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES)
    )
