"""The digest of the tasks a worker holds, which its heartbeat reports and the scheduler checks (protocol 1.5).

Each task ID counts as the integer of its bytes (little-endian); the digest of a set of tasks is the XOR of
those integers, folded into 64 bits (the XOR of its 64-bit chunks) when it goes on the wire: order does not
matter, and a task added and removed leaves no trace. Both sides make it when a heartbeat is made or
checked (once a second, over the tasks the worker holds) rather than keep it up to date at every task.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def task_term(task_id: bytes) -> int:
    """What one task adds to (or removes from) a digest kept unfolded: ``digest ^= task_term(task_id)``."""
    return int.from_bytes(task_id, "little")


def folded(digest: int) -> int:
    """An unfolded digest as it goes on the wire (``UInt64``)."""
    result = 0
    while digest:
        result ^= digest & _MASK
        digest >>= 64
    return result
