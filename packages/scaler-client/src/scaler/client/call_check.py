"""Whether a function can be called with the arguments a task gives it, checked when the task is submitted.

A call that cannot bind (a required argument missing, one too many, an unknown keyword) raises the same
`TypeError` Python would raise, at ``submit`` in the caller's thread, rather than as the task's failure on a
worker, as the earlier engine did. Whether a call binds depends only on how many positional arguments it has
and which keywords, so each shape is checked once per function (`CallChecks`): ``map`` of a million tasks binds
once. Only functions and classes are remembered (other callables, a bound method, a partial, joblib's batch,
may hold data, and are bound each time). Callables without a signature Python can read (some builtins, C
extensions) are not checked.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

_REMEMBERED = (types.FunctionType, types.BuiltinFunctionType, type)  # light, and the same object call after call
_MAX_SHAPES = 4096  # the checks a client remembers (then it forgets them all: a few more binds, no unbounded memory)


class CallChecks:
    def __init__(self) -> None:
        self._passed: Dict[Tuple[Any, int, Tuple[str, ...]], bool] = {}  # (function, positional count, keywords)

    def check(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """`TypeError` when ``fn(*args, **kwargs)`` cannot bind, as the call itself would say."""
        shape = (fn, len(args), tuple(kwargs)) if type(fn) in _REMEMBERED else None
        if shape in self._passed:
            return
        signature = _signature(fn)
        if signature is not None:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as error:
                raise TypeError(f"{_name(fn)}(): {error}") from None
        if shape is not None:
            if len(self._passed) >= _MAX_SHAPES:
                self._passed.clear()
            self._passed[shape] = True


def _signature(fn: Callable[..., Any]) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read: the worker's call will say
        return None


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
