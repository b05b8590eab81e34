"""Who may do what at the object storage server, without I/O: the rules `ObjectStore` applies to each request.

A peer is served as the role of its Hello (with keys, one its key is authorized as; without, the role it
claims), and only while its messages come with the key it said Hello with (`Peer.rebind`). A client puts,
reads, deletes and clears only its own objects (its identity is their owner); a worker reads any object and
puts new ones for any owner (results belong to their client), but replaces and deletes none; the scheduler
deletes the objects of the owner it names, clears any owner and asks what each owner's objects take (usage).
Monitors and worker managers may say Hello and nothing else.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional, Sequence

from scaler.protocol.ids import show
from scaler.protocol.messages import ObjectInstructionKind, ObjectRequestKind, PeerRole
from scaler.protocol.security import Credential

# the requests each role may send at all (`forbidden` says what else a client's must respect)
ALLOWED: Dict[PeerRole, FrozenSet[ObjectRequestKind]] = {
    PeerRole.CLIENT: frozenset(ObjectRequestKind) - {ObjectRequestKind.USAGE},
    PeerRole.WORKER: frozenset((ObjectRequestKind.PUT, ObjectRequestKind.GET)),
    PeerRole.SCHEDULER: frozenset(ObjectRequestKind),
}

# the request an ObjectInstruction sent to the storage server counts as
INSTRUCTED = {
    ObjectInstructionKind.DELETE: ObjectRequestKind.DELETE,
    ObjectInstructionKind.CLEAR: ObjectRequestKind.CLEAR_OWNER,
}


class Peer:
    """A greeted peer: the role of its Hello, the credential it said it with, whether it reads objects of
    several frames."""

    __slots__ = ("role", "credential", "reads_frames")

    def __init__(self, role: PeerRole, credential: Credential, reads_frames: bool) -> None:
        self.role = role
        self.credential = credential
        self.reads_frames = reads_frames

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
