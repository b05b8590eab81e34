"""The layout of a serialized value (a "payload") as clients, workers and storage hand it around.

A payload is bytes-like, or a list of frames (each bytes-like): a protocol-5 pickle first, then the
buffers it refers to out of band, in order. Buffers from `OUT_OF_BAND_BYTES` on travel as frames of
their own, never copied into the pickle; smaller ones stay inside it. The client's default serializer
makes such lists (`scaler.protocol.serializer`); the worker passes them on frame by frame.
"""

from __future__ import annotations

import pickletools
from typing import Any, List

Payload = Any  # bytes-like, or a list of bytes-like frames as described above
OUT_OF_BAND_BYTES = 64 * 1024  # buffers from this size on travel as frames of their own


def writable_buffers(pickled: Any) -> List[bool]:
    """For each buffer the protocol-5 pickle ``pickled`` takes out of band, in order: whether the value rebuilt on
    it may write to it (a NumPy array, a bytearray), or only reads it (the pickle marks it read-only: ``bytes``)."""
    writable: List[bool] = []
    try:
        for opcode, _, _ in pickletools.genops(pickled):
            if opcode.name == "NEXT_BUFFER":
                writable.append(True)
            elif opcode.name == "READONLY_BUFFER" and writable:
                writable[-1] = False
    except Exception:  # not a pickle: whoever deserializes it says so
        pass
    return writable
