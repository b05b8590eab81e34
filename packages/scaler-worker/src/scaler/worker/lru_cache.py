"""A bounded mapping that forgets its least recently used entry first.

The agent keeps one `LRUCache` per processor that mirrors the processor's own
function cache: both sides apply the same `get`/`put` sequence with the same
capacity, so the agent knows, without asking, which functions a processor
already holds and sends their bytes only once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Optional, TypeVar

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
