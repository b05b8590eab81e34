"""The sans-I/O core, driven directly: no sockets, no processes."""

from __future__ import annotations

import array
import random
from typing import Any, Dict, List, Sequence, Tuple

import pytest

from scaler.protocol.codec import DamagedTask, DamagedTaskBatch
from scaler.protocol.ids import IDGenerator
from scaler.protocol.message_limits import REQUEST_HEADROOM
from scaler.protocol.messages import (
    ClientHeartbeat,
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
from scaler.protocol.version import PROTOCOL_VERSION, show_version
from scaler.storage.object_store import ObjectStore, blob_size
from scaler.storage.storage_events import ConnectionClosed, FromPeer, PeerConnection, Reply

PEER = b"C|host|1|peer"
OWNER = b"C|host|1|owner"
OTHER_OWNER = b"C|host|2|other"

OK = ObjectStatus.OK
NOT_FOUND = ObjectStatus.NOT_FOUND
TOO_LARGE = ObjectStatus.TOO_LARGE
STORAGE_FULL = ObjectStatus.STORAGE_FULL
OVER_QUOTA = ObjectStatus.OVER_QUOTA

ids = IDGenerator()


def greeted_store(**limits: int) -> ObjectStore:
    """A store that greeted PEER as the scheduler, which may put, read and delete the objects of any owner."""
    store = ObjectStore(**limits)
    (reply,) = store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION, role=PeerRole.SCHEDULER)), 0.0)
    assert isinstance(reply.message, HelloAck)
    return store


def request(
    store: ObjectStore,
    kind: ObjectRequestKind,
    object_ids: Sequence[bytes] = (),
    owner_id: bytes = OWNER,
    blobs: Sequence[Any] = (),
    peer: bytes = PEER,
) -> Reply:
    replies = store.handle(
        FromPeer(peer, ObjectRequest(request_id=7, kind=kind, owner_id=owner_id, object_ids=list(object_ids)), blobs),
        0.0,
    )
    assert len(replies) == 1, replies
    return replies[0]


def response(reply: Reply, kind: ObjectRequestKind) -> ObjectResponse:
    assert reply.peer_id == PEER
    assert isinstance(reply.message, ObjectResponse), reply.message
    assert reply.message.request_id == 7 and reply.message.kind == kind
    return reply.message


def put(store: ObjectStore, objects: Sequence[Tuple[bytes, Any]], owner_id: bytes = OWNER) -> ObjectResponse:
    reply = request(store, ObjectRequestKind.PUT, [i for i, _ in objects], owner_id, [b for _, b in objects])
    assert list(reply.blobs) == []
    return response(reply, ObjectRequestKind.PUT)


def get(store: ObjectStore, object_ids: Sequence[bytes]) -> Tuple[ObjectResponse, List[Any]]:
    reply = request(store, ObjectRequestKind.GET, object_ids)
    return response(reply, ObjectRequestKind.GET), list(reply.blobs)


def delete(store: ObjectStore, object_ids: Sequence[bytes], owner_id: bytes = OWNER) -> ObjectResponse:
    return response(request(store, ObjectRequestKind.DELETE, object_ids, owner_id), ObjectRequestKind.DELETE)


def clear_owner(store: ObjectStore, owner_id: bytes) -> ObjectResponse:
    return response(request(store, ObjectRequestKind.CLEAR_OWNER, owner_id=owner_id), ObjectRequestKind.CLEAR_OWNER)


def refusal_reason(replies: List[Reply]) -> str:
    (reply,) = replies
    assert reply.peer_id == PEER
    assert isinstance(reply.message, Refusal), reply.message
    assert reply.message.version == PROTOCOL_VERSION
    return reply.message.reason


# --- Hello -------------------------------------------------------------------------------------------------


