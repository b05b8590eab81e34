"""A worker's memory limit: what ``--memory-limit`` means, its default, the bound a processor sets on itself,
and the error a task past the limit fails with (docs/memory.md).

The limit bounds the memory of the processor (the process that runs the tasks) and of every process it
started, together. Two guards keep it, because one alone is not enough:

- the processor bounds its own data segment to the limit (``RLIMIT_DATA``, `bound_data_segment`), so an
  allocation that would take it past the limit fails at once, inside the task, as a ``MemoryError``: however
  fast a task allocates, the kernel refuses before the host is short of memory. The processor turns that
  ``MemoryError`` into `MemoryLimitError` (`over_limit`), and the task fails while the processor goes on;
- the agent measures the resident memory of the processor and of its children every `POLL_SECONDS`
  (`processor_memory`): that catches what the data segment does not count (other processes a task started,
  shared memory) and a processor stuck in code that holds the memory it got. Past the limit, the running task
  is stopped with its processor, and fails with `MemoryLimitError`.

A cgroup would bound the whole tree at once, but a worker rarely may create one (it needs a delegated cgroup
v2 subtree), so the limit does not rely on it; a host's cgroup limit lowers the default instead.
"""

from __future__ import annotations

import resource
from typing import Optional, Union

from scaler.protocol.command_line import parse_size
from scaler.protocol.errors import MemoryLimitError
from scaler.protocol.message_limits import show_size

DEFAULT_MEMORY_LIMIT = "auto"  # the host's memory divided among the workers the command runs
NO_MEMORY_LIMIT = "none"
# between tasks, a processor whose memory is above this share of the limit is replaced (leaks do not pile up)
RECYCLE_SHARE = 0.7
# how often the agent measures its processor's memory (a task that allocates 3 GB/s gains 60 MB meanwhile; the
# data segment's bound refuses larger steps at once), and how often it looks for the processes it started
POLL_SECONDS = 0.02
CHILDREN_POLL_SECONDS = 0.5

_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def host_memory() -> int:
    """This host's memory, or less when this process's cgroup allows less."""
    import psutil  # not at the top: the processor imports this module, and starts faster without it

    total = psutil.virtual_memory().total
    for path in _CGROUP_LIMIT_FILES:
        try:
            with open(path) as file:
                text = file.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def memory_limit_bytes(spec: Union[str, int], workers: int = 1, host: Optional[int] = None) -> int:
    """The memory limit of each of ``workers`` workers of one command, in bytes (0: none), from ``spec``:
    ``"auto"`` (the host's memory divided among them), a share of the host's memory for all of them
    (``"80%"``, divided among them), a size per worker (``2147483648``, ``"2GiB"``), or ``"none"``.
    Raise ValueError naming what is wrong."""
    if workers < 1:
        raise ValueError(f"number of workers must be at least 1, not {workers}")
    text = str(spec).strip().lower() if not isinstance(spec, int) else ""
    if text == NO_MEMORY_LIMIT:
        return 0
    if text == DEFAULT_MEMORY_LIMIT or text.endswith("%"):
        share = 100.0
        if text != DEFAULT_MEMORY_LIMIT:
            try:
                share = float(text[:-1])
            except ValueError:
                raise ValueError(f"invalid memory limit {spec!r}: a share is a number followed by %") from None
            if not 0 < share <= 100:
                raise ValueError(f"invalid memory limit {spec!r}: a share must be above 0% and at most 100%")
        return int((host_memory() if host is None else host) * share / 100) // workers
    try:
        return parse_size(spec)
    except ValueError as error:
        raise ValueError(f"invalid memory limit {spec!r}: expected auto, none, a share like 80%, or a size") from error


def bound_data_segment(limit: int) -> None:
    """In the processor: allocations past ``limit`` bytes of data segment fail (`MemoryError`); 0 leaves it be."""
    if limit <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def over_limit(function: str, limit: int, how: str) -> MemoryLimitError:
    """The error of a task of ``function`` that went over its worker's memory ``limit``: ``how`` says what
    happened, with the memory reached."""
    return MemoryLimitError(
        f"task {function} went over its worker's memory limit of {show_size(limit)}: {how}; the worker goes on "
        "(raise the limit with --memory-limit or memory_limit=)"
    )


def refused_allocation(function: str, limit: int) -> MemoryLimitError:
    """In the processor: a task's allocation failed on the data segment's bound."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    how = f"an allocation that would have taken its processor past it was refused (its peak: {show_size(peak)})"
    return over_limit(function, limit, how)
