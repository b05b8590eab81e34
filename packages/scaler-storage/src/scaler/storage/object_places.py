"""Where the storage server keeps each object: in memory, or spilled to disk, within two budgets.

The memory budget (``--memory-limit``) bounds the payload bytes held in memory. Past it, with a spill directory
(``--spill-directory``), the least recently used objects go to disk, each to a file of its own, until the new
object fits; a get of a spilled object reads it back into memory (spilling others as needed), so what clients
use stays in memory. The disk budget (``--spill-disk-limit``) bounds the bytes on disk; only a put that fits
in neither is refused (``storageFull``). An object larger than the memory budget goes straight to disk, and a
get reads it from there for each reply.

`ObjectPlaces` decides (which objects to spill, whether a put fits); `SpillDirectory` does the file I/O, in
the server's thread: a spill or a read back of N bytes holds the server for as long as the disk takes to
write or read them.
"""

from __future__ import annotations

import heapq
import os
import shutil
import struct
import tempfile
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence

from scaler.protocol.message_limits import show_size
from scaler.protocol.messages import ObjectSummary

_COUNT = struct.Struct("!I")
_SIZE = struct.Struct("!Q")


class SpillDirectory:
    """Objects in files: one per object, in a directory of their own made inside ``parent`` when the first object
    is spilled (so a server that never spills leaves nothing), removed by `close`. A file holds the number of
    frames, their sizes, then the frames."""

    def __init__(self, parent: str) -> None:
        os.makedirs(parent, exist_ok=True)
        self.parent = parent
        self._path: Optional[str] = None

    @property
    def path(self) -> str:
        if self._path is None:
            self._path = tempfile.mkdtemp(prefix="scaler-spill-", dir=self.parent)
        return self._path

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.parent).free

    def write(self, object_id: bytes, frames: Sequence[Any]) -> None:
        views = [memoryview(frame) for frame in frames]
        with open(self._file(object_id), "wb") as file:
            file.write(_COUNT.pack(len(views)) + b"".join(_SIZE.pack(view.nbytes) for view in views))
            for view in views:
                file.write(view)

    def read(self, object_id: bytes) -> List[Any]:
        """The frames, each read into a bytearray of its own."""
        with open(self._file(object_id), "rb") as file:
            (count,) = _COUNT.unpack(file.read(_COUNT.size))
            sizes = [_SIZE.unpack(file.read(_SIZE.size))[0] for _ in range(count)]
            frames: List[Any] = []
            for size in sizes:
                frame = bytearray(size)
                if file.readinto(frame) != size:
                    raise OSError(f"spill file of object {object_id.hex()} is truncated")
                frames.append(frame)
        return frames

    def delete(self, object_id: bytes) -> None:
        try:
            os.unlink(self._file(object_id))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)

    def _file(self, object_id: bytes) -> str:
        return os.path.join(self.path, object_id.hex())


