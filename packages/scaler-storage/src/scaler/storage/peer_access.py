"""Who may do what at the object storage server, without I/O: the rules `ObjectStore` applies to each request.

A peer is served as the role of its Hello (with keys, one its key is authorized as; without, the role it
claims), and only while its messages come with the key it said Hello with (`Peer.rebind`). A client puts,
reads, deletes and clears only its own objects (its identity is their owner); a worker puts new objects for
clients (results belong to their client) and reads them, but replaces and deletes none; the scheduler
deletes the objects of the owner it names, clears any owner, admits clients and asks what each owner's
objects take (usage) and which objects are the largest (summary). Monitors and worker managers may say Hello
and nothing else.

Whose objects a worker reads, and for whom it puts, is `Admissions`: a scheduler of protocol 1.8 admits each
client it serves before it answers the client's Hello (naming its scope: the client itself, or for a Client
made inside a task, the client that task ran for) and forgets it with its clearOwner. A worker of 1.8 then
reads only for a scope (`ownerId` of its get: a task's scope), reaching the objects of the clients of that
scope, and every worker puts only for admitted clients. With an older scheduler nothing is admitted, and
workers read any object and put for any owner, as before 1.8; so does a worker older than 1.8.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional, Sequence

from scaler.protocol.ids import show
from scaler.protocol.messages import ObjectInstructionKind, ObjectRequestKind, PeerRole
from scaler.protocol.security import Credential

_K = ObjectRequestKind
# the requests each role may send at all (`forbidden` says what else a client's must respect)
ALLOWED: Dict[PeerRole, FrozenSet[ObjectRequestKind]] = {
    PeerRole.CLIENT: frozenset((_K.PUT, _K.GET, _K.DELETE, _K.CLEAR_OWNER)),
    PeerRole.WORKER: frozenset((_K.PUT, _K.GET)),
    PeerRole.SCHEDULER: frozenset(ObjectRequestKind),
}

# the request an ObjectInstruction sent to the storage server counts as
INSTRUCTED = {
    ObjectInstructionKind.DELETE: ObjectRequestKind.DELETE,
    ObjectInstructionKind.CLEAR: ObjectRequestKind.CLEAR_OWNER,
}


class Peer:
    """A greeted peer: the role of its Hello, the credential it said it with, whether it reads objects of
    several frames, whether it is of protocol 1.8 or later (``isolating``: a worker names the scope it reads for,
    every peer reads ``overQuota``)."""

    __slots__ = ("role", "credential", "reads_frames", "isolating")

    def __init__(self, role: PeerRole, credential: Credential, reads_frames: bool, isolating: bool) -> None:
        self.role = role
        self.credential = credential
        self.reads_frames = reads_frames
        self.isolating = isolating

    def rebind(self, credential: Credential) -> bool:
        """Whether a message may come with ``credential``, which is not the one of the Hello: the same key, still
        authorized as the peer's role (the authorized keys were read again); it is then the peer's credential."""
        if credential.key != self.credential.key or self.role not in credential.roles:
            return False
        self.credential = credential
        return True


def forbidden(
    peer_id: bytes, role: PeerRole, kind: ObjectRequestKind, owner_id: bytes, object_ids: Sequence[bytes],
    owner_of: Callable[[bytes], Optional[bytes]],
) -> str:  # fmt: skip
    """Why a peer may not send this request at all ("": it may; a client's get and delete are only filtered to
    its own objects, see `reachable_owner`). ``owner_of``: the owner of a stored object, None if none."""
    if kind not in ALLOWED.get(role, ()):
        return f"is not allowed to a {role.name.lower()}"
    if role is PeerRole.CLIENT and kind in (ObjectRequestKind.PUT, ObjectRequestKind.CLEAR_OWNER):
        if owner_id != peer_id:
            return f"names the owner {show(owner_id)}: a client owns and clears only its own objects"
    if kind is ObjectRequestKind.PUT and role is not PeerRole.SCHEDULER:
        for object_id in object_ids:
            owner = owner_of(object_id)
            if owner is not None and (role is PeerRole.WORKER or owner != peer_id):
                return f"would replace object {show(object_id)}, which is not this peer's to replace"
    return ""


def reachable_owner(peer_id: bytes, role: PeerRole, kind: ObjectRequestKind, owner_id: bytes) -> Optional[bytes]:
    """Whose objects a get or delete of this peer reaches (None: anyone's): a client's own; the scheduler
    deletes those of the owner it names."""
    if role is PeerRole.CLIENT:
        return peer_id
    if role is PeerRole.SCHEDULER and kind is ObjectRequestKind.DELETE:
        return owner_id
    return None


class Admissions:
    """The clients the scheduler serves, each with its scope (whose objects its tasks read), as the scheduler's
    admit requests and clearOwner say; ``kept`` once a scheduler that admits (1.8) said Hello."""

    __slots__ = ("kept", "_scopes")

    def __init__(self) -> None:
        self.kept = False
        self._scopes: Dict[bytes, bytes] = {}  # admitted client -> its scope

    def admit(self, client_id: bytes, scope: bytes) -> None:
        self._scopes[client_id] = scope or client_id

    def forget(self, client_id: bytes) -> None:
        self._scopes.pop(client_id, None)

    def admitted(self, owner_id: bytes) -> bool:
        """Whether a worker may put objects for ``owner_id`` (anyone, while nothing is kept)."""
        return not self.kept or owner_id in self._scopes

    def scope_of(self, owner_id: bytes) -> bytes:
        return self._scopes.get(owner_id, owner_id)

    def read_scope(self, peer: Peer, owner_id: bytes) -> Optional[bytes]:
        """The scope whose objects a get of ``peer`` naming ``owner_id`` reaches (None: any object's): a worker
        of 1.8 reads for the scope of the task it names, while the scheduler admits clients."""
        if peer.role is PeerRole.WORKER and peer.isolating and self.kept:
            return self.scope_of(owner_id)
        return None
