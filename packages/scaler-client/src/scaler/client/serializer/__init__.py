"""How task arguments and results become bytes.

The default is cloudpickle. A custom serializer is any object with
``serialize(obj) -> bytes`` and ``deserialize(payload) -> object``; the client
cloudpickles it once, puts it in object storage, and every task names it
(``Task.serializer_id``), so the worker decodes the arguments and encodes the
result with the same object. Functions are always cloudpickled, and a failed
task's ``(exception, traceback text)`` is always cloudpickled too.

The serializers are the payload format clients and workers share: they live in `scaler.protocol.serializer`,
and this is the name users import them by.
"""

from scaler.protocol.serializer import (
    DefaultSerializer,
    Serializer,
    check_serializer,
    deserialize_payload,
    serialize_payload,
)

__all__ = ["DefaultSerializer", "Serializer", "check_serializer", "deserialize_payload", "serialize_payload"]
