"""Who may do what at the storage core: the roles of keys, the identity bound to a key, ownership."""

from __future__ import annotations

from typing import Any, List, Sequence

import pytest

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
    Version,
)
from scaler.protocol.security import OPEN, Credential
from scaler.protocol.version import ISOLATION_VERSION, PROTOCOL_VERSION, knows
from scaler.storage.object_store import ObjectStore
from scaler.storage.storage_events import FromPeer, Reply

ALICE, BOB, WORKER, SCHEDULER = b"C|a|1|alice", b"C|b|2|bob", b"W|w|3|worker", b"S|s|4|scheduler"
NESTED = b"C|w|5|nested"
OLDER = Version(1, 7)
ALICE_KEY = Credential("0" * 40, frozenset({PeerRole.CLIENT}))
BOB_KEY = Credential("1" * 40, frozenset({PeerRole.CLIENT}))
WORKER_KEY = Credential("2" * 40, frozenset({PeerRole.WORKER}))
MONITOR_KEY = Credential("3" * 40, frozenset({PeerRole.MONITOR}))

ids = IDGenerator()


def hello(
    store: ObjectStore, peer: bytes, role: PeerRole, credential: Credential = OPEN, version: Version = PROTOCOL_VERSION
) -> Any:
    (reply,) = store.handle(FromPeer(peer, Hello(version, role), credential=credential), 0.0)
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


def cluster(scheduler: Version = PROTOCOL_VERSION, worker: Version = PROTOCOL_VERSION) -> ObjectStore:
    """Alice and Bob, a worker, and the scheduler, which admits Alice and Bob (from protocol 1.8 on)."""
    store = ObjectStore()
    assert type(hello(store, ALICE, PeerRole.CLIENT)) is HelloAck
    assert type(hello(store, BOB, PeerRole.CLIENT)) is HelloAck
    assert type(hello(store, WORKER, PeerRole.WORKER, version=worker)) is HelloAck
    assert type(hello(store, SCHEDULER, PeerRole.SCHEDULER, version=scheduler)) is HelloAck
    if knows(scheduler, ISOLATION_VERSION):
        for client in (ALICE, BOB):
            assert statuses(admit(store, client)) == []
    return store


def admit(store: ObjectStore, client: bytes, scope: bytes = b"", peer: bytes = SCHEDULER) -> Any:
    request = ObjectRequest(6, ObjectRequestKind.ADMIT, client, [], scope_id=scope)
    (reply,) = store.handle(FromPeer(peer, request), 0.0)
    return reply.message


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


def test_a_worker_reads_for_a_scope_puts_results_for_admitted_clients_and_replaces_and_deletes_nothing():
    store = cluster()
    assert type(hello(store, NESTED, PeerRole.CLIENT)) is HelloAck
    assert statuses(admit(store, NESTED, scope=ALICE)) == []  # a Client made inside one of Alice's tasks
    alices, bobs, nested, result = ids.next_id(), ids.next_id(), ids.next_id(), ids.next_id()
    put(store, ALICE, [alices], ALICE)
    put(store, BOB, [bobs], BOB)
    put(store, NESTED, [nested], NESTED)
    for scope in (ALICE, NESTED):  # a task of Alice's, or of her nested Client's, reads what either put
        answer = ask(store, WORKER, ObjectRequestKind.GET, [alices, nested, bobs], scope)
        assert statuses(answer) == [ObjectStatus.OK, ObjectStatus.OK, ObjectStatus.NOT_FOUND]
    assert statuses(ask(store, WORKER, ObjectRequestKind.GET, [alices, bobs], BOB)) == [
        ObjectStatus.NOT_FOUND,
        ObjectStatus.OK,
    ]
    assert (
        statuses(ask(store, WORKER, ObjectRequestKind.GET, [alices, bobs])) == [ObjectStatus.NOT_FOUND] * 2
    )  # for nobody
    assert statuses(ask(store, NESTED, ObjectRequestKind.GET, [alices, nested])) == [
        ObjectStatus.NOT_FOUND,
        ObjectStatus.OK,
    ]
    assert statuses(put(store, WORKER, [result], ALICE)) == [ObjectStatus.OK]
    assert store.owner_of(result) == ALICE
    assert "not this peer's to replace" in put(store, WORKER, [alices], ALICE).reason
    assert "not allowed to a worker" in ask(store, WORKER, ObjectRequestKind.DELETE, [alices]).reason
    assert "not allowed to a worker" in ask(store, WORKER, ObjectRequestKind.CLEAR_OWNER, [], ALICE).reason
    assert statuses(ask(store, ALICE, ObjectRequestKind.GET, [result])) == [ObjectStatus.OK]


def test_a_worker_puts_nothing_for_an_owner_the_scheduler_does_not_serve():
    store = cluster()
    stranger, late = ids.next_id(), ids.next_id()
    refused = put(store, WORKER, [stranger], b"C|nowhere|0|nobody")
    assert statuses(refused) == [ObjectStatus.NOT_FOUND] and "not a client the scheduler serves" in refused.reason
    ask(store, SCHEDULER, ObjectRequestKind.CLEAR_OWNER, [], ALICE)  # Alice left
    assert statuses(put(store, WORKER, [late], ALICE)) == [ObjectStatus.NOT_FOUND]  # a late result of hers
    assert stranger not in store and late not in store
    assert statuses(put(store, ALICE, [late], ALICE)) == [ObjectStatus.OK]  # a client stores its own, as ever
    admit(store, ALICE)  # the scheduler serves her again (a clear, not a departure)
    assert statuses(put(store, WORKER, [ids.next_id()], ALICE)) == [ObjectStatus.OK]


def test_only_the_scheduler_admits():
    store = cluster()
    for peer in (ALICE, WORKER):
        refusal = admit(store, b"C|x|1|mallory", scope=BOB, peer=peer)
        assert type(refusal) is Refusal and "is not allowed to a" in refusal.reason
    assert statuses(put(store, WORKER, [ids.next_id()], b"C|x|1|mallory")) == [ObjectStatus.NOT_FOUND]


@pytest.mark.parametrize("scheduler, worker", [(OLDER, PROTOCOL_VERSION), (PROTOCOL_VERSION, OLDER)])
def test_with_a_scheduler_or_a_worker_older_than_1_8_a_worker_reads_any_object(scheduler, worker):
    store = cluster(scheduler, worker)
    bobs = ids.next_id()
    put(store, BOB, [bobs], BOB)
    assert statuses(ask(store, WORKER, ObjectRequestKind.GET, [bobs], ALICE)) == [ObjectStatus.OK]  # a limit
    admits = scheduler == PROTOCOL_VERSION
    owner_unknown = put(store, WORKER, [ids.next_id()], b"C|nowhere|0|nobody")
    assert statuses(owner_unknown) == [ObjectStatus.NOT_FOUND if admits else ObjectStatus.OK]


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
