"""Who may do what at the storage core: the roles of keys, the identity bound to a key, ownership."""

from __future__ import annotations

from typing import Any, List, Sequence

from scaler.protocol.ids import IDGenerator
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
)
from scaler.protocol.security import OPEN, Credential
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.storage.object_store import ObjectStore
from scaler.storage.storage_events import FromPeer, Reply

ALICE, BOB, WORKER, SCHEDULER = b"C|a|1|alice", b"C|b|2|bob", b"W|w|3|worker", b"S|s|4|scheduler"
ALICE_KEY = Credential("0" * 40, frozenset({PeerRole.CLIENT}))
BOB_KEY = Credential("1" * 40, frozenset({PeerRole.CLIENT}))
WORKER_KEY = Credential("2" * 40, frozenset({PeerRole.WORKER}))
MONITOR_KEY = Credential("3" * 40, frozenset({PeerRole.MONITOR}))

ids = IDGenerator()


def hello(store: ObjectStore, peer: bytes, role: PeerRole, credential: Credential = OPEN) -> Any:
    (reply,) = store.handle(FromPeer(peer, Hello(PROTOCOL_VERSION, role), credential=credential), 0.0)
    return reply.message


def ask(
    store: ObjectStore, peer: bytes, kind: ObjectRequestKind, object_ids: Sequence[bytes], owner: bytes = b"",
    blobs: Sequence[Any] = (), credential: Credential = OPEN,
) -> Any:  # fmt: skip
    request = ObjectRequest(5, kind, owner, list(object_ids))
    replies: List[Reply] = store.handle(FromPeer(peer, request, blobs, credential), 0.0)
    (reply,) = replies
    assert reply.peer_id == peer
    return reply.message


def put(store: ObjectStore, peer: bytes, object_ids: Sequence[bytes], owner: bytes, **kw: Any) -> Any:
    return ask(store, peer, ObjectRequestKind.PUT, object_ids, owner, [b"data"] * len(object_ids), **kw)


def cluster() -> ObjectStore:
    store = ObjectStore()
    assert type(hello(store, ALICE, PeerRole.CLIENT)) is HelloAck
    assert type(hello(store, BOB, PeerRole.CLIENT)) is HelloAck
    assert type(hello(store, WORKER, PeerRole.WORKER)) is HelloAck
    assert type(hello(store, SCHEDULER, PeerRole.SCHEDULER)) is HelloAck
    return store


def statuses(message: Any) -> List[ObjectStatus]:
    assert type(message) is ObjectResponse, message
    return list(message.statuses)


def test_a_client_reads_and_deletes_only_its_own_objects():
    store = cluster()
    mine, theirs = ids.next_id(), ids.next_id()
    assert statuses(put(store, ALICE, [mine], ALICE)) == [ObjectStatus.OK]
    assert statuses(put(store, BOB, [theirs], BOB)) == [ObjectStatus.OK]
    answer = ask(store, ALICE, ObjectRequestKind.GET, [mine, theirs])
    assert statuses(answer) == [ObjectStatus.OK, ObjectStatus.NOT_FOUND]
    assert statuses(ask(store, ALICE, ObjectRequestKind.DELETE, [theirs, mine])) == [
        ObjectStatus.NOT_FOUND,
        ObjectStatus.OK,
    ]
    assert theirs in store and store.owner_of(theirs) == BOB


def test_a_client_puts_and_clears_for_itself_only_and_replaces_no_one_elses_object():
    store = cluster()
    theirs = ids.next_id()
    put(store, BOB, [theirs], BOB)
    assert "a client owns and clears only its own" in put(store, ALICE, [ids.next_id()], BOB).reason
    assert "not this peer's to replace" in put(store, ALICE, [theirs], ALICE).reason
    refusal = ask(store, ALICE, ObjectRequestKind.CLEAR_OWNER, [], BOB)
    assert type(refusal) is Refusal and store.objects_of(BOB) == [theirs]
    store.handle(FromPeer(ALICE, ObjectInstruction(ObjectInstructionKind.CLEAR, BOB, [])), 0.0)
    store.handle(FromPeer(ALICE, ObjectInstruction(ObjectInstructionKind.DELETE, BOB, [theirs])), 0.0)
    assert store.objects_of(BOB) == [theirs]