def test_hello_is_acknowledged_with_the_protocol_version_its_role_its_limits_and_no_heartbeat():
    store = ObjectStore(max_object_size=1 << 20, max_memory=8 << 20, max_client_memory=3 << 20)
    (reply,) = store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION)), 0.0)
    limit = (1 << 20) + REQUEST_HEADROOM
    expected = HelloAck(
        version=PROTOCOL_VERSION, object_storage_address="", role=PeerRole.OBJECT_STORAGE, max_message_size=limit,
        client_quota=3 << 20,
    )  # fmt: skip
    assert reply == Reply(PEER, expected)
    assert reply.message.heartbeat_interval_seconds == 0 and reply.message.timeout_seconds == 0


def test_other_minor_version_is_accepted():
    theirs = Version(major=PROTOCOL_VERSION.major, minor=PROTOCOL_VERSION.minor + 5)
    (reply,) = ObjectStore().handle(FromPeer(PEER, Hello(version=theirs)), 0.0)
    assert isinstance(reply.message, HelloAck)


def test_other_major_version_is_refused_naming_both_versions_and_the_peer_is_not_served():
    store = ObjectStore()
    theirs = Version(major=PROTOCOL_VERSION.major + 1, minor=3)
    reason = refusal_reason(store.handle(FromPeer(PEER, Hello(version=theirs)), 0.0))
    assert show_version(theirs) in reason and show_version(PROTOCOL_VERSION) in reason
    refused = store.handle(FromPeer(PEER, ObjectRequest(kind=ObjectRequestKind.PUT, object_ids=[b"x"]), [b"data"]), 0.0)
    assert refusal_reason(refused) == "send Hello first"
    assert store.object_count == 0


def test_a_greeted_peer_that_says_hello_with_a_bad_version_is_no_longer_served():
    store = greeted_store()
    refusal_reason(store.handle(FromPeer(PEER, Hello(version=Version(major=PROTOCOL_VERSION.major + 1))), 0.0))
    assert (
        refusal_reason(store.handle(FromPeer(PEER, ObjectRequest(kind=ObjectRequestKind.GET)), 0.0))
        == "send Hello first"
    )


def test_request_before_hello_is_refused_and_nothing_is_done():
    store = ObjectStore()
    object_id = ids.next_id()
    replies = store.handle(
        FromPeer(PEER, ObjectRequest(kind=ObjectRequestKind.PUT, object_ids=[object_id]), [b"payload"]), 0.0
    )
    assert refusal_reason(replies) == "send Hello first"
    assert store.object_count == 0 and store.used_memory == 0
    store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION)), 0.0)
    assert get(store, [object_id])[0].statuses == [NOT_FOUND]


def test_hello_is_per_peer():
    store = greeted_store()
    other = b"W|host|3|worker"
    replies = store.handle(FromPeer(other, ObjectRequest(kind=ObjectRequestKind.GET, object_ids=[b"x"])), 0.0)
    assert replies[0].peer_id == other and replies[0].message.reason == "send Hello first"


def test_a_peer_whose_connection_closed_is_forgotten_and_its_objects_stay():
    """A peer's session is the connection of its last Hello: once it closed, the peer says Hello again on its
    next one (nothing else of it is kept); its objects are cleared by the scheduler, not by its leaving."""
    store = ObjectStore()
    store.handle(PeerConnection(PEER, 1), 0.0)
    store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION)), 0.0)
    object_id = ids.next_id()
    assert put(store, [(object_id, b"kept")], owner_id=PEER).statuses == [OK]
    assert store.peer_count == 1
    assert store.handle(ConnectionClosed(1), 0.0) == []
    assert store.peer_count == 0
    assert refusal_reason(store.handle(FromPeer(PEER, ObjectRequest(kind=ObjectRequestKind.GET)), 0.0)) == (
        "send Hello first"
    )
    assert object_id in store and store.owner_of(object_id) == PEER


