"""Dask's ``gather`` and ``scatter`` over collections: futures nested in lists, tuples, sets and dicts become their
results, in the same shape; data in a list, tuple or dict becomes object references, one per item."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Dict, List

from scaler.client.object_reference import ObjectReference

_SKIPPED = object()  # a failed future, with errors="skip": left out of its collection
_ERRORS = ("raise", "skip")


def gather(futures: Any, errors: str = "raise") -> Any:
    """``futures`` with every future replaced by its result: a future, or lists, tuples, sets and dicts (values)
    of futures and other values, at any depth (other values are returned as they are). ``errors="raise"``: the
    first failed future's exception (in the order of the collection) is raised; ``"skip"``: failed or cancelled
    futures are left out of their collection (a future alone gives None)."""
    if errors not in _ERRORS:
        raise ValueError(f"errors must be one of {', '.join(map(repr, _ERRORS))}, not {errors!r}")
    value = _gather(futures, errors == "skip")
    return None if value is _SKIPPED else value


def _gather(value: Any, skip: bool) -> Any:
    if isinstance(value, concurrent.futures.Future):
        if not skip:
            return value.result()
        try:
            return value.result()
        except (Exception, concurrent.futures.CancelledError):
            return _SKIPPED
    kind = type(value)
    if kind is dict:
        gathered: Dict[Any, Any] = {key: _gather(item, skip) for key, item in value.items()}
        return {key: item for key, item in gathered.items() if item is not _SKIPPED}
    if kind in (list, tuple, set, frozenset):
        items = [item for item in (_gather(each, skip) for each in value) if item is not _SKIPPED]
        return items if kind is list else kind(items)
    return value


def scatter(data: Any, put_all: Callable[[List[Any]], List[ObjectReference]]) -> Any:
    """``data`` put in object storage by ``put_all`` (in one round of requests): a list or tuple of references
    for a list or tuple (one per item), a dict of references for a dict (one per value), else one reference."""
    if type(data) is dict:
        return dict(zip(data, put_all(list(data.values())), strict=True))
    if type(data) in (list, tuple):
        references = put_all(list(data))
        return references if type(data) is list else tuple(references)
    return put_all([data])[0]
