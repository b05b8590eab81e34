"""The storage core under random interleavings of puts, gets, deletes and clears by owner, from several peers.

Whatever the order: the store answers like a dict model (objects of one or several frames, replaced, refused
when too large, over their owner's quota or when memory is full), its memory accounting is never negative,
never over the limit, and equals the payload bytes of the objects it holds, in all and per owner; the objects
of each owner are exactly those it holds for that owner; a peer that did not say Hello (or said it with a bad
version) is refused and changes nothing; and each peer does only what its role may: a client puts, reads,
deletes and clears only its own objects, a worker reads anything and puts new objects only (once a scheduler
that admits clients said Hello: only for the clients it serves, none here, and reads only in the scope of the
owner it names), the scheduler deletes the objects of the owner it names.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol.messages import (
    Hello,
    HelloAck,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PeerRole,
    Refusal,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.storage.object_store import ObjectStore
from scaler.storage.storage_events import FromPeer

MAX_OBJECT_SIZE = 40
MAX_MEMORY = 200
MAX_CLIENT_MEMORY = 120  # each owner's quota
PEERS = [b"C|host|1|a", b"W|host|2|b", b"S|host|3|c"]
ROLES = [PeerRole.CLIENT, PeerRole.WORKER, PeerRole.SCHEDULER]
OWNERS = [b"C|host|1|a", b"C|host|9|z"]  # the client peer, and another client
OBJECT_IDS = [bytes([n]) * 16 for n in range(8)]
KINDS = {"put": ObjectRequestKind.PUT, "get": ObjectRequestKind.GET, "delete": ObjectRequestKind.DELETE,
         "delete_instruction": ObjectRequestKind.DELETE, "clear": ObjectRequestKind.CLEAR_OWNER,
         "clear_instruction": ObjectRequestKind.CLEAR_OWNER}  # fmt: skip
ALLOWED = {
    PeerRole.CLIENT: set(ObjectRequestKind) - {ObjectRequestKind.USAGE},
    PeerRole.WORKER: {ObjectRequestKind.PUT, ObjectRequestKind.GET},
    PeerRole.SCHEDULER: set(ObjectRequestKind),
}

_frames = st.lists(st.binary(max_size=30), min_size=1, max_size=3)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 1),
                  st.lists(st.tuples(st.sampled_from(OBJECT_IDS), _frames), min_size=1, max_size=3)),
        st.tuples(st.just("get"), st.integers(0, 2), st.integers(0, 1),
                  st.lists(st.sampled_from(OBJECT_IDS), max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 1),
                  st.lists(st.sampled_from(OBJECT_IDS), max_size=3)),
        st.tuples(st.just("delete_instruction"), st.integers(0, 2), st.integers(0, 1),
                  st.lists(st.sampled_from(OBJECT_IDS), max_size=3)),
        st.tuples(st.just("clear"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("clear_instruction"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("hello"), st.integers(0, 2), st.booleans()),
    ),
    max_size=60,
)  # fmt: skip


def _refused(model: Dict[bytes, Tuple[bytes, List[bytes]]], p: int, action: str, owner: bytes, rest) -> bool:
    """Whether the store refuses the whole request (or ignores the instruction) of peer ``p``."""
    role, peer, kind = ROLES[p], PEERS[p], KINDS[action]
    if kind not in ALLOWED[role]:
        return True
    if role is PeerRole.CLIENT and kind in (ObjectRequestKind.PUT, ObjectRequestKind.CLEAR_OWNER) and owner != peer:
        return True
    if kind is ObjectRequestKind.PUT and role is not PeerRole.SCHEDULER:
        replaced = [model[i][0] for i, _ in rest[0] if i in model]
        return any(role is PeerRole.WORKER or replaced_owner != peer for replaced_owner in replaced)
    return False


def _reachable(
    model: Dict[bytes, Tuple[bytes, List[bytes]]], p: int, action: str, owner: bytes, object_id: bytes, admits: bool
) -> bool:
    """Whether a get or delete of peer ``p`` reaches this object: a client's own; the scheduler deletes the
    named owner's; a worker reads anything, but once a scheduler that admits clients said Hello, only what is
    in the scope of the owner it names (no client is admitted here: an owner's scope is itself)."""
    if object_id not in model:
        return False
    if ROLES[p] is PeerRole.CLIENT:
        return model[object_id][0] == PEERS[p]
    if ROLES[p] is PeerRole.SCHEDULER and action != "get":
        return model[object_id][0] == owner
    if ROLES[p] is PeerRole.WORKER and admits:
        return model[object_id][0] == owner
    return True


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_random_requests_match_a_dict_model_and_memory_always_adds_up(steps):
    store = ObjectStore(max_object_size=MAX_OBJECT_SIZE, max_memory=MAX_MEMORY, max_client_memory=MAX_CLIENT_MEMORY)
    model: Dict[bytes, Tuple[bytes, List[bytes]]] = {}  # object ID -> (owner, frames)
    greeted = {PEERS[0]}
    admits = False  # a scheduler of this version said Hello: the store keeps who it serves (no one, here)
    store.handle(FromPeer(PEERS[0], Hello(version=PROTOCOL_VERSION, role=ROLES[0])), 0.0)

    def used() -> int:
        return sum(len(frame) for _, frames in model.values() for frame in frames)

    def held(owner: bytes) -> int:
        return sum(len(frame) for held_by, frames in model.values() if held_by == owner for frame in frames)

    for now, (action, p, *rest) in enumerate(steps):
        peer = PEERS[p]
        if action == "hello":
            (compatible,) = rest
            version = PROTOCOL_VERSION if compatible else Version(PROTOCOL_VERSION.major + 1, 0)
            (reply,) = store.handle(FromPeer(peer, Hello(version=version, role=ROLES[p])), float(now))
            assert type(reply.message) is (HelloAck if compatible else Refusal)
            (greeted.add if compatible else greeted.discard)(peer)
            admits = admits or (compatible and ROLES[p] is PeerRole.SCHEDULER)
            continue
        owner, rest = OWNERS[rest[0]], rest[1:]
        if action == "put":
            objects = rest[0]
            message = ObjectRequest(
                1, ObjectRequestKind.PUT, owner, [i for i, _ in objects], [len(f) for _, f in objects]
            )
            replies = store.handle(FromPeer(peer, message, [f for _, frames in objects for f in frames]), float(now))
        elif action in ("get", "delete", "clear"):
            message = ObjectRequest(1, KINDS[action], owner, list(rest[0]) if rest else [])
            replies = store.handle(FromPeer(peer, message), float(now))
        else:
            kind = ObjectInstructionKind.DELETE if action == "delete_instruction" else ObjectInstructionKind.CLEAR
            replies = store.handle(FromPeer(peer, ObjectInstruction(kind, owner, list(rest[0]) if rest else [])), 0.0)

        if peer not in greeted:
            assert [type(r.message) for r in replies] == [Refusal]
            assert replies[0].message.reason == "send Hello first"
        elif _refused(model, p, action, owner, rest):
            if action.endswith("_instruction"):
                assert replies == []
            else:
                assert [type(r.message) for r in replies] == [Refusal]
        elif action == "put" and ROLES[p] is PeerRole.WORKER and admits:
            (reply,) = replies  # for an owner the scheduler does not serve: nothing is stored
            assert reply.message.statuses == [ObjectStatus.NOT_FOUND] * len(rest[0])
        elif action == "put":
            (reply,) = replies
            for (object_id, frames), status in zip(rest[0], reply.message.statuses, strict=True):
                size = sum(len(f) for f in frames)
                freed = sum(len(f) for f in model[object_id][1]) if object_id in model else 0
                replaced = freed if object_id in model and model[object_id][0] == owner else 0
                if size > MAX_OBJECT_SIZE:
                    assert status == ObjectStatus.TOO_LARGE
                elif held(owner) - replaced + size > MAX_CLIENT_MEMORY:
                    assert status == ObjectStatus.OVER_QUOTA
                elif used() - freed + size > MAX_MEMORY:
                    assert status == ObjectStatus.STORAGE_FULL
                else:
                    assert status == ObjectStatus.OK
                    model[object_id] = (owner, frames)
        elif action == "get":
            (reply,) = replies
            seen = [i for i in rest[0] if _reachable(model, p, action, owner, i, admits)]
            assert reply.message.statuses == [ObjectStatus.OK if i in seen else ObjectStatus.NOT_FOUND for i in rest[0]]
            assert [bytes(b) for b in reply.blobs] == [f for i in seen for f in model[i][1]]
        elif action in ("delete", "delete_instruction"):
            expected = []
            for object_id in rest[0]:
                reached = _reachable(model, p, action, owner, object_id, admits)
                expected.append(ObjectStatus.OK if reached else ObjectStatus.NOT_FOUND)
                if reached:
                    del model[object_id]
            if action == "delete":
                (reply,) = replies
                assert type(reply.message) is ObjectResponse and reply.message.statuses == expected
            else:
                assert replies == []
        else:
            gone = {i for i, (o, _) in model.items() if o == owner}
            for object_id in gone:
                del model[object_id]
            if action == "clear":
                (reply,) = replies
                assert set(reply.message.object_ids) == gone
            else:
                assert replies == []

        assert 0 <= store.used_memory == used() <= MAX_MEMORY
        assert all(store.bytes_of(owner) == held(owner) <= MAX_CLIENT_MEMORY for owner in OWNERS)
        assert store.object_count == len(model)
        for owner in OWNERS:
            assert set(store.objects_of(owner)) == {i for i, (o, _) in model.items() if o == owner}