def test_a_worker_reads_any_object_and_puts_results_for_clients_but_replaces_and_deletes_nothing():
    store = cluster()
    argument, result = ids.next_id(), ids.next_id()
    put(store, ALICE, [argument], ALICE)
    assert statuses(ask(store, WORKER, ObjectRequestKind.GET, [argument])) == [ObjectStatus.OK]
    assert statuses(put(store, WORKER, [result], ALICE)) == [ObjectStatus.OK]
    assert store.owner_of(result) == ALICE
    assert "not this peer's to replace" in put(store, WORKER, [argument], ALICE).reason
    assert "not allowed to a worker" in ask(store, WORKER, ObjectRequestKind.DELETE, [argument]).reason
    assert "not allowed to a worker" in ask(store, WORKER, ObjectRequestKind.CLEAR_OWNER, [], ALICE).reason
    assert statuses(ask(store, ALICE, ObjectRequestKind.GET, [result])) == [ObjectStatus.OK]


def test_the_scheduler_deletes_the_objects_of_the_owner_it_names_only():
    store = cluster()
    alices, bobs = ids.next_id(), ids.next_id()
    put(store, ALICE, [alices], ALICE)
    put(store, BOB, [bobs], BOB)
    answer = ask(store, SCHEDULER, ObjectRequestKind.DELETE, [alices, bobs], ALICE)
    assert statuses(answer) == [ObjectStatus.OK, ObjectStatus.NOT_FOUND]
    assert ask(store, SCHEDULER, ObjectRequestKind.CLEAR_OWNER, [], BOB).object_ids == [bobs]


def test_a_monitor_is_greeted_but_may_not_use_storage():
    store = ObjectStore()
    assert type(hello(store, b"M|m|5|top", PeerRole.MONITOR)) is HelloAck
    assert "not allowed to a monitor" in ask(store, b"M|m|5|top", ObjectRequestKind.GET, []).reason


def test_a_key_says_hello_only_as_a_role_it_is_authorized_as():
    store = ObjectStore()
    refusal = hello(store, WORKER, PeerRole.WORKER, MONITOR_KEY)
    assert type(refusal) is Refusal and "is not authorized as a worker" in refusal.reason
    assert "SHA256:" in refusal.reason
    assert "send Hello first" in ask(store, WORKER, ObjectRequestKind.GET, [], credential=MONITOR_KEY).reason
    assert type(hello(store, ALICE, PeerRole.WORKER, ALICE_KEY)) is Refusal
    assert type(hello(store, ALICE, PeerRole.CLIENT, ALICE_KEY)) is HelloAck


def test_an_identity_stays_bound_to_the_key_that_said_hello():
    store = ObjectStore()
    hello(store, ALICE, PeerRole.CLIENT, ALICE_KEY)
    object_id = ids.next_id()
    put(store, ALICE, [object_id], ALICE, credential=ALICE_KEY)
    # another client key behind the same identity: refused, however often it says Hello
    for _ in range(2):
        refusal = hello(store, ALICE, PeerRole.CLIENT, BOB_KEY)
        assert type(refusal) is Refusal and "said Hello with another key" in refusal.reason
    taken = ask(store, ALICE, ObjectRequestKind.DELETE, [object_id], credential=BOB_KEY)
    assert type(taken) is Refusal and object_id in store
    assert statuses(ask(store, ALICE, ObjectRequestKind.GET, [object_id], credential=ALICE_KEY)) == [ObjectStatus.OK]


def test_a_key_revoked_after_its_hello_is_refused_and_served_again_once_authorized():
    store = ObjectStore()
    hello(store, ALICE, PeerRole.CLIENT, ALICE_KEY)
    revoked = Credential(ALICE_KEY.key, frozenset())  # the authorized keys were read again without it
    refusal = ask(store, ALICE, ObjectRequestKind.GET, [], credential=revoked)
    assert type(refusal) is Refusal and "no longer authorized as a client" in refusal.reason
    again = Credential(ALICE_KEY.key, frozenset({PeerRole.CLIENT}))  # read again, with it
    assert statuses(ask(store, ALICE, ObjectRequestKind.GET, [], credential=again)) == []