def test_the_close_of_an_older_connection_or_of_one_without_hello_forgets_nobody():
    store = ObjectStore()
    store.handle(PeerConnection(PEER, 1), 0.0)
    store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION)), 0.0)
    store.handle(PeerConnection(PEER, 2), 0.0)  # it said Hello again on a new connection before the old one closed
    store.handle(FromPeer(PEER, Hello(version=PROTOCOL_VERSION)), 0.0)
    store.handle(ConnectionClosed(1), 0.0)
    store.handle(ConnectionClosed(3), 0.0)  # a connection that never said Hello
    assert store.peer_count == 1
    assert isinstance(request(store, ObjectRequestKind.GET, [b"x"]).message, ObjectResponse)
    store.handle(ConnectionClosed(2), 0.0)
    assert store.peer_count == 0


def test_unexpected_message_type_is_refused():
    store = greeted_store()
    reason = refusal_reason(store.handle(FromPeer(PEER, ClientHeartbeat()), 0.0))
    assert "clientHeartbeat" in reason


def test_a_task_batch_with_a_task_that_cannot_be_read_is_refused_as_any_task_batch():
    store = greeted_store()
    damaged = DamagedTaskBatch([], [DamagedTask(b"t" * 16, 0, "arguments[0].name: ...")])
    assert "taskBatch" in refusal_reason(store.handle(FromPeer(PEER, damaged), 0.0))


# --- put / get ---------------------------------------------------------------------------------------------


def test_put_then_get_returns_the_very_payload_objects_in_order():
    store = greeted_store()
    first, second, missing = ids.next_id(), ids.next_id(), ids.next_id()
    payload_1, payload_2 = bytearray(b"one"), memoryview(b"second payload")
    answer = put(store, [(first, payload_1), (second, payload_2)])
    assert answer.object_ids == [first, second]
    assert answer.statuses == [OK, OK] and answer.sizes == [3, 14] and answer.reason == ""
    assert store.object_count == 2 and store.used_memory == 17
    assert store.owner_of(first) == OWNER

    answer, blobs = get(store, [second, missing, first])
    assert answer.object_ids == [second, missing, first]
    assert answer.statuses == [OK, NOT_FOUND, OK] and answer.sizes == [14, 0, 3]
    assert len(blobs) == 2 and blobs[0] is payload_2 and blobs[1] is payload_1  # no copy


def test_get_of_unknown_ids_answers_not_found_at_once():
    store = greeted_store()
    answer, blobs = get(store, [ids.next_id(), ids.next_id()])
    assert answer.statuses == [NOT_FOUND, NOT_FOUND] and blobs == []


def test_empty_requests_are_answered():
    store = greeted_store()
    assert put(store, []).statuses == []
    assert get(store, [])[0].statuses == []
    assert delete(store, []).statuses == []


def test_put_counts_buffer_bytes_not_items():
    store = greeted_store()
    payload = memoryview(array.array("i", range(10)))  # 10 items of 4 bytes
    assert blob_size(payload) == 40
    assert put(store, [(ids.next_id(), payload)]).sizes == [40]
    assert store.used_memory == 40


def test_put_of_an_existing_id_replaces_object_owner_and_size():
    store = greeted_store()
    object_id = ids.next_id()
    put(store, [(object_id, b"old payload")], owner_id=OWNER)
    assert put(store, [(object_id, b"new")], owner_id=OTHER_OWNER).statuses == [OK]
    assert store.object_count == 1 and store.used_memory == 3
    assert store.owner_of(object_id) == OTHER_OWNER
    assert store.objects_of(OWNER) == [] and store.objects_of(OTHER_OWNER) == [object_id]
    assert get(store, [object_id])[1] == [b"new"]


def test_put_count_mismatch_is_refused_and_stores_nothing():
    store = greeted_store()
    replies = store.handle(
        FromPeer(
            PEER,
            ObjectRequest(request_id=41, kind=ObjectRequestKind.PUT, owner_id=OWNER, object_ids=[ids.next_id()] * 2),
            [b"only one"],
        ),
        0.0,
    )
    reason = refusal_reason(replies)
    assert "41" in reason and "2 object IDs" in reason and "1 payload" in reason
    assert store.object_count == 0


