"""Which `Client` is current, as Dask's ``get_client`` finds it: the innermost one whose ``with`` block runs, else
the last one made; either only while it is connected. The joblib backend uses it when given none
(`scaler.compat.joblib`); `Client.current()` returns it."""

from __future__ import annotations

import threading
import weakref
from typing import Any, List, Optional

_lock = threading.Lock()
_entered: List[Any] = []  # the Clients in a `with` block, innermost last (strong: the block holds them anyway)
_last_made: Optional[weakref.ref] = None


def made(client: Any) -> None:
    global _last_made
    with _lock:
        _last_made = weakref.ref(client)


def entered(client: Any) -> None:
    with _lock:
        _entered.append(client)


def exited(client: Any) -> None:
    with _lock:
        for index in range(len(_entered) - 1, -1, -1):
            if _entered[index] is client:
                del _entered[index]
                return


def current() -> Optional[Any]:
    """The current connected Client, or None."""
    with _lock:
        candidates = [*reversed(_entered), _last_made() if _last_made is not None else None]
    return next((client for client in candidates if client is not None and client.connected), None)
