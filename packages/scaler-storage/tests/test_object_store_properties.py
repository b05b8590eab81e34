"""The storage core under random interleavings of puts, gets, deletes and clears by owner, from several peers.

Whatever the order: the store answers like a dict model (objects of one or several frames, replaced, refused
when too large or when memory is full), its memory accounting is never negative, never over the limit, and
equals the payload bytes of the objects it holds; the objects of each owner are exactly those it holds for
that owner; a peer that did not say Hello (or said it with a bad version) is refused and changes nothing.
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
    Refusal,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.storage.object_store import ObjectStore
from scaler.storage.storage_events import FromPeer

MAX_OBJECT_SIZE = 40
MAX_MEMORY = 200
PEERS = [b"C|host|1|a", b"W|host|2|b", b"S|host|3|c"]
OWNERS = [b"C|host|1|a", b"C|host|9|z"]
OBJECT_IDS = [bytes([n]) * 16 for n in range(8)]

_frames = st.lists(st.binary(max_size=30), min_size=1, max_size=3)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 1),
                  st.lists(st.tuples(st.sampled_from(OBJECT_IDS), _frames), min_size=1, max_size=3)),
        st.tuples(st.just("get"), st.integers(0, 2), st.lists(st.sampled_from(OBJECT_IDS), max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 2), st.lists(st.sampled_from(OBJECT_IDS), max_size=3)),
        st.tuples(st.just("delete_instruction"), st.integers(0, 2), st.lists(st.sampled_from(OBJECT_IDS), max_size=3)),
        st.tuples(st.just("clear"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("clear_instruction"), st.integers(0, 2), st.integers(0, 1)),
        st.tuples(st.just("hello"), st.integers(0, 2), st.booleans()),
    ),
    max_size=60,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_random_requests_match_a_dict_model_and_memory_always_adds_up(steps):
    store = ObjectStore(max_object_size=MAX_OBJECT_SIZE, max_memory=MAX_MEMORY)
    model: Dict[bytes, Tuple[bytes, List[bytes]]] = {}  # object ID -> (owner, frames)
    greeted = {PEERS[0]}
    store.handle(FromPeer(PEERS[0], Hello(version=PROTOCOL_VERSION)), 0.0)

    def used() -> int:
        return sum(len(frame) for _, frames in model.values() for frame in frames)

    for now, (action, p, *rest) in enumerate(steps):
        peer = PEERS[p]
        if action == "hello":
            (compatible,) = rest
            version = PROTOCOL_VERSION if compatible else Version(PROTOCOL_VERSION.major + 1, 0)
            (reply,) = store.handle(FromPeer(peer, Hello(version=version)), float(now))
            assert type(reply.message) is (HelloAck if compatible else Refusal)
            (greeted.add if compatible else greeted.discard)(peer)
            continue
        if action == "put":
            owner, objects = OWNERS[rest[0]], rest[1]
            message = ObjectRequest(
                1, ObjectRequestKind.PUT, owner, [i for i, _ in objects], [len(f) for _, f in objects]
            )
            replies = store.handle(FromPeer(peer, message, [f for _, frames in objects for f in frames]), float(now))
        elif action in ("get", "delete"):
            kind = ObjectRequestKind.GET if action == "get" else ObjectRequestKind.DELETE
            replies = store.handle(FromPeer(peer, ObjectRequest(1, kind, b"", list(rest[0]))), float(now))
        elif action == "delete_instruction":
            instruction = ObjectInstruction(ObjectInstructionKind.DELETE, b"", list(rest[0]))
            replies = store.handle(FromPeer(peer, instruction), float(now))
        elif action == "clear":
            request = ObjectRequest(1, ObjectRequestKind.CLEAR_OWNER, OWNERS[rest[0]], [])
            replies = store.handle(FromPeer(peer, request), float(now))
        else:
            instruction = ObjectInstruction(ObjectInstructionKind.CLEAR, OWNERS[rest[0]], [])
            replies = store.handle(FromPeer(peer, instruction), float(now))

        if peer not in greeted:
            assert [type(r.message) for r in replies] == [Refusal]
            assert replies[0].message.reason == "send Hello first"
        elif action == "put":
            (reply,) = replies
            for (object_id, frames), status in zip(rest[1], reply.message.statuses, strict=True):
                size = sum(len(f) for f in frames)
                freed = sum(len(f) for f in model[object_id][1]) if object_id in model else 0
                if size > MAX_OBJECT_SIZE:
                    assert status == ObjectStatus.TOO_LARGE
                elif used() - freed + size > MAX_MEMORY:
                    assert status == ObjectStatus.STORAGE_FULL
                else:
                    assert status == ObjectStatus.OK
                    model[object_id] = (owner, frames)
        elif action == "get":
            (reply,) = replies
            assert reply.message.statuses == [
                ObjectStatus.OK if i in model else ObjectStatus.NOT_FOUND for i in rest[0]
            ]
            assert [bytes(b) for b in reply.blobs] == [f for i in rest[0] if i in model for f in model[i][1]]
        elif action in ("delete", "delete_instruction"):
            expected = []
            for object_id in rest[0]:
                expected.append(ObjectStatus.OK if object_id in model else ObjectStatus.NOT_FOUND)
                model.pop(object_id, None)
            if action == "delete":
                (reply,) = replies
                assert type(reply.message) is ObjectResponse and reply.message.statuses == expected
            else:
                assert replies == []
        else:
            owner = OWNERS[rest[0]]
            gone = {i for i, (o, _) in model.items() if o == owner}
            for object_id in gone:
                del model[object_id]
            if action == "clear":
                (reply,) = replies
                assert set(reply.message.object_ids) == gone
            else:
                assert replies == []

        assert 0 <= store.used_memory == used() <= MAX_MEMORY
        assert store.object_count == len(model)
        for owner in OWNERS:
            assert set(store.objects_of(owner)) == {i for i, (o, _) in model.items() if o == owner}
