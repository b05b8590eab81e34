"""The digest of the tasks a worker holds, which its heartbeat reports and the scheduler checks (protocol 1.3).

Each task ID counts as the integer of its bytes (little-endian); the digest of a set of tasks is the XOR of
those integers, folded into 64 bits (the XOR of its 64-bit chunks) when it goes on the wire. XOR makes it
cheap to keep up to date: adding a task and removing it are the same operation, one per task, and the
scheduler takes the tasks still on their way to the worker out of its own digest the same way.
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
