"""The real server as a subprocess, spoken to with raw pyzmq and the codec."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from typing import Any, Callable, List

import pytest
import zmq

from scaler.protocol import codec
from scaler.protocol.ids import IDGenerator
from scaler.protocol.messages import (
    Hello,
    HelloAck,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    Refusal,
    TaskCancel,
    Version,
)
from scaler.protocol.version import PROTOCOL_VERSION, show_version

OK = ObjectStatus.OK
NOT_FOUND = ObjectStatus.NOT_FOUND
TOO_LARGE = ObjectStatus.TOO_LARGE
STORAGE_FULL = ObjectStatus.STORAGE_FULL

ids = IDGenerator()


def owner() -> bytes:
    return b"C|test-owner|1|" + os.urandom(6).hex().encode()


def test_put_get_delete_round_trip(storage, connect):
    peer = connect(storage)
    me, first, second = owner(), ids.next_id(), ids.next_id()
    answer = peer.put(me, [(first, b"first payload"), (second, b"")])
    assert answer.object_ids == [first, second] and answer.statuses == [OK, OK] and answer.sizes == [13, 0]

    answer, blobs = peer.get([second, first])
    assert answer.statuses == [OK, OK] and answer.sizes == [0, 13]
    assert blobs == [b"", b"first payload"]

    answer = peer.delete([first, first], me)
    assert answer.statuses == [OK, NOT_FOUND]
    answer, blobs = peer.get([first, second])
    assert answer.statuses == [NOT_FOUND, OK] and blobs == [b""]


def test_objects_are_shared_between_peers(storage, connect):
    writer, reader = connect(storage), connect(storage)
    object_id = ids.next_id()
    assert writer.put(owner(), [(object_id, b"shared")]).statuses == [OK]
    answer, blobs = reader.get([object_id])
    assert answer.statuses == [OK] and blobs == [b"shared"]


def test_get_of_unknown_id_answers_not_found_at_once(storage, connect):
    peer = connect(storage)
    missing = ids.next_id()
    answer, blobs = peer.get([missing])  # Peer.get fails if no answer comes: the server never waits
    assert answer.object_ids == [missing] and answer.statuses == [NOT_FOUND] and answer.sizes == [0]
    assert blobs == []


def test_put_again_replaces_the_object(storage, connect):
    peer = connect(storage)
    object_id = ids.next_id()
    peer.put(owner(), [(object_id, b"old")])
    new_owner = owner()
    assert peer.put(new_owner, [(object_id, b"replacement")]).statuses == [OK]
    assert peer.get([object_id])[1] == [b"replacement"]
    assert peer.clear_owner(new_owner).object_ids == [object_id]


def test_clear_owner_deletes_that_owners_objects_only(storage, connect):
    peer = connect(storage)
    me, someone_else = owner(), owner()
    mine = [ids.next_id() for _ in range(3)]
    theirs = ids.next_id()
    peer.put(me, [(object_id, b"mine") for object_id in mine])
    peer.put(someone_else, [(theirs, b"theirs")])

    answer = peer.clear_owner(me)
    assert sorted(answer.object_ids) == sorted(mine)
    assert answer.statuses == [OK] * 3 and answer.sizes == [4] * 3
    answer, blobs = peer.get([*mine, theirs])
    assert answer.statuses == [NOT_FOUND] * 3 + [OK] and blobs == [b"theirs"]
    assert peer.clear_owner(me).object_ids == []


def test_fifty_megabyte_object_round_trip(storage, connect):
    peer = connect(storage)
    payload = random.Random(50).randbytes(50 * 1000 * 1000)
    object_id = ids.next_id()
    me = owner()
    answer = peer.put(me, [(object_id, payload)])
    assert answer.statuses == [OK] and answer.sizes == [len(payload)]
    answer, blobs = peer.get([object_id, object_id])
    assert answer.statuses == [OK, OK] and answer.sizes == [len(payload)] * 2
    digest = hashlib.sha256(payload).digest()
    assert [hashlib.sha256(blob).digest() for blob in blobs] == [digest, digest]
    assert peer.clear_owner(me).sizes == [len(payload)]


def test_too_large_and_storage_full_are_refused_per_object(small_storage, connect):
    peer = connect(small_storage)  # objects up to 1 KiB, 2 KiB in all
    me = owner()
    a, b, c, too_large = (ids.next_id() for _ in range(4))
    answer = peer.put(me, [(a, b"a" * 1024), (too_large, b"t" * 1025), (b, b"b" * 1000)])
    assert answer.statuses == [OK, TOO_LARGE, OK]
    assert answer.sizes == [1024, 1025, 1000]
    assert "maximum object size" in answer.reason

    answer = peer.put(me, [(c, b"c" * 100)])
    assert answer.statuses == [STORAGE_FULL]
    assert "memory limit of 2.0 KiB (--memory-limit)" in answer.reason

    answer, blobs = peer.get([a, too_large, b, c])
    assert answer.statuses == [OK, NOT_FOUND, OK, NOT_FOUND]
    assert blobs == [b"a" * 1024, b"b" * 1000]

    peer.delete([a], me)  # room again
    assert peer.put(me, [(c, b"c" * 100)]).statuses == [OK]
    peer.clear_owner(me)


def test_wrong_major_version_is_refused_naming_both_versions(storage, connect):
    peer = connect(storage, hello=False)
    theirs = Version(major=PROTOCOL_VERSION.major + 1, minor=7)
    reply, _ = peer.request(Hello(version=theirs))
    assert isinstance(reply, Refusal)
    assert reply.version == PROTOCOL_VERSION
    assert show_version(theirs) in reply.reason and show_version(PROTOCOL_VERSION) in reply.reason
    reply, _ = peer.request(ObjectRequest(kind=ObjectRequestKind.GET, object_ids=[ids.next_id()]))
    assert isinstance(reply, Refusal) and reply.reason == "send Hello first"
    storage.wait_for_log(f"refuse Hello from {peer.identity.decode()}")


def test_other_minor_version_is_accepted(storage, connect):
    peer = connect(storage, hello=False)
    reply, _ = peer.request(Hello(version=Version(major=PROTOCOL_VERSION.major, minor=PROTOCOL_VERSION.minor + 1)))
    assert isinstance(reply, HelloAck) and reply.version == PROTOCOL_VERSION
    assert reply.object_storage_address == "" and reply.heartbeat_interval_seconds == 0 and reply.timeout_seconds == 0


def test_request_before_hello_is_refused_and_nothing_is_stored(storage, connect):
    peer = connect(storage, hello=False)
    object_id = ids.next_id()
    request = ObjectRequest(request_id=5, kind=ObjectRequestKind.PUT, owner_id=owner(), object_ids=[object_id])
    reply, _ = peer.request(request, [b"sneaky"])
    assert isinstance(reply, Refusal) and reply.reason == "send Hello first"
    assert isinstance(peer.hello(), HelloAck)
    assert peer.get([object_id])[0].statuses == [NOT_FOUND]


def test_put_with_fewer_payloads_than_ids_is_refused(storage, connect):
    peer = connect(storage)
    wanted = [ids.next_id(), ids.next_id()]
    request = ObjectRequest(request_id=9, kind=ObjectRequestKind.PUT, owner_id=owner(), object_ids=wanted)
    reply, _ = peer.request(request, [b"only one"])
    assert isinstance(reply, Refusal) and "2 object IDs but 1 payload" in reply.reason
    assert peer.get(wanted)[0].statuses == [NOT_FOUND, NOT_FOUND]


def test_unexpected_message_type_is_refused(storage, connect):
    peer = connect(storage)
    reply, _ = peer.request(TaskCancel(task_ids=[ids.next_id()]))
    assert isinstance(reply, Refusal) and "taskCancel" in reply.reason


def _valid_get_frame() -> bytes:
    return codec.encode(ObjectRequest(request_id=1, kind=ObjectRequestKind.GET, object_ids=[b"x" * 16]))[0]


def _unknown_union_member() -> bytes:
    frame = bytearray(_valid_get_frame())
    frame[16:18] = (0xFFF0).to_bytes(2, "little")  # the Message union's discriminant
    return bytes(frame)


MALFORMED: List[Any] = [
    pytest.param(lambda: [random.Random(1).randbytes(13)], id="random-bytes-odd-length"),
    pytest.param(lambda: [random.Random(2).randbytes(64)], id="random-bytes-whole-words"),
    pytest.param(lambda: [_valid_get_frame()[:-8]], id="truncated-last-word"),
    pytest.param(lambda: [_valid_get_frame()[:16]], id="truncated-to-header"),
    pytest.param(lambda: [b""], id="empty-frame"),
    pytest.param(lambda: [b"", _valid_get_frame()], id="req-style-empty-delimiter"),
    pytest.param(lambda: [_unknown_union_member()], id="unknown-union-member"),
    pytest.param(lambda: [b"\x00" * 1024, b"blob"], id="zeros-with-blob"),
]


@pytest.mark.parametrize("make_frames", MALFORMED)
def test_malformed_input_is_logged_with_the_sender_and_dropped(
    storage, connect, make_frames: Callable[[], List[bytes]]
):
    peer = connect(storage)
    peer.send_raw(make_frames())
    storage.wait_for_log(f"drop malformed message from {peer.identity.decode()}")
    assert not peer.socket.poll(0), "a malformed message must not be answered"
    object_id = ids.next_id()
    assert peer.put(owner(), [(object_id, b"still serving")]).statuses == [OK]
    assert peer.get([object_id])[1] == [b"still serving"]
    assert storage.process.poll() is None


def test_malformed_input_from_a_peer_without_identity_is_dropped(start_storage, zmq_context):
    server = start_storage()
    anonymous = zmq_context.socket(zmq.DEALER)  # the ROUTER gives it a random binary identity
    try:
        anonymous.setsockopt(zmq.LINGER, 0)
        anonymous.connect(server.address)
        anonymous.send(os.urandom(24))
        anonymous.send_multipart(codec.encode(Hello(version=PROTOCOL_VERSION)))
        assert anonymous.poll(20_000), "no HelloAck after the malformed message"
        reply, _ = codec.decode(anonymous.recv_multipart())
        assert isinstance(reply, HelloAck)
    finally:
        anonymous.close(linger=0)
    server.wait_for_log("drop malformed message from 00")  # ZeroMQ's generated identities start with a zero byte


def test_uvloop_event_loop(start_storage, connect):
    server = start_storage("--event-loop", "uvloop")
    peer = connect(server)
    object_id = ids.next_id()
    assert peer.put(owner(), [(object_id, b"on uvloop")]).statuses == [OK]
    assert peer.get([object_id])[1] == [b"on uvloop"]
    assert "use event loop: uvloop" in server.log()


def test_ipc_address(start_storage, connect, tmp_path):
    server = start_storage(address=f"ipc://{tmp_path}/storage.ipc")
    peer = connect(server)
    object_id = ids.next_id()
    assert peer.put(owner(), [(object_id, b"over ipc")]).statuses == [OK]
    assert peer.get([object_id])[1] == [b"over ipc"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_server_cleanly(start_storage, connect, signum: int):
    server = start_storage()
    peer = connect(server)
    peer.put(owner(), [(ids.next_id(), b"x" * 10)])
    assert server.signal(signum) == 0, server.log()
    log = server.log()
    assert f"ObjectStorageServer: received {signal.Signals(signum).name}, shutting down" in log
    assert "ObjectStorageServer: exited, holding 1 objects (10 bytes)" in log
    assert "Traceback" not in log


def test_log_lines_name_the_component_and_address(storage):
    log = storage.log()
    assert f"ObjectStorageServer: listen to address {storage.address}" in log
    assert "ObjectStorageServer: max object size 128.0 MiB, memory limit 256.0 MiB" in log


def test_response_is_an_object_response_for_every_kind(storage, connect):
    peer = connect(storage)
    for kind in ObjectRequestKind:
        request = ObjectRequest(request_id=100 + kind, kind=kind, owner_id=owner())
        reply, blobs = peer.request(request)
        assert isinstance(reply, ObjectResponse) and reply.request_id == 100 + kind and reply.kind == kind
        assert reply.statuses == [] and blobs == []


def test_pipelined_requests_all_get_their_replies(storage, connect):
    """A peer that sends many requests before reading any reply still gets every reply (none dropped at a HWM)."""
    peer, watcher = connect(storage, receive_hwm=10), connect(storage)  # replies back up on the server's side
    object_id, marker = ids.next_id(), ids.next_id()
    me = owner()
    payload = b"p" * (64 * 1024)  # large replies: the kernel's socket buffers hold only a few of them
    assert peer.put(me, [(object_id, payload)]).statuses == [OK]
    count = 1500  # more than ZeroMQ's default high-water mark of 1000 messages
    for request_id in range(count):
        peer.send(ObjectRequest(request_id=request_id, kind=ObjectRequestKind.GET, object_ids=[object_id]))
    peer.send(ObjectRequest(request_id=count, kind=ObjectRequestKind.PUT, owner_id=me, object_ids=[marker]), [b"m"])
    deadline = time.monotonic() + 60
    while watcher.get([marker])[0].statuses != [OK]:  # the server has handled all of peer's requests
        assert time.monotonic() < deadline, "the server did not handle the pipelined requests"
    for request_id in range(count):
        reply, blobs = peer.receive()
        assert isinstance(reply, ObjectResponse) and reply.request_id == request_id, reply
        assert reply.statuses == [OK] and len(blobs[0]) == len(payload)
    reply, _ = peer.receive()
    assert reply.request_id == count and reply.statuses == [OK]
    peer.clear_owner(me)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
    except OSError:
        pytest.skip("needs Linux /proc to read a process's memory")
    return int(line.split()[1]) * 1024


def test_queued_get_replies_share_the_stored_payload(storage, connect):
    """Zero-copy: 30 queued replies of a 20 MB object cost the server nothing like 30 copies (600 MB)."""
    peer, watcher = connect(storage, receive_hwm=1), connect(storage)
    object_id, marker = ids.next_id(), ids.next_id()
    me = owner()
    assert peer.put(me, [(object_id, b"z" * (20 << 20))]).statuses == [OK]
    before = _rss_bytes(storage.process.pid)
    for request_id in range(30):
        peer.send(ObjectRequest(request_id=request_id, kind=ObjectRequestKind.GET, object_ids=[object_id]))
    peer.send(ObjectRequest(request_id=30, kind=ObjectRequestKind.PUT, owner_id=me, object_ids=[marker]), [b"m"])
    deadline = time.monotonic() + 60
    while watcher.get([marker])[0].statuses != [OK]:  # the server has handled (and queued) all 30 gets
        assert time.monotonic() < deadline, "the server did not handle the pipelined requests"
    growth = _rss_bytes(storage.process.pid) - before
    assert growth < 200 << 20, f"server memory grew by {growth >> 20} MiB for 30 queued replies of one object"
    watcher.clear_owner(me)


def test_small_objects_do_not_pin_receive_buffers(start_storage, connect):
    """3,000 objects of 1,000 bytes, put one request at a time, cost about their size, not 8 KiB each."""
    server = start_storage()
    peer = connect(server)
    me = owner()
    peer.put(me, [(ids.next_id(), b"w" * 1000)])  # warm up allocator and sockets
    before = _rss_bytes(server.process.pid)
    for _ in range(3000):
        assert peer.put(me, [(ids.next_id(), b"s" * 1000)]).statuses == [OK]
    growth = _rss_bytes(server.process.pid) - before
    assert growth < 15 << 20, f"server memory grew by {growth >> 20} MiB for 3 MB of small objects"
