"""How a Client made inside a task shows the scheduler which task it was made in (protocol 1.8).

A task's Client acts for the task's client: its tasks read the objects that client's tasks read (an
`ObjectReference` passed down to nested tasks). The scheduler takes that from no claim: the worker makes a
random key at start (`new_key`) and tells the scheduler in its Hello (`WorkerInfo.delegationKey`), its
processors sign the ID of each Client made in a task with it (`proof`: HMAC-SHA256 of the client ID followed
by the task ID), and the Client's Hello carries the task ID and the proof (`Hello.madeIn`, `madeInProof`).
The scheduler checks the proof against the key of the worker that holds that task now (`proven`), so only code
running on that worker, while it holds the task, can make one; a task ID seen in a log is worth nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import os

KEY_BYTES = 32


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def proof(key: bytes, client_id: bytes, task_id: bytes) -> bytes:
    """That the client ``client_id`` was made in task ``task_id``, by a holder of ``key``."""
    return hmac.digest(key, client_id + task_id, hashlib.sha256)


def proven(key: bytes, client_id: bytes, task_id: bytes, claimed: bytes) -> bool:
    """Whether ``claimed`` is the proof of ``key`` for that client and task (compared in constant time)."""
    return len(key) == KEY_BYTES and hmac.compare_digest(proof(key, client_id, task_id), claimed)
