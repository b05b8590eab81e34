"""Spilling (`object_places`) through the store's own requests: past its memory budget the store writes the least
recently used objects to a spill directory (real files, in the test's temporary directory) and reads them back
when they are asked for; only a put that fits in neither budget is refused, naming both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Sequence

import pytest

from scaler.protocol.messages import (
    Hello,
    ObjectRequest,
    ObjectRequestKind,
    ObjectStatus,
    PeerRole,
    Version,
    WorkerInfo,
)
from scaler.protocol.security import OPEN
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.storage.object_places import ObjectDirectory, SpillDirectory
from scaler.storage.object_store import ObjectStore
from scaler.storage.storage_events import FromPeer

PEER = b"C|host|1|peer"
OWNER = b"C|host|1|peer"


def object_id(number: int) -> bytes:
    return number.to_bytes(16, "big")


def payload(number: int, size: int = 40) -> bytes:
    return bytes([number]) * size


class Spilling:
    def __init__(self, directory: Path, max_memory: int = 100, max_disk: int = 100, durable: bool = False) -> None:
        self.spill = ObjectDirectory(str(directory)) if durable else SpillDirectory(str(directory))
        self.store = ObjectStore(
            max_object_size=1000, max_memory=max_memory, max_client_memory=10_000, spill=self.spill, max_disk=max_disk
        )
        self._requests = 0
        hello = Hello(Version(PROTOCOL_VERSION.major, PROTOCOL_VERSION.minor), PeerRole.CLIENT, 1, "", WorkerInfo())
        self.store.handle(FromPeer(PEER, hello, [], OPEN), 0.0)
        self.restored = self.store.restore()

    def request(self, kind: ObjectRequestKind, numbers: Sequence[int], blobs: List[bytes] = ()):  # type: ignore
        self._requests += 1
        request = ObjectRequest(self._requests, kind, OWNER, [object_id(n) for n in numbers])
        [reply] = self.store.handle(FromPeer(PEER, request, list(blobs), OPEN), 0.0)
        return reply

    def put(self, *numbers: int, size: int = 40) -> List[ObjectStatus]:
        reply = self.request(ObjectRequestKind.PUT, numbers, [payload(n, size) for n in numbers])
        self.reason = reply.message.reason
        return reply.message.statuses

    def get(self, *numbers: int) -> List[bytes]:
        reply = self.request(ObjectRequestKind.GET, numbers)
        assert reply.message.statuses == [ObjectStatus.OK] * len(numbers)
        return [bytes(blob) for blob in reply.blobs]

    def files(self) -> List[str]:
        return sorted(os.listdir(self.spill.path))


def test_past_the_memory_budget_the_least_recently_used_objects_go_to_disk_and_come_back_when_read(tmp_path):
    s = Spilling(tmp_path)
    assert s.put(1, 2) == [ObjectStatus.OK] * 2
    assert s.get(1) == [payload(1)]  # 1 is now more recently used than 2
    assert s.put(3) == [ObjectStatus.OK]  # 120 bytes: 2 goes to disk
    assert s.files() == [object_id(2).hex()]
    assert (s.store.used_memory, s.store.places.used_disk) == (80, 40)
    assert s.get(2, 3, 1) == [payload(2), payload(3), payload(1)]  # each comes back, the least recent goes out
    assert s.store.used_memory <= 100 and s.store.places.used_disk == 40
    assert s.files() == [object_id(2).hex()]
    assert s.store.places.spills == 3 and s.store.places.loads == 2


def test_only_a_put_past_both_budgets_is_refused_naming_both(tmp_path):
    s = Spilling(tmp_path)
    assert s.put(1, 2, 3, 4) == [ObjectStatus.OK] * 4  # 80 bytes in memory, 80 on disk
    assert s.put(5) == [ObjectStatus.STORAGE_FULL]  # 40 more on disk would be 120
    assert s.reason.endswith(
        "does not fit: storage holds 80 bytes of its memory limit of 100 bytes (--memory-limit) and 80 bytes of its "
        "spill disk limit of 100 bytes (--spill-disk-limit)"
    )
    assert s.put(5, size=20) == [ObjectStatus.OK]  # 20 fit in memory as they are
    assert s.get(1, 2, 3, 4) == [payload(n) for n in (1, 2, 3, 4)]  # nothing was lost


def test_an_object_larger_than_the_memory_budget_is_kept_on_disk_and_served_from_there(tmp_path):
    s = Spilling(tmp_path, max_memory=100, max_disk=1000)
    assert s.put(7, size=300) == [ObjectStatus.OK]
    assert s.files() == [object_id(7).hex()] and s.store.used_memory == 0
    assert s.get(7) == [payload(7, 300)]
    assert s.files() == [object_id(7).hex()]


def test_deleting_or_clearing_spilled_objects_removes_their_files_and_closing_removes_the_directory(tmp_path):
    s = Spilling(tmp_path)
    s.put(1, 2, 3, 4)
    assert len(s.files()) == 2
    s.request(ObjectRequestKind.DELETE, [1])
    assert len(s.files()) == 1 and s.store.places.used_disk == 40
    s.request(ObjectRequestKind.CLEAR_OWNER, [])
    assert s.files() == [] and (s.store.used_memory, s.store.places.used_disk) == (0, 0)
    path = s.spill.path
    s.store.places.close()
    assert not os.path.exists(path)


def test_the_scheduler_hears_what_each_owner_has_on_disk_and_which_of_the_largest_objects_are_there(tmp_path):
    s = Spilling(tmp_path)
    scheduler = b"S|host|2|scheduler"
    hello = Hello(Version(PROTOCOL_VERSION.major, PROTOCOL_VERSION.minor), PeerRole.SCHEDULER, 2, "", WorkerInfo())
    s.store.handle(FromPeer(scheduler, hello, [], OPEN), 0.0)

    def ask(kind: ObjectRequestKind, owners: Sequence[bytes] = ()):
        [reply] = s.store.handle(FromPeer(scheduler, ObjectRequest(9, kind, b"", list(owners)), [], OPEN), 0.0)
        return reply.message

    s.put(1, size=50)
    s.put(2, size=30)
    s.put(3, size=40)  # 120 bytes: 1, the least recently used, goes to disk
    usage = ask(ObjectRequestKind.USAGE, [OWNER, b"C|host|3|other"])
    assert (usage.sizes, usage.spilled_sizes) == ([120, 0], [50, 0])
    summary = ask(ObjectRequestKind.SUMMARY).summary
    assert summary.largest_ids == [object_id(1), object_id(3), object_id(2)]
    assert summary.largest_spilled == [True, False, False]
    assert (summary.memory_bytes, summary.spilled_bytes) == (70, 50)
    s.get(1)  # back in memory; 2 goes out
    assert ask(ObjectRequestKind.USAGE, [OWNER]).spilled_sizes == [30]
    s.request(ObjectRequestKind.DELETE, [2])
    assert ask(ObjectRequestKind.USAGE, [OWNER]).spilled_sizes == [0] and s.store.places.spilled_by_owner == {}


def test_a_server_that_never_spills_makes_no_directory(tmp_path):
    s = Spilling(tmp_path)
    s.put(1)
    s.store.places.close()
    assert os.listdir(tmp_path) == []


def test_without_a_spill_directory_a_put_past_the_memory_budget_is_refused_saying_so():
    store = ObjectStore(max_object_size=1000, max_memory=100)
    assert store.places.refusal(b"x" * 16, 120) == (
        "storage holds 0 bytes of its memory limit of 100 bytes (--memory-limit), and spills to no directory "
        "(--spill-directory)"
    )


@pytest.mark.parametrize("frames", [[b"pickle"], [b"pickle", bytes(range(256)) * 100, b""]])
def test_a_spill_file_gives_back_the_frames_it_was_given(tmp_path, frames):
    spill = SpillDirectory(str(tmp_path))
    spill.write(b"x" * 16, frames)
    assert [bytes(frame) for frame in spill.read(b"x" * 16)] == frames


def test_the_default_quota_of_an_owner_is_half_of_the_memory_and_the_spill_disk_together(tmp_path):
    assert ObjectStore(max_memory=100, spill=SpillDirectory(str(tmp_path)), max_disk=300).max_client_memory == 200
    assert ObjectStore(max_memory=100).max_client_memory == 50


# --- an object directory: objects that survive a restart ----------------------------------------------------


def test_with_an_object_directory_a_server_started_again_serves_every_object_it_held(tmp_path):
    first = Spilling(tmp_path, durable=True, max_disk=1000)
    assert first.put(1, 2, 3) == [ObjectStatus.OK] * 3  # 120 bytes: one of them only on disk
    assert first.files() == sorted(object_id(n).hex() for n in (1, 2, 3))  # every one has its file
    assert first.store.places.used_disk == 120
    first.store.places.close()  # (a server that stops, or is killed: the files stay)
    again = Spilling(tmp_path, durable=True, max_disk=1000)
    assert again.restored == 3 and again.store.bytes_of(OWNER) == 120
    assert again.get(3, 1, 2) == [payload(3), payload(1), payload(2)]
    again.request(ObjectRequestKind.DELETE, [2])
    assert again.files() == sorted(object_id(n).hex() for n in (1, 3))


def test_an_object_directory_bounds_every_object_by_the_disk_limit(tmp_path):
    s = Spilling(tmp_path, durable=True, max_disk=100)
    assert s.put(1, 2) == [ObjectStatus.OK] * 2
    assert s.put(3) == [ObjectStatus.STORAGE_FULL]  # 120 bytes of files: over the disk limit
    assert s.get(1, 2) == [payload(1), payload(2)]


def test_a_file_that_is_not_a_whole_object_is_removed_when_the_directory_is_read(tmp_path):
    directory = ObjectDirectory(str(tmp_path))
    directory.write(object_id(1), [b"whole"], OWNER)
    (tmp_path / object_id(2).hex()).write_bytes(b"\x00\x05short")  # cut by a crash, or not ours
    (tmp_path / (object_id(3).hex() + ".partial")).write_bytes(b"being written")
    found = directory.index()
    assert [(each.object_id, each.owner_id, each.frame_count, each.size) for each in found] == [
        (object_id(1), OWNER, 1, 5)
    ]
    assert sorted(os.listdir(tmp_path)) == [object_id(1).hex()]
