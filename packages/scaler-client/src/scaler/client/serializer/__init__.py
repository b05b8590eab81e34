"""How task arguments and results become bytes: ``Client(serializer=...)`` takes a `Serializer`.

The serializers are the payload format clients and workers share, so they live in `scaler.protocol.serializer`
(which says how they work); this is the name users import them by.
"""

from scaler.protocol.serializer import (
    DefaultSerializer,
    Serializer,
    check_serializer,
    deserialize_payload,
    serialize_payload,
)

__all__ = ["DefaultSerializer", "Serializer", "check_serializer", "deserialize_payload", "serialize_payload"]