def put_frames(store: ObjectStore, objects: Sequence[Tuple[bytes, Sequence[Any]]], peer: bytes = PEER) -> Any:
    message = ObjectRequest(
        request_id=8,
        kind=ObjectRequestKind.PUT,
        owner_id=OWNER,
        object_ids=[object_id for object_id, _ in objects],
        frame_counts=[len(frames) for _, frames in objects],
    )
    (reply,) = store.handle(FromPeer(peer, message, [frame for _, frames in objects for frame in frames]), 0.0)
    return reply.message


def test_an_object_of_several_frames_is_stored_whole_and_given_back_frame_by_frame():
    store = greeted_store()
    single, several = ids.next_id(), ids.next_id()
    frames = [b"pickle", bytearray(b"buffer one"), memoryview(b"two")]
    answer = put_frames(store, [(single, [b"alone"]), (several, frames)])
    assert answer.statuses == [OK, OK] and answer.sizes == [5, 19]
    assert store.used_memory == 24

    answer, blobs = get(store, [several, single])
    assert answer.statuses == [OK, OK] and answer.sizes == [19, 5]
    assert answer.frame_counts == [3, 1]
    assert (
        len(blobs) == 4
        and all(blob is frame for blob, frame in zip(blobs[:3], frames, strict=True))
        and blobs[3] == b"alone"
    )
    # objects of one frame only: no frame counts, as protocol 1.0 peers expect
    answer, blobs = get(store, [single])
    assert answer.frame_counts == [] and blobs == [b"alone"]


def test_an_object_of_several_frames_is_not_given_to_a_protocol_1_0_peer():
    store = greeted_store()
    object_id = ids.next_id()
    put_frames(store, [(object_id, [b"pickle", b"buffer"])])
    old_peer = b"W|host|3|old"
    old_hello = Hello(version=Version(major=PROTOCOL_VERSION.major, minor=0), role=PeerRole.WORKER)
    store.handle(FromPeer(old_peer, old_hello), 0.0)
    (reply,) = store.handle(
        FromPeer(old_peer, ObjectRequest(request_id=9, kind=ObjectRequestKind.GET, object_ids=[object_id])), 0.0
    )
    assert reply.message.statuses == [NOT_FOUND] and list(reply.blobs) == []
    assert "several frames" in reply.message.reason and "1.0" in reply.message.reason
    assert object_id in store


@pytest.mark.parametrize(
    "counts, frames, problem",
    [
        ([2], 1, "frame counts for 2 payload frames but 1"),
        ([1, 1], 2, "1 object IDs but 2 frame counts"),
        ([0], 0, "0 frames"),
    ],
)
def test_put_frame_counts_that_do_not_match_are_refused_and_store_nothing(counts, frames, problem):
    store = greeted_store()
    message = ObjectRequest(
        request_id=42, kind=ObjectRequestKind.PUT, owner_id=OWNER, object_ids=[ids.next_id()], frame_counts=counts
    )
    reason = refusal_reason(store.handle(FromPeer(PEER, message, [b"x"] * frames), 0.0))
    assert "42" in reason and problem in reason
    assert store.object_count == 0


@pytest.mark.parametrize("kind", [ObjectRequestKind.GET, ObjectRequestKind.DELETE, ObjectRequestKind.CLEAR_OWNER])
def test_payloads_on_other_requests_are_refused(kind: ObjectRequestKind):
    store = greeted_store()
    object_id = ids.next_id()
    put(store, [(object_id, b"kept")])
    reason = refusal_reason(
        store.handle(FromPeer(PEER, ObjectRequest(kind=kind, owner_id=OWNER, object_ids=[object_id]), [b"x"]), 0.0)
    )
    assert "payload" in reason
    assert object_id in store


# --- limits ------------------------------------------------------------------------------------------------