class ObjectPlaces:
    """The objects in memory (least recently used first) and on disk, by ID, with their sizes; and what each
    owner has on disk (``spilled_by_owner``: owners with nothing there are not in it)."""

    def __init__(self, max_memory: int, spill: Optional[SpillDirectory] = None, max_disk: int = 0) -> None:
        self.max_memory = max_memory
        self.max_disk = max_disk if spill is not None else 0
        self.spill = spill
        self._in_memory: OrderedDict[bytes, int] = OrderedDict()
        self._on_disk: Dict[bytes, int] = {}
        self.used_memory = 0
        self.used_disk = 0
        self.spilled_by_owner: Dict[bytes, int] = {}
        self.spills = 0  # objects written to disk since the start
        self.loads = 0  # objects read back since the start

    def on_disk(self, object_id: bytes) -> bool:
        return object_id in self._on_disk

    def refusal(self, object_id: bytes, size: int) -> str:
        """Why an object of ``size`` bytes (in place of what is stored under ``object_id``) cannot be stored ("":
        it can: in memory once the least recently used objects are spilled, or on disk if it is larger than the
        memory budget)."""
        memory_free = self.max_memory - self.used_memory + self._in_memory.get(object_id, 0)
        disk_free = self.max_disk - self.used_disk + self._on_disk.get(object_id, 0)
        if size > self.max_memory:
            fits = size <= disk_free
        else:
            spilled = 0
            for other, other_size in self._in_memory.items():  # the least recently used first
                if memory_free >= size:
                    break
                if other != object_id:
                    memory_free += other_size
                    spilled += other_size
            fits = memory_free >= size and spilled <= disk_free
        if fits:
            return ""
        where = f"storage holds {show_size(self.used_memory)} of its memory limit of {show_size(self.max_memory)}"
        if self.spill is None:
            return f"{where} (--memory-limit), and spills to no directory (--spill-directory)"
        return (
            f"{where} (--memory-limit) and {show_size(self.used_disk)} of its spill disk limit of "
            f"{show_size(self.max_disk)} (--spill-disk-limit)"
        )

    def add(self, object_id: bytes, size: int, objects: Mapping[bytes, Any]) -> None:
        """Place a new object of ``objects`` (ID -> each object, whose ``frames`` are None while it is on disk),
        whose `refusal` is "": in memory, spilling others as needed; on disk if it is larger than the memory
        budget."""
        if size > self.max_memory:
            self._spill_object(object_id, objects[object_id], size)
            return
        self._make_room(size, objects)
        self._in_memory[object_id] = size
        self.used_memory += size

    def use(self, object_id: bytes, objects: Mapping[bytes, Any]) -> List[Any]:
        """A get of the object: it is now the most recently used; its frames, read back from disk if it was
        spilled (and kept in memory again when it fits there, spilling others)."""
        stored = objects[object_id]
        if object_id in self._in_memory:
            self._in_memory.move_to_end(object_id)
            return stored.frames
        assert self.spill is not None
        frames = self.spill.read(object_id)
        self.loads += 1
        size = self._on_disk[object_id]
        if size <= self.max_memory:
            self._forget_file(object_id, stored.owner_id)
            self._make_room(size, objects)
            self._in_memory[object_id] = size
            self.used_memory += size
            stored.frames = frames
        return frames

    def remove(self, object_id: bytes, owner_id: bytes) -> None:
        """The object of ``owner_id`` is deleted."""
        size = self._in_memory.pop(object_id, None)
        if size is not None:
            self.used_memory -= size
        elif object_id in self._on_disk:
            self._forget_file(object_id, owner_id)

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()

    def summary(self, objects: Mapping[bytes, Any], count: int) -> ObjectSummary:
        """The ``count`` largest of ``objects`` (ID -> each object, with its ``owner_id`` and ``size``), largest
        first, whether each is on disk, and the bytes in memory and on disk: a pass over every object."""
        largest = heapq.nlargest(count, objects.items(), key=lambda item: item[1].size)
        return ObjectSummary(
            largest_ids=[object_id for object_id, _ in largest],
            largest_owners=[stored.owner_id for _, stored in largest],
            largest_sizes=[stored.size for _, stored in largest],
            largest_spilled=[object_id in self._on_disk for object_id, _ in largest],
            memory_bytes=self.used_memory,
            spilled_bytes=self.used_disk,
        )

    def _make_room(self, size: int, objects: Mapping[bytes, Any]) -> None:
        """Spill the least recently used objects until ``size`` more bytes fit in memory."""
        while self.used_memory + size > self.max_memory and self._in_memory:
            object_id, spilled = self._in_memory.popitem(last=False)
            self.used_memory -= spilled
            self._spill_object(object_id, objects[object_id], spilled)

    def _spill_object(self, object_id: bytes, stored: Any, size: int) -> None:
        assert self.spill is not None, "a put past the memory budget without a spill directory was refused"
        self.spill.write(object_id, stored.frames)
        stored.frames = None
        self._on_disk[object_id] = size
        self.used_disk += size
        owner_id = stored.owner_id
        self.spilled_by_owner[owner_id] = self.spilled_by_owner.get(owner_id, 0) + size
        self.spills += 1

    def _forget_file(self, object_id: bytes, owner_id: bytes) -> None:
        assert self.spill is not None
        size = self._on_disk.pop(object_id)
        self.used_disk -= size
        left = self.spilled_by_owner[owner_id] - size
        if left:
            self.spilled_by_owner[owner_id] = left
        else:
            del self.spilled_by_owner[owner_id]
        self.spill.delete(object_id)
