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

With an object directory (``--object-directory``, `ObjectDirectory`) every object is written to a file there as
it is stored (with its owner) and removed as it is removed, so that a server started again with that directory
serves the objects it finds there (`ObjectDirectory.index`): they survive a restart (docs/object-storage.md,
"Restarts"). Memory is then a cache of the directory: an object past the memory budget is only dropped from
memory (its file is there), and the disk budget (``--spill-disk-limit``) bounds every object's file.
"""

from __future__ import annotations

import heapq
import logging
import os
import shutil
import struct
import tempfile
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

from scaler.protocol.message_limits import show_size
from scaler.protocol.messages import ObjectSummary

_COUNT = struct.Struct("!I")
_SIZE = struct.Struct("!Q")
_OWNER = struct.Struct("!H")
_PARTIAL = ".partial"  # a file being written: renamed once whole, so that a crash leaves no half object

logger = logging.getLogger(__name__)


class SpillDirectory:
    """Objects in files: one per object, in a directory of their own made inside ``parent`` when the first object
    is spilled (so a server that never spills leaves nothing), removed by `close`. A file holds the number of
    frames, their sizes, then the frames."""

    durable = False  # its files are spilled objects only, gone when the server stops

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

    def write(self, object_id: bytes, frames: Sequence[Any], owner_id: bytes = b"") -> None:
        views = [memoryview(frame) for frame in frames]
        with open(self._file(object_id), "wb") as file:
            file.write(_COUNT.pack(len(views)) + b"".join(_SIZE.pack(view.nbytes) for view in views))
            for view in views:
                file.write(view)

    def read(self, object_id: bytes) -> List[Any]:
        """The frames, each read into a bytearray of its own."""
        with open(self._file(object_id), "rb") as file:
            return _read_frames(file, object_id)

    def delete(self, object_id: bytes) -> None:
        _unlink(self._file(object_id))

    def close(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)

    def _file(self, object_id: bytes) -> str:
        return os.path.join(self.path, object_id.hex())


class FoundObject(NamedTuple):
    object_id: bytes
    owner_id: bytes
    frame_count: int
    size: int


class ObjectDirectory(SpillDirectory):
    """Every object in a file of its own in ``path`` (made if missing, kept when the server stops): its owner,
    the number of frames, their sizes, then the frames. Written whole (to a partial file, renamed), so that a
    server killed while it writes leaves only whole objects."""

    durable = True

    def __init__(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.parent = path
        self._path = path

    def write(self, object_id: bytes, frames: Sequence[Any], owner_id: bytes = b"") -> None:
        views = [memoryview(frame) for frame in frames]
        header = _OWNER.pack(len(owner_id)) + owner_id + _COUNT.pack(len(views))
        path = self._file(object_id)
        with open(path + _PARTIAL, "wb") as file:
            file.write(header + b"".join(_SIZE.pack(view.nbytes) for view in views))
            for view in views:
                file.write(view)
        os.replace(path + _PARTIAL, path)

    def read(self, object_id: bytes) -> List[Any]:
        with open(self._file(object_id), "rb") as file:
            (length,) = _OWNER.unpack(file.read(_OWNER.size))
            file.read(length)
            return _read_frames(file, object_id)

    def index(self) -> List[FoundObject]:
        """The objects in the directory (a file that cannot be read, or a partial one, is removed and logged)."""
        found: List[FoundObject] = []
        for name in sorted(os.listdir(self.parent)):
            path = os.path.join(self.parent, name)
            try:
                object_id = bytes.fromhex(name)
                with open(path, "rb") as file:
                    (length,) = _OWNER.unpack(file.read(_OWNER.size))
                    owner_id = file.read(length)
                    (count,) = _COUNT.unpack(file.read(_COUNT.size))
                    sizes = [_SIZE.unpack(file.read(_SIZE.size))[0] for _ in range(count)]
                if os.path.getsize(path) != _OWNER.size + length + _COUNT.size + count * _SIZE.size + sum(sizes):
                    raise ValueError("its size is not what its header says")
            except (ValueError, struct.error, OSError) as error:
                logger.warning(f"ObjectStorageServer: removed {path}, not a whole object: {error}")
                _unlink(path)
                continue
            found.append(FoundObject(object_id, owner_id, count, sum(sizes)))
        return found

    def close(self) -> None:
        pass  # the objects stay for the next server


def _read_frames(file: Any, object_id: bytes) -> List[Any]:
    (count,) = _COUNT.unpack(file.read(_COUNT.size))
    sizes = [_SIZE.unpack(file.read(_SIZE.size))[0] for _ in range(count)]
    frames: List[Any] = []
    for size in sizes:
        frame = bytearray(size)
        if file.readinto(frame) != size:
            raise OSError(f"the file of object {object_id.hex()} is truncated")
        frames.append(frame)
    return frames


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class ObjectPlaces:
    """The objects in memory (least recently used first) and on disk, by ID, with their sizes; and what each
    owner has on disk (``spilled_by_owner``: owners with nothing there are not in it)."""

    def __init__(self, max_memory: int, spill: Optional[SpillDirectory] = None, max_disk: int = 0) -> None:
        self.max_memory = max_memory
        self.max_disk = max_disk if spill is not None else 0
        self.spill = spill
        self.durable = spill is not None and spill.durable  # an object directory: every object has its file
        self._in_memory: OrderedDict[bytes, int] = OrderedDict()
        self._on_disk: Dict[bytes, int] = {}
        self.used_memory = 0
        self.used_disk = 0
        self.spilled_by_owner: Dict[bytes, int] = {}
        self.spills = 0  # objects written to disk since the start
        self.loads = 0  # objects read back since the start
        self._files: Dict[bytes, int] = {}  # with an object directory: every object's file, by size

    def on_disk(self, object_id: bytes) -> bool:
        return object_id in self._on_disk

    def refusal(self, object_id: bytes, size: int) -> str:
        """Why an object of ``size`` bytes (in place of what is stored under ``object_id``) cannot be stored ("":
        it can: in memory once the least recently used objects are spilled, or on disk if it is larger than the
        memory budget)."""
        memory_free = self.max_memory - self.used_memory + self._in_memory.get(object_id, 0)
        disk_free = self.max_disk - self.used_disk + self._on_disk.get(object_id, 0)
        if self.durable:  # every object has its file; memory is made by dropping what is on disk already
            disk_free = self.max_disk - self.used_disk + self._files.get(object_id, 0)
            fits = size <= disk_free
        elif size > self.max_memory:
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
        budget. With an object directory, its file is written first."""
        if self.durable:
            stored = objects[object_id]
            self.spill.write(object_id, stored.frames, stored.owner_id)  # type: ignore[union-attr]
            self._files[object_id] = size
            self.used_disk += size
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

    def found(self, object_id: bytes, owner_id: bytes, size: int) -> None:
        """An object of the object directory, found there at the start: on disk until it is asked for."""
        self._files[object_id] = self._on_disk[object_id] = size
        self.used_disk += size
        self.spilled_by_owner[owner_id] = self.spilled_by_owner.get(owner_id, 0) + size

    def remove(self, object_id: bytes, owner_id: bytes) -> None:
        """The object of ``owner_id`` is deleted."""
        size = self._in_memory.pop(object_id, None)
        if size is not None:
            self.used_memory -= size
        elif object_id in self._on_disk:
            self._forget_file(object_id, owner_id)
        if self.durable:
            self._on_disk.pop(object_id, None)
            self.used_disk -= self._files.pop(object_id, 0)
            self.spill.delete(object_id)  # type: ignore[union-attr]

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
        if not self.durable:  # (an object directory holds its file already)
            self.spill.write(object_id, stored.frames)
            self.used_disk += size
        stored.frames = None
        self._on_disk[object_id] = size
        owner_id = stored.owner_id
        self.spilled_by_owner[owner_id] = self.spilled_by_owner.get(owner_id, 0) + size
        self.spills += 1

    def _forget_file(self, object_id: bytes, owner_id: bytes) -> None:
        """A spilled object read back, or removed: its spill file goes (an object directory's file stays)."""
        assert self.spill is not None
        size = self._on_disk.pop(object_id)
        left = self.spilled_by_owner[owner_id] - size
        if left:
            self.spilled_by_owner[owner_id] = left
        else:
            del self.spilled_by_owner[owner_id]
        if not self.durable:
            self.used_disk -= size
            self.spill.delete(object_id)