def test_too_large_objects_are_refused_one_by_one():
    store = greeted_store(max_object_size=10, max_memory=100)
    small, large, exact = ids.next_id(), ids.next_id(), ids.next_id()
    answer = put(store, [(small, b"12345"), (large, b"x" * 11), (exact, b"y" * 10)])
    assert answer.statuses == [OK, TOO_LARGE, OK]
    assert answer.sizes == [5, 11, 10]
    assert "1 of 3" in answer.reason and "maximum object size" in answer.reason and "10 bytes" in answer.reason
    assert large not in store and store.used_memory == 15
    assert get(store, [large])[0].statuses == [NOT_FOUND]


def test_storage_full_refuses_what_does_not_fit_and_accepts_what_still_fits():
    store = greeted_store(max_object_size=60, max_memory=100, max_client_memory=100)
    a, b, c, d = (ids.next_id() for _ in range(4))
    answer = put(store, [(a, b"a" * 60), (b, b"b" * 50), (c, b"c" * 40)])
    assert answer.statuses == [OK, STORAGE_FULL, OK]
    assert "storage" in answer.reason and "memory limit of 100 bytes (--memory-limit)" in answer.reason
    assert store.used_memory == 100
    assert put(store, [(d, b"d")]).statuses == [STORAGE_FULL]
    delete(store, [a])
    assert put(store, [(d, b"d" * 60)]).statuses == [OK]
    assert store.used_memory == 100


def test_replacing_counts_the_freed_size_and_a_refused_replacement_keeps_the_old_object():
    store = greeted_store(max_object_size=100, max_memory=100, max_client_memory=100)
    object_id = ids.next_id()
    put(store, [(object_id, b"o" * 80)])
    assert put(store, [(object_id, b"n" * 100)]).statuses == [OK]  # 100 - 80 + 100 fits
    other = ids.next_id()
    assert put(store, [(other, b"z")]).statuses == [STORAGE_FULL]
    assert put(store, [(object_id, b"t" * 101)]).statuses == [TOO_LARGE]
    assert get(store, [object_id])[1] == [b"n" * 100] and store.used_memory == 100


@pytest.mark.parametrize(
    "limits",
    [{"max_object_size": 0}, {"max_memory": -1}, {"max_memory": 1.5}, {"max_memory": True}, {"max_client_memory": 0}],
)
def test_invalid_limits_are_rejected(limits: Dict[str, Any]):
    with pytest.raises(ValueError, match="positive"):
        ObjectStore(**limits)


# --- delete / clearOwner -----------------------------------------------------------------------------------


def test_delete_answers_ok_then_not_found():
    store = greeted_store()
    object_id, missing = ids.next_id(), ids.next_id()
    put(store, [(object_id, b"12345")])
    answer = delete(store, [object_id, missing])
    assert answer.object_ids == [object_id, missing]
    assert answer.statuses == [OK, NOT_FOUND] and answer.sizes == [5, 0]
    assert store.object_count == 0 and store.used_memory == 0 and store.objects_of(OWNER) == []
    assert delete(store, [object_id]).statuses == [NOT_FOUND]


def test_clear_owner_deletes_only_that_owners_objects_and_names_them():
    store = greeted_store()
    mine = [ids.next_id() for _ in range(3)]
    theirs = ids.next_id()
    put(store, [(object_id, b"m" * (n + 1)) for n, object_id in enumerate(mine)], owner_id=OWNER)
    put(store, [(theirs, b"theirs")], owner_id=OTHER_OWNER)
    answer = clear_owner(store, OWNER)
    assert answer.object_ids == mine and answer.statuses == [OK] * 3 and answer.sizes == [1, 2, 3]
    assert store.object_count == 1 and store.used_memory == 6
    assert get(store, [*mine, theirs])[0].statuses == [NOT_FOUND] * 3 + [OK]
    assert clear_owner(store, OWNER).object_ids == []


