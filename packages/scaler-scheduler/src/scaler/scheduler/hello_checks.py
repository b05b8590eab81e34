"""What the scheduler checks of a Hello before it admits the peer (sans-I/O, for `scheduler_core.SchedulerCore`).

- whether the peer's role can connect here at all (`role_problem`);
- whether the peer's key may say Hello as that role, and its identity is not bound to another key
  (`credential_problem`);
- whose objects a new client's tasks read (`scope_of`): its own, or, for a Client made inside a task (protocol
  1.8), those its task's client's tasks read, if the worker that holds the task proves it
  (`scaler.protocol.delegation`);
- whether such a Client must first wait for a worker to hold its task (`awaits_holder`): after a restart, the
  worker that runs the task may say Hello again after the Client does (`reconnections.py`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from scaler.protocol import delegation
from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.protocol.security import Credential
from scaler.protocol.version import MANAGING_VERSION, knows, show_version
from scaler.scheduler.peers import Worker
from scaler.scheduler.task_routing import TaskRouting

logger = logging.getLogger(__name__)
_ROLES = (m.PeerRole.WORKER, m.PeerRole.CLIENT, m.PeerRole.WORKER_MANAGER)


def role_problem(hello: m.Hello) -> Optional[str]:
    """Why a Hello of a compatible version is refused whatever its key (None: it is not): a role that does not
    connect to a scheduler, or a worker manager older than the managing protocol."""
    if hello.role not in _ROLES:
        return f"role {hello.role.name} cannot connect here"
    if hello.role == m.PeerRole.WORKER_MANAGER and not knows(hello.version, MANAGING_VERSION):
        return f"a worker manager needs protocol {show_version(MANAGING_VERSION)} or later"
    return None


def credential_problem(source: bytes, role: m.PeerRole, credential: Credential, known: Any) -> Optional[str]:
    """Why a Hello as ``role`` with ``credential`` is refused (None: it is not): its key is not authorized as
    that role, or the identity is already bound to another key."""
    if role not in credential.roles:
        held = ", ".join(sorted(r.name.lower() for r in credential.roles)) or "nothing (unknown or revoked)"
        return f"{credential.name()} is authorized as {held}, not as a {role.name.lower()}"
    if known is not None and known.credential.key != credential.key:
        return f"{show(source)} is connected with another key"
    return None


def scope_of(source: bytes, hello: m.Hello, routing: TaskRouting, workers: Dict[bytes, Worker]) -> bytes:
    """Whose objects a new client's tasks read: its own; for a Client made inside a task (1.8), whose objects
    that task's client's tasks read, if the worker that holds the task proves it (`delegation`)."""
    if not hello.made_in:
        return source
    holder = routing.holder(hello.made_in)
    if holder is not None:
        worker, scope = workers.get(holder[0]), holder[1]
        if worker is not None:
            if delegation.proven(worker.delegation_key, source, hello.made_in, hello.made_in_proof):
                return scope
    logger.warning(
        f"Scheduler: client {show(source)} says it was made in task {hello.made_in.hex()}, which no worker "
        "holding that task proves: its tasks read its own objects only"
    )
    return source


def awaits_holder(hello: m.Hello, routing: TaskRouting) -> bool:
    """Whether a Client made in a task should wait for a worker to hold that task: the task is queued here, or
    only a worker's word says it holds it, or the client says Hello again (the worker running the task may not
    have said Hello again yet, after a restart)."""
    if routing.holder(hello.made_in) is not None:
        return False
    return hello.resuming or routing.awaited(hello.made_in)
