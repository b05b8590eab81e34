"""Bounded mappings that forget their least recently used entry first.

A processor caches its functions and serializers in `LRUCache`s and its object
arguments in a `SizedLRUCache`, and the agent keeps a copy of the same caches:
both ends apply the same `get`/`put` sequence with the same capacity
(`processor_caches`), so the agent knows, without asking, which functions and
objects a processor already holds and sends their bytes only once. The agent
also keeps the functions it fetched (`storage_requests`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Optional, Tuple, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    __slots__ = ("_capacity", "_entries")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> Optional[V]:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Store ``value`` as the most recently used entry, forgetting the least recently used one when full."""
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)
        if len(entries) > self._capacity:
            entries.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


class SizedLRUCache(Generic[K, V]):
    """Like `LRUCache`, bounded by the total size of its entries (as given to `put`) rather than their count.
    An entry larger than the whole capacity is not kept."""

    __slots__ = ("_capacity", "_entries", "_size")

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"cache capacity must not be negative, not {capacity_bytes}")
        self._capacity = capacity_bytes
        self._entries: OrderedDict[K, Tuple[V, int]] = OrderedDict()
        self._size = 0

    def get(self, key: K) -> Optional[V]:
        """The value of ``key`` (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Store ``value`` as the most recently used entry, forgetting the least recently used ones while the
        total size exceeds the capacity."""
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self._size -= old[1]
        entries[key] = (value, size)
        self._size += size
        while self._size > self._capacity:
            _, (_, forgotten) = entries.popitem(last=False)
            self._size -= forgotten

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        return self._size

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0