def test_object_instruction_from_the_scheduler_deletes_and_clears_without_reply():
    store = greeted_store()
    a, b, c = ids.next_id(), ids.next_id(), ids.next_id()
    put(store, [(a, b"a"), (b, b"b")], owner_id=OWNER)
    put(store, [(c, b"c")], owner_id=OTHER_OWNER)
    assert (
        store.handle(
            FromPeer(PEER, ObjectInstruction(kind=ObjectInstructionKind.CREATE, owner_id=OWNER, object_ids=[a])), 0.0
        )
        == []
    )
    assert store.object_count == 3
    assert (
        store.handle(
            FromPeer(PEER, ObjectInstruction(kind=ObjectInstructionKind.DELETE, owner_id=OWNER, object_ids=[a, c])),
            0.0,
        )
        == []
    )
    assert (
        store.handle(FromPeer(PEER, ObjectInstruction(kind=ObjectInstructionKind.CLEAR, owner_id=OTHER_OWNER)), 0.0)
        == []
    )
    assert get(store, [a, b, c])[0].statuses == [NOT_FOUND, OK, NOT_FOUND]


# --- a random workload against a model ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_random_workload_matches_a_dict_model_and_never_exceeds_memory(seed: int):
    rng = random.Random(seed)
    max_object_size, max_memory = 50, 300
    store = greeted_store(max_object_size=max_object_size, max_memory=max_memory)
    model: Dict[bytes, Tuple[bytes, bytes]] = {}  # object ID -> (owner, payload)
    object_ids = [bytes([n]) * 16 for n in range(20)]
    owners = [b"C|a", b"C|b", b"C|c"]
    for _ in range(400):
        action = rng.choice(("put", "put", "get", "delete", "clear"))
        if action == "put":
            owner = rng.choice(owners)
            batch = [(rng.choice(object_ids), bytes(rng.randrange(70))) for _ in range(rng.randrange(1, 4))]
            answer = put(store, batch, owner_id=owner)
            for (object_id, payload), status in zip(batch, answer.statuses, strict=True):
                used = sum(len(p) for _, p in model.values())
                held = sum(len(p) for o, p in model.values() if o == owner)
                freed = len(model[object_id][1]) if object_id in model else 0
                replaced = freed if object_id in model and model[object_id][0] == owner else 0
                if len(payload) > max_object_size:
                    assert status == TOO_LARGE
                elif held - replaced + len(payload) > max_memory // 2:
                    assert status == OVER_QUOTA
                elif used - freed + len(payload) > max_memory:
                    assert status == STORAGE_FULL
                else:
                    assert status == OK
                    model[object_id] = (owner, payload)
        elif action == "get":
            wanted = rng.sample(object_ids, 3)
            answer, blobs = get(store, wanted)
            assert answer.statuses == [OK if i in model else NOT_FOUND for i in wanted]
            assert blobs == [model[i][1] for i in wanted if i in model]
        elif action == "delete":
            wanted = rng.sample(object_ids, 2)
            owner = rng.choice(owners)  # the scheduler deletes the objects of the owner it names, no other
            deleted = [i for i in wanted if i in model and model[i][0] == owner]
            assert delete(store, wanted, owner).statuses == [OK if i in deleted else NOT_FOUND for i in wanted]
            for i in deleted:
                del model[i]
        else:
            owner = rng.choice(owners)
            expected = {i for i, (o, _) in model.items() if o == owner}
            assert set(clear_owner(store, owner).object_ids) == expected
            for i in expected:
                del model[i]
        assert store.object_count == len(model)
        assert store.used_memory == sum(len(p) for _, p in model.values()) <= max_memory
        for owner in owners:
            assert set(store.objects_of(owner)) == {i for i, (o, _) in model.items() if o == owner}


# --- the quota of each owner --------------------------------------------------------------------------------


