"""The object storage server's state and decisions, without any I/O.

`ObjectStore.handle(event, now)` takes one event (`storage_events.FromPeer`: a
decoded message from one peer, with its payload frames) and returns the replies
to send, as `Reply(peer_id, message, blobs)`. The asyncio/ZeroMQ shell in
`server.py` feeds it; tests drive it directly.

A peer is served once it said Hello with a compatible version, as a role its
credential allows (`security.Credential`: the roles of its key; any role without
security), and only while its messages come with the key it said Hello with: what
each peer may send in each of its states, and what the store then does, is the
table `PEER_LIFECYCLE` (`peer_lifecycle.py`). A peer's session is its connection: the store is told the
connection of each Hello (`PeerConnection`) and each connection that closed
(`ConnectionClosed`), and forgets a peer whose connection of its last Hello
closed (it says Hello again on its next connection). Objects are not tied to a
connection: a client's objects are cleared when the scheduler, which saw it
leave, says so (``clearOwner``); forgetting a peer forgets its greeting only.
What a peer may ask depends on the role of its Hello: the rules are
`peer_access.py`'s (a client touches only its own objects). Without
security a role is a claim, so these rules hold against peers that say they are
clients or workers.

Objects are held by object ID with their owner ID and size. An object is one
payload frame ("blob") or several (`ObjectRequest.frame_counts`: a serialized
value followed by the buffers it holds out of band), each kept as the very
object the shell handed in (a ``zmq.Frame``, ``bytes``, a ``memoryview``...):
never copied here, and a get returns the same objects, so the shell can send
large payloads zero-copy. An object of several frames is only given to peers
whose Hello says protocol 1.1 or later; an older peer gets ``notFound`` for it,
with a reason that says so.

Memory accounting counts payload bytes only, in all and per owner. Past
``max_memory``, with a spill directory, the least recently used objects are
spilled to disk and read back when asked for (`object_places`). A put is refused
object by object: ``tooLarge`` when the payload is over ``max_object_size``,
``storageFull`` when holding it would take its owner's objects over
``max_client_memory`` (the owner's quota: half of ``max_memory``, and of the
spill disk budget, by default, so that no client fills the server for everybody)
or when it fits in neither the memory nor the disk budget; the reason says which,
and the option that raises it. A refused put leaves any object already stored
under that ID as it was. The scheduler asks how much each owner holds
(``usage``), and which objects are the largest (``summary``: a pass over every
object, once a second while a monitor subscribes), for monitors.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from scaler.protocol import object_frames
from scaler.protocol.codec import message_name
from scaler.protocol.ids import show
from scaler.protocol.message_limits import show_size, storage_max_message_size
from scaler.protocol.messages import (
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PeerRole,
    Refusal,
)
from scaler.protocol.peer_connections import PeerConnections
from scaler.protocol.security import RefusalLog
from scaler.protocol.version import ISOLATION_VERSION, PROTOCOL_VERSION, incompatibility, knows
from scaler.storage.object_places import ObjectPlaces, SpillDirectory
from scaler.storage.peer_access import INSTRUCTED, Admissions, Peer, forbidden, reachable_owner
from scaler.storage.peer_lifecycle import PEER_LIFECYCLE, PeerAction, PeerEvent, PeerState
from scaler.storage.storage_events import ConnectionClosed, FromPeer, PeerConnection, Reply

DEFAULT_MAX_OBJECT_SIZE = 1 << 30  # 1 GiB
LARGEST_OBJECTS = 20  # listed in a summary

logger = logging.getLogger(__name__)

# the first protocol version whose peers read objects of several frames
_FRAMES_VERSION = (1, 1)


class _StoredObject:
    __slots__ = ("owner_id", "frames", "frame_count", "size")

    def __init__(self, owner_id: bytes, frames: Optional[Sequence[Any]], size: int, frame_count: int = 0) -> None:
        self.owner_id = owner_id
        self.frames: Optional[Sequence[Any]] = frames  # None while it is spilled to disk
        self.frame_count = len(frames) if frames is not None else frame_count
        self.size = size


def blob_size(blob: Any) -> int:
    """Size in bytes of a payload: ``bytes``, ``memoryview``, ``zmq.Frame`` or any buffer."""
    if isinstance(blob, (bytes, bytearray)):
        return len(blob)
    return memoryview(blob).nbytes


class ObjectStore:
    """Objects by ID, the peers that said Hello, and the answer to every message."""

    def __init__(
        self, max_object_size: int = DEFAULT_MAX_OBJECT_SIZE, max_memory: int = 4 << 30,
        max_client_memory: Optional[int] = None, spill: Optional[SpillDirectory] = None, max_disk: int = 0,
    ) -> None:  # fmt: skip
        if max_client_memory is None:  # half of what it holds: of its memory, and of its spill disk if it has one
            max_client_memory = max(1, (max_memory + (max_disk if spill is not None else 0)) // 2)
        limits = (("max_object_size", max_object_size), ("max_memory", max_memory))
        for name, value in (*limits, ("max_client_memory", max_client_memory)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive number of bytes, got {value!r}")
        self.max_object_size = max_object_size
        self.places = ObjectPlaces(max_memory, spill, max_disk)  # memory, and the spill directory past it
        self.max_client_memory = max_client_memory  # what one owner's objects may take
        self._objects: Dict[bytes, _StoredObject] = {}
        self._objects_by_owner: Dict[bytes, Dict[bytes, None]] = {}  # dict as an insertion-ordered set
        self._bytes_by_owner: Dict[bytes, int] = {}  # what each owner's objects take
        self._greeted_peers: Dict[bytes, Peer] = {}
        self._admissions = Admissions()  # the clients the scheduler serves, and whose objects their tasks read
        self._connections = PeerConnections()  # the connection of each peer's last Hello
        self._refusals = RefusalLog()
        self._handlers: Dict[type, Callable[[Any, float], List[Reply]]] = {
            FromPeer: self._on_peer_message,
            PeerConnection: self._on_peer_connection,
            ConnectionClosed: self._on_connection_closed,
        }
        self._carry_out: Dict[PeerAction, Callable[[Any, float], List[Reply]]] = {
            PeerAction.ACKNOWLEDGE: self._acknowledge,
            PeerAction.REFUSE_VERSION: self._refuse_version,
            PeerAction.REFUSE_CREDENTIAL: self._refuse_credential,
            PeerAction.REFUSE_STRANGER: self._refuse_stranger,
            PeerAction.SERVE: self._serve,
            PeerAction.FORGET: self._forget,
        }
        self._requests: Dict[type, Callable[[bytes, Any, Sequence[Any]], List[Reply]]] = {
            ObjectRequest: self._on_object_request,
            ObjectInstruction: self._on_object_instruction,
        }
        self._request_handlers: Dict[ObjectRequestKind, Callable[[bytes, Any, Sequence[Any]], List[Reply]]] = {
            ObjectRequestKind.PUT: self._put,
            ObjectRequestKind.GET: self._get,
            ObjectRequestKind.DELETE: self._delete,
            ObjectRequestKind.CLEAR_OWNER: self._clear_owner,
            ObjectRequestKind.ADMIT: self._admit,
            ObjectRequestKind.USAGE: self._usage,
            ObjectRequestKind.SUMMARY: self._summary,
        }

    def restore(self) -> int:
        """The objects of the object directory (a server started again with it): held again, on disk until asked
        for. Returns how many."""
        spill = self.places.spill
        if spill is None or not spill.durable:
            return 0
        for found in spill.index():  # type: ignore[attr-defined]
            self._objects[found.object_id] = _StoredObject(found.owner_id, None, found.size, found.frame_count)
            self._objects_by_owner.setdefault(found.owner_id, {})[found.object_id] = None
            self._bytes_by_owner[found.owner_id] = self._bytes_by_owner.get(found.owner_id, 0) + found.size
            self.places.found(found.object_id, found.owner_id, found.size)
        return len(self._objects)

    @property
    def object_count(self) -> int:
        return len(self._objects)

    @property
    def max_memory(self) -> int:
        return self.places.max_memory

    @property
    def used_memory(self) -> int:
        """Payload bytes held in memory (not those spilled to disk)."""
        return self.places.used_memory

    def __contains__(self, object_id: bytes) -> bool:
        return object_id in self._objects

    def owner_of(self, object_id: bytes) -> bytes:
        return self._objects[object_id].owner_id

    def objects_of(self, owner_id: bytes) -> List[bytes]:
        return list(self._objects_by_owner.get(owner_id, ()))

    def bytes_of(self, owner_id: bytes) -> int:
        """What the objects of ``owner_id`` take (counted against its quota)."""
        return self._bytes_by_owner.get(owner_id, 0)

    @property
    def peer_count(self) -> int:
        """The peers greeted and not gone."""
        return len(self._greeted_peers)

    def handle(self, event: Any, now: float) -> List[Reply]:
        """Apply one event; return what to send."""
        return self._handlers[type(event)](event, now)

    def _on_peer_message(self, event: FromPeer, now: float) -> List[Reply]:
        peer_id, message, credential = event.peer_id, event.message, event.credential
        peer = self._greeted_peers.get(peer_id)
        if type(message) is Hello:
            if incompatibility(message.version) is not None:
                peer_event = PeerEvent.BAD_HELLO
            elif message.role not in credential.roles or (peer is not None and peer.credential.key != credential.key):
                peer_event = PeerEvent.FORBIDDEN
            else:
                peer_event = PeerEvent.HELLO
        elif peer is not None and credential is not peer.credential and not peer.rebind(credential):
            peer_event = PeerEvent.FORBIDDEN
        else:
            peer_event = PeerEvent.REQUEST
        return self._step(peer_id, peer_event, event, now)

    def _on_peer_connection(self, event: PeerConnection, now: float) -> List[Reply]:
        self._connections.on_hello(event.peer_id, event.connection)
        return []

    def _on_connection_closed(self, event: ConnectionClosed, now: float) -> List[Reply]:
        gone = self._connections.on_closed(event.connection)
        return [] if gone is None else self._step(gone, PeerEvent.LEFT, gone, now)

    def _step(self, peer_id: bytes, peer_event: PeerEvent, detail: Any, now: float) -> List[Reply]:
        """``peer_event`` for ``peer_id``: the table's actions, each carried out with ``detail`` (the event that
        came: a `FromPeer`, or the ID of a peer that left)."""
        state = PeerState.GREETED if peer_id in self._greeted_peers else PeerState.STRANGER
        transition = PEER_LIFECYCLE.step(state, peer_event, show(peer_id))
        replies: List[Reply] = []
        for action in transition.actions:
            replies.extend(self._carry_out[action](detail, now))
        return replies

    # --- the peer's lifecycle (PeerAction) ----------------------------------------------------------------

    def _acknowledge(self, event: FromPeer, now: float) -> List[Reply]:
        peer_id, hello = event.peer_id, event.message
        if peer_id not in self._greeted_peers:
            logger.debug(f"ObjectStorageServer: peer {show(peer_id)} ({hello.role.name.lower()}) said Hello")
        reads_frames = (hello.version.major, hello.version.minor) >= _FRAMES_VERSION
        isolating = knows(hello.version, ISOLATION_VERSION)
        self._greeted_peers[peer_id] = Peer(hello.role, event.credential, reads_frames, isolating)
        if hello.role is PeerRole.SCHEDULER and isolating:
            self._admissions.kept = True
        ack = HelloAck(
            version=PROTOCOL_VERSION,
            object_storage_address="",
            heartbeat_interval_seconds=0.0,
            timeout_seconds=0.0,
            role=PeerRole.OBJECT_STORAGE,  # who answered (protocol 1.5): a client given this port by mistake says so
            max_message_size=storage_max_message_size(self.max_object_size),  # the shell's socket takes no more
            client_quota=self.max_client_memory,
        )
        return [Reply(peer_id, ack)]

    def _forget(self, peer_id: bytes, now: float) -> List[Reply]:
        del self._greeted_peers[peer_id]
        logger.debug(f"ObjectStorageServer: peer {show(peer_id)} left")
        return []

    def _refuse_version(self, event: FromPeer, now: float) -> List[Reply]:
        self._greeted_peers.pop(event.peer_id, None)
        reason = incompatibility(event.message.version)
        logger.warning(f"ObjectStorageServer: refuse Hello from {show(event.peer_id)}: {reason}")
        return [self._refusal(event.peer_id, str(reason))]

    def _refuse_credential(self, event: FromPeer, now: float) -> List[Reply]:
        peer_id, message, credential = event.peer_id, event.message, event.credential
        peer = self._greeted_peers.get(peer_id)
        if peer is not None and peer.credential.key != credential.key:
            reason = f"the peer {show(peer_id)} said Hello with another key: {credential.name()} cannot use it"
        elif type(message) is Hello:
            reason = f"{credential.name()} is not authorized as a {message.role.name.lower()} here"
        else:
            reason = f"{credential.name()} is no longer authorized as a {peer.role.name.lower()} here"  # type: ignore
        if self._refusals.should_log(credential.key, now) is not None:
            logger.warning(f"ObjectStorageServer: refuse {message_name(type(message))} from {show(peer_id)}: {reason}")
        return [self._refusal(peer_id, reason)]

    def _refuse_stranger(self, event: FromPeer, now: float) -> List[Reply]:
        logger.warning(
            f"ObjectStorageServer: refuse {message_name(type(event.message))} from {show(event.peer_id)}: "
            "it did not send Hello"
        )
        return [self._refusal(event.peer_id, "send Hello first")]

    def _serve(self, event: FromPeer, now: float) -> List[Reply]:
        peer_id, message = event.peer_id, event.message
        serve = self._requests.get(type(message))
        if serve is None:
            name = message_name(type(message))
            logger.warning(f"ObjectStorageServer: refuse unexpected {name} from {show(peer_id)}")
            return [self._refusal(peer_id, f"the object storage server does not serve {name} messages")]
        return serve(peer_id, message, event.blobs)

    # --- ObjectRequest -----------------------------------------------------------------------------------

    def _on_object_request(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        kind_name = _kind_name(request.kind)
        if request.kind == ObjectRequestKind.PUT:
            problem = _frame_count_problem(request, len(blobs))
            if problem:
                return self._refuse_request(peer_id, request, problem)
        elif request.frame_counts:
            return self._refuse_request(peer_id, request, "has frame counts: only put requests carry payloads")
        elif blobs:
            return self._refuse_request(
                peer_id, request, f"carries {len(blobs)} payload frames: only put requests carry payloads"
            )
        handler = self._request_handlers.get(request.kind)
        if handler is None:  # pragma: no cover - the codec only produces known kinds
            return self._refuse_request(peer_id, request, f"has unknown kind {kind_name}")
        problem = self._forbidden(peer_id, request.kind, request.owner_id, request.object_ids)
        if problem:
            return self._refuse_request(peer_id, request, problem)
        return handler(peer_id, request, blobs)

    def _forbidden(self, peer_id: bytes, kind: ObjectRequestKind, owner_id: bytes, object_ids: Sequence[bytes]) -> str:
        role = self._greeted_peers[peer_id].role
        return forbidden(peer_id, role, kind, owner_id, object_ids, self._owner_or_none)

    def _reachable_owner(self, peer_id: bytes, kind: ObjectRequestKind, owner_id: bytes) -> Optional[bytes]:
        return reachable_owner(peer_id, self._greeted_peers[peer_id].role, kind, owner_id)

    def _owner_or_none(self, object_id: bytes) -> Optional[bytes]:
        stored = self._objects.get(object_id)
        return None if stored is None else stored.owner_id

    def _put(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        if self._greeted_peers[peer_id].role is PeerRole.WORKER and not self._admissions.admitted(request.owner_id):
            return self._refuse_owner(peer_id, request)
        statuses: List[ObjectStatus] = []
        sizes: List[int] = []
        refusals: List[str] = []
        objects = object_frames.split(request.frame_counts, len(request.object_ids), blobs)
        for object_id, frames in zip(request.object_ids, objects, strict=True):
            size = sum(blob_size(frame) for frame in frames)
            status, refusal = self._store(request.owner_id, object_id, frames, size)
            if status is ObjectStatus.OVER_QUOTA and not self._greeted_peers[peer_id].isolating:
                status = ObjectStatus.STORAGE_FULL  # what a peer before 1.8 reads
            statuses.append(status)
            sizes.append(size)
            if refusal:
                refusals.append(refusal)
        reason = ""
        if refusals:
            reason = f"{len(refusals)} of {len(statuses)} objects refused; first: {refusals[0]}"
            logger.warning(f"ObjectStorageServer: put from {show(peer_id)}: {reason}")
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.PUT,
            object_ids=list(request.object_ids),
            statuses=statuses,
            sizes=sizes,
            reason=reason,
        )
        return [Reply(peer_id, response)]

    def _summary(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        """The largest objects, and what is in memory and on disk (the scheduler's question, for monitors)."""
        summary = self.places.summary(self._objects, LARGEST_OBJECTS)
        response = ObjectResponse(request_id=request.request_id, kind=ObjectRequestKind.SUMMARY, summary=summary)
        return [Reply(peer_id, response)]

    def _refuse_owner(self, peer_id: bytes, request: ObjectRequest) -> List[Reply]:
        """A worker's put for an owner the scheduler does not serve (gone, or never there): nothing is stored, as
        nothing would ever clear it."""
        reason = f"the owner {show(request.owner_id)} is not a client the scheduler serves (it left, or never came)"
        logger.warning(f"ObjectStorageServer: put from {show(peer_id)} refused: {reason}")
        count = len(request.object_ids)
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.PUT,
            object_ids=list(request.object_ids),
            statuses=[ObjectStatus.NOT_FOUND] * count,
            sizes=[0] * count,
            reason=reason,
        )
        return [Reply(peer_id, response)]

    def _store(self, owner_id: bytes, object_id: bytes, frames: Sequence[Any], size: int) -> Tuple[ObjectStatus, str]:
        """Store the object, or say why not: its status, and the reason of a refusal ("" when stored)."""
        what = f"object {show(object_id)} of {show_size(size)}"
        if size > self.max_object_size:
            return (
                ObjectStatus.TOO_LARGE,
                f"{what} is over the maximum object size of {show_size(self.max_object_size)} (raise it with the "
                "storage server's --max-object-size, the scheduler's that starts it, or SchedulerClusterCombo's "
                "max_object_size=)",
            )
        previous = self._objects.get(object_id)
        freed = previous.size if previous is not None else 0
        replaced = freed if previous is not None and previous.owner_id == owner_id else 0
        held = self._bytes_by_owner.get(owner_id, 0) - replaced
        capacity = self.places.max_memory + self.places.max_disk
        if self.max_client_memory < capacity and held + size > self.max_client_memory:
            return ObjectStatus.OVER_QUOTA, (
                f"{what} does not fit in the quota of its owner {show(owner_id)}: it holds {show_size(held)} of "
                f"{show_size(self.max_client_memory)} (scaler_object_storage_server --max-client-memory)"
            )
        full = self.places.refusal(object_id, size)
        if full:
            return ObjectStatus.STORAGE_FULL, f"{what} does not fit: {full}"
        if previous is not None:
            self._remove(object_id)
        self._objects[object_id] = _StoredObject(owner_id, frames, size)
        self._objects_by_owner.setdefault(owner_id, {})[object_id] = None
        self._bytes_by_owner[owner_id] = self._bytes_by_owner.get(owner_id, 0) + size
        self.places.add(object_id, size, self._objects)
        return ObjectStatus.OK, ""

    def _get(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        statuses: List[ObjectStatus] = []
        sizes: List[int] = []
        found: List[Any] = []
        counts: List[int] = []
        unreadable: List[bytes] = []
        peer = self._greeted_peers[peer_id]
        reads_frames = peer.reads_frames
        owner = self._reachable_owner(peer_id, ObjectRequestKind.GET, request.owner_id)
        scope = self._admissions.read_scope(peer, request.owner_id)
        scope_of = self._admissions.scope_of
        for object_id in request.object_ids:
            stored = self._objects.get(object_id)
            if stored is not None and (
                (owner is not None and stored.owner_id != owner)
                or (scope is not None and scope_of(stored.owner_id) != scope)
            ):
                stored = None  # another client's (or another scope's): as if it did not exist
            if stored is None or (stored.frame_count > 1 and not reads_frames):
                if stored is not None:
                    unreadable.append(object_id)
                statuses.append(ObjectStatus.NOT_FOUND)
                sizes.append(0)
            else:
                frames = self.places.use(object_id, self._objects)
                statuses.append(ObjectStatus.OK)
                sizes.append(stored.size)
                found.extend(frames)
                counts.append(len(frames))
        reason = ""
        if unreadable:
            reason = (
                f"{len(unreadable)} objects (first: {show(unreadable[0])}) have several frames, which peers of "
                f"protocol 1.0 cannot read: upgrade this peer"
            )
            logger.warning(f"ObjectStorageServer: get from {show(peer_id)}: {reason}")
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.GET,
            object_ids=list(request.object_ids),
            statuses=statuses,
            sizes=sizes,
            reason=reason,
            frame_counts=counts if len(found) != len(counts) else [],
        )
        return [Reply(peer_id, response, found)]

    def _delete(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        statuses: List[ObjectStatus] = []
        sizes: List[int] = []
        owner = self._reachable_owner(peer_id, ObjectRequestKind.DELETE, request.owner_id)
        for object_id in request.object_ids:
            stored = self._remove(object_id, owner)
            statuses.append(ObjectStatus.NOT_FOUND if stored is None else ObjectStatus.OK)
            sizes.append(0 if stored is None else stored.size)
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.DELETE,
            object_ids=list(request.object_ids),
            statuses=statuses,
            sizes=sizes,
        )
        return [Reply(peer_id, response)]

    def _clear_owner(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        deleted = self._clear(peer_id, request.owner_id)
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.CLEAR_OWNER,
            object_ids=[object_id for object_id, _ in deleted],
            statuses=[ObjectStatus.OK] * len(deleted),
            sizes=[size for _, size in deleted],
        )
        return [Reply(peer_id, response)]

    def _admit(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        """The scheduler serves the client ``ownerId`` (its tasks read the objects of ``scopeId``): answered, so
        that it answers the client's Hello only once it is admitted here."""
        self._admissions.admit(request.owner_id, request.scope_id)
        response = ObjectResponse(request_id=request.request_id, kind=ObjectRequestKind.ADMIT)
        return [Reply(peer_id, response)]

    def _usage(self, peer_id: bytes, request: ObjectRequest, blobs: Sequence[Any]) -> List[Reply]:
        """What the objects of each owner named in ``objectIds`` take, in ``sizes``, and of that what is spilled to
        disk, in ``spilledSizes`` (the scheduler's monitor)."""
        owners = list(request.object_ids)
        spilled = self.places.spilled_by_owner
        response = ObjectResponse(
            request_id=request.request_id,
            kind=ObjectRequestKind.USAGE,
            object_ids=owners,
            statuses=[ObjectStatus.OK] * len(owners),
            sizes=[self._bytes_by_owner.get(owner, 0) for owner in owners],
            spilled_sizes=[spilled.get(owner, 0) for owner in owners],
        )
        return [Reply(peer_id, response)]

    def _refuse_request(self, peer_id: bytes, request: ObjectRequest, problem: str) -> List[Reply]:
        reason = f"object request {request.request_id} ({_kind_name(request.kind)}) {problem}"
        logger.warning(f"ObjectStorageServer: refuse request from {show(peer_id)}: {reason}")
        return [self._refusal(peer_id, reason)]

    # --- ObjectInstruction (scheduler clean-up, fire and forget) -----------------------------------------

    def _on_object_instruction(
        self, peer_id: bytes, instruction: ObjectInstruction, blobs: Sequence[Any]
    ) -> List[Reply]:
        kind = INSTRUCTED.get(instruction.kind)
        if kind is None:  # CREATE is the client's bookkeeping towards the scheduler; storage has nothing to do
            return []
        problem = self._forbidden(peer_id, kind, instruction.owner_id, ())
        if problem:
            logger.warning(f"ObjectStorageServer: ignore object instruction from {show(peer_id)}: it {problem}")
        elif kind is ObjectRequestKind.DELETE:
            owner = self._reachable_owner(peer_id, kind, instruction.owner_id)
            for object_id in instruction.object_ids:
                self._remove(object_id, owner)
        else:
            self._clear(peer_id, instruction.owner_id)
        return []

    # --- bookkeeping -------------------------------------------------------------------------------------

    def _remove(self, object_id: bytes, owner_id: Optional[bytes] = None) -> Optional[_StoredObject]:
        """Remove the object (only if ``owner_id`` owns it, when given); what was removed."""
        stored = self._objects.get(object_id)
        if stored is None or (owner_id is not None and stored.owner_id != owner_id):
            return None
        del self._objects[object_id]
        self.places.remove(object_id, stored.owner_id)
        owned = self._objects_by_owner[stored.owner_id]
        del owned[object_id]
        if owned:
            self._bytes_by_owner[stored.owner_id] -= stored.size
        else:
            del self._objects_by_owner[stored.owner_id]
            del self._bytes_by_owner[stored.owner_id]
        return stored

    def _clear(self, peer_id: bytes, owner_id: bytes) -> List[Tuple[bytes, int]]:
        """Remove the owner's objects; the scheduler's clear also ends the owner's admission (it left, or cleared:
        the scheduler admits a client that stays again)."""
        if self._greeted_peers[peer_id].role is PeerRole.SCHEDULER:
            self._admissions.forget(owner_id)
        return self._remove_owner(owner_id)

    def _remove_owner(self, owner_id: bytes) -> List[Tuple[bytes, int]]:
        owned = self._objects_by_owner.pop(owner_id, {})
        self._bytes_by_owner.pop(owner_id, None)
        deleted: List[Tuple[bytes, int]] = []
        for object_id in owned:
            stored = self._objects.pop(object_id)
            self.places.remove(object_id, owner_id)
            deleted.append((object_id, stored.size))
        return deleted

    @staticmethod
    def _refusal(peer_id: bytes, reason: str) -> Reply:
        return Reply(peer_id, Refusal(version=PROTOCOL_VERSION, reason=reason))


def _frame_count_problem(request: ObjectRequest, frames: int) -> str:
    """Why the payload frames of a put do not match its object IDs and frame counts ("": they do)."""
    objects = len(request.object_ids)
    counts = request.frame_counts
    if not counts:
        return "" if frames == objects else f"has {objects} object IDs but {frames} payload frames"
    if len(counts) != objects:
        return f"has {objects} object IDs but {len(counts)} frame counts"
    if min(counts) < 1:
        return "has an object of 0 frames"
    if sum(counts) != frames:
        return f"has frame counts for {sum(counts)} payload frames but {frames} payload frames"
    return ""


def _kind_name(kind: ObjectRequestKind) -> str:
    """The schema's name of a request kind (``clearOwner``)."""
    head, *rest = kind.name.lower().split("_")
    return head + "".join(part.title() for part in rest)
