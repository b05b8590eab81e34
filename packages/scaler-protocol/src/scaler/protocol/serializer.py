"""How task arguments and results become bytes: the payload format clients and workers share.

The default is cloudpickle. A custom serializer is any object with
``serialize(obj) -> bytes`` and ``deserialize(payload) -> object``; the client
cloudpickles it once, puts it in object storage, and every task names it
(``Task.serializer_id``), so the worker decodes the arguments and encodes the
result with the same object. Functions are always cloudpickled, and a failed
task's ``(exception, traceback text)`` is always cloudpickled too.

Users import these from ``scaler.client.serializer`` (or ``scaler``); the client writes payloads with them
and the processor that runs a task reads its arguments and writes its result with them, so they live here,
where both take them. `Serializer` and `DefaultSerializer` are pickled by reference under that public name,
which every release has: a serializer a client pickles loads on a worker of another version.
"""


from __future__ import annotations

import abc
import pickle
from typing import Any, List

import cloudpickle

from scaler.protocol.payload import OUT_OF_BAND_BYTES, Payload

# Values that plain pickle encodes exactly as cloudpickle would, ten times faster (tiny tasks
# are mostly such arguments); anything else may need cloudpickle's by-value pickling.
_PLAIN_TYPES = frozenset({int, float, complex, str, bytes, bool, type(None)})


class Serializer(abc.ABC):
    """Base class (and contract) of a serializer given to ``Client(serializer=...)``."""

    __module__ = "scaler.client.serializer"  # its public name (see above)

    @abc.abstractmethod
    def serialize(self, obj: Any) -> bytes:
        """Turn a task argument or result into bytes."""

    @abc.abstractmethod
    def deserialize(self, payload: bytes) -> Any:
        """Turn bytes made by `serialize` back into the object."""


class DefaultSerializer(Serializer):
    """cloudpickle: what a task gets when the client names no serializer."""

    __module__ = "scaler.client.serializer"  # its public name (see above)

    def serialize(self, obj: Any) -> bytes:
        if type(obj) in _PLAIN_TYPES:
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return cloudpickle.dumps(obj)

    def deserialize(self, payload: Any) -> Any:
        return cloudpickle.loads(payload)

    def serialize_frames(self, obj: Any) -> Payload:
        """`serialize`, except that the large buffers ``obj`` holds (a top-level ``bytes`` or ``bytearray``, and
        what pickles its data as `pickle.PickleBuffer`: NumPy arrays, ...) stay out of the pickle: the payload
        is then a list of frames, the pickle first, each buffer after it as it lies in memory (not copied)."""
        kind = type(obj)
        if kind in _PLAIN_TYPES and not (kind is bytes and len(obj) >= OUT_OF_BAND_BYTES):
            return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if (kind is bytes or kind is bytearray) and len(obj) >= OUT_OF_BAND_BYTES:
            obj = _OutOfBand(obj)
        frames: List[Any] = [b""]

        def out_of_band(buffer: pickle.PickleBuffer) -> bool:
            raw = buffer.raw()
            if raw.nbytes < OUT_OF_BAND_BYTES:
                return True  # small: inside the pickle
            frames.append(raw)
            return False

        frames[0] = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=out_of_band)
        return frames[0] if len(frames) == 1 else frames


class _OutOfBand:
    """Pickles a ``bytes`` or ``bytearray`` as its type applied to an out-of-band buffer."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> Any:
        return type(self.data), (pickle.PickleBuffer(self.data),)


def serialize_payload(serializer: Any, obj: Any) -> Payload:
    """``obj`` serialized by ``serializer``: in frames by the default one, as its bytes by any other."""
    if type(serializer) is DefaultSerializer:
        return serializer.serialize_frames(obj)
    return serializer.serialize(obj)


def deserialize_payload(serializer: Any, payload: Payload) -> Any:
    """The value of a payload made by `serialize_payload` (frames may be any bytes-like objects)."""
    if type(payload) is list:
        if len(payload) > 1:
            if type(serializer) is not DefaultSerializer:
                raise TypeError(f"a payload of {len(payload)} frames, but only the default serializer writes frames")
            return pickle.loads(payload[0], buffers=payload[1:])
        payload = payload[0]
    if type(payload) is not bytes and type(serializer) is not DefaultSerializer:
        payload = bytes(payload)  # a received frame: a serializer of the user's is promised bytes
    return serializer.deserialize(payload)


def check_serializer(serializer: Any) -> None:
    for method in ("serialize", "deserialize"):
        if not callable(getattr(serializer, method, None)):
            raise TypeError(
                f"serializer {serializer!r} has no {method}() method: "
                "give an object with serialize(obj) -> bytes and deserialize(bytes) -> obj"
            )