def test_an_owner_at_its_quota_is_refused_naming_it_while_another_owner_still_stores():
    store = greeted_store(max_object_size=100, max_memory=1000, max_client_memory=250)
    greedy, other = b"C|greedy|1|aa", b"C|other|2|bb"
    first, second, third = ids.next_id(), ids.next_id(), ids.next_id()
    assert put(store, [(first, b"g" * 100), (second, b"g" * 100)], owner_id=greedy).statuses == [OK, OK]
    answer = put(store, [(third, b"g" * 100)], owner_id=greedy)
    assert answer.statuses == [OVER_QUOTA] and third not in store
    assert f"the quota of its owner {greedy.decode()}: it holds 200 bytes of 250 bytes" in answer.reason
    assert "(scaler_object_storage_server --max-client-memory)" in answer.reason
    assert put(store, [(ids.next_id(), b"o" * 100)], owner_id=other).statuses == [OK]
    assert (store.bytes_of(greedy), store.bytes_of(other)) == (200, 100)
    replaced = put(store, [(second, b"n" * 50)], owner_id=greedy)  # replacing frees what it held under that ID
    assert replaced.statuses == [OK] and store.bytes_of(greedy) == 150
    delete(store, [first], owner_id=greedy)
    clear_owner(store, other)
    assert (store.bytes_of(greedy), store.bytes_of(other)) == (50, 0)


def test_a_peer_before_1_8_is_told_storage_full_for_its_quota_as_it_reads_no_over_quota():
    store = ObjectStore(max_object_size=100, max_memory=1000, max_client_memory=150)
    before = Hello(version=Version(major=PROTOCOL_VERSION.major, minor=7), role=PeerRole.SCHEDULER)
    assert isinstance(store.handle(FromPeer(PEER, before), 0.0)[0].message, HelloAck)
    assert put(store, [(ids.next_id(), b"g" * 100)]).statuses == [OK]
    answer = put(store, [(ids.next_id(), b"g" * 100)])
    assert answer.statuses == [STORAGE_FULL] and "--max-client-memory" in answer.reason


def test_the_default_quota_is_half_of_the_memory():
    assert ObjectStore(max_memory=1000).max_client_memory == 500


def test_the_scheduler_asks_what_each_owner_holds_and_no_client_may():
    store = greeted_store(max_object_size=100, max_memory=1000)
    put(store, [(ids.next_id(), b"x" * 30), (ids.next_id(), b"y" * 12)], owner_id=b"C|a|1|aa")
    reply = response(request(store, ObjectRequestKind.USAGE, [b"C|a|1|aa", b"C|b|2|bb"]), ObjectRequestKind.USAGE)
    assert reply.object_ids == [b"C|a|1|aa", b"C|b|2|bb"] and reply.sizes == [42, 0]
    client = b"C|a|1|aa"
    store.handle(FromPeer(client, Hello(version=PROTOCOL_VERSION, role=PeerRole.CLIENT)), 0.0)
    (refused,) = store.handle(FromPeer(client, ObjectRequest(5, ObjectRequestKind.USAGE, client, [b"C|b|2|bb"])), 0.0)
    assert type(refused.message) is Refusal and "usage) is not allowed to a client" in refused.message.reason


def test_the_scheduler_asks_which_objects_are_the_largest_and_no_client_may():
    store = greeted_store()
    small, large, largest = ids.next_id(), ids.next_id(), ids.next_id()
    put(store, [(small, b"x" * 10), (large, b"x" * 1000)])
    put(store, [(largest, b"x" * 5000)], owner_id=OTHER_OWNER)
    summary = response(request(store, ObjectRequestKind.SUMMARY), ObjectRequestKind.SUMMARY).summary
    assert summary.largest_ids == [largest, large, small] and summary.largest_sizes == [5000, 1000, 10]
    assert summary.largest_owners == [OTHER_OWNER, OWNER, OWNER]
    client = b"C|host|3|client"
    store.handle(FromPeer(client, Hello(version=PROTOCOL_VERSION, role=PeerRole.CLIENT)), 0.0)
    (reply,) = store.handle(FromPeer(client, ObjectRequest(kind=ObjectRequestKind.SUMMARY, owner_id=client)), 0.0)
    assert isinstance(reply.message, Refusal) and "summary) is not allowed to a client" in reply.message.reason
