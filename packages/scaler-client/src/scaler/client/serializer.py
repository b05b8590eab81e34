"""How task arguments and results become bytes.

The default is cloudpickle. A custom serializer is any object with
``serialize(obj) -> bytes`` and ``deserialize(payload) -> object``; the client
cloudpickles it once, puts it in object storage, and every task names it
(``Task.serializer_id``), so the worker decodes the arguments and encodes the
result with the same object. Functions are always cloudpickled, and a failed
task's ``(exception, traceback text)`` is always cloudpickled too.
"""

from __future__ import annotations

import abc
import pickle
from typing import Any

import cloudpickle

# Values that plain pickle encodes exactly as cloudpickle would, ten times faster (tiny tasks
# are mostly such arguments); anything else may need cloudpickle's by-value pickling.
_PLAIN_TYPES = frozenset({int, float, complex, str, bytes, bool, type(None)})


class Serializer(abc.ABC):
    """Base class (and contract) of a serializer given to ``Client(serializer=...)``."""

    @abc.abstractmethod
    def serialize(self, obj: Any) -> bytes:
        """Turn a task argument or result into bytes."""

    @abc.abstractmethod
    def deserialize(self, payload: bytes) -> Any:
        """Turn bytes made by `serialize` back into the object."""


class DefaultSerializer(Serializer):
    """cloudpickle: what a task gets when the client names no serializer."""

    def serialize(self, obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return cloudpickle.dumps(obj)

    def deserialize(self, payload: bytes) -> Any:
        return cloudpickle.loads(payload)


def check_serializer(serializer: Any) -> None:
    for method in ("serialize", "deserialize"):
        if not callable(getattr(serializer, method, None)):
            raise TypeError(
                f"serializer {serializer!r} has no {method}() method: "
                "give an object with serialize(obj) -> bytes and deserialize(bytes) -> obj"
            )
