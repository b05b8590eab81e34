"""A result's payload as the client keeps it once storage's answer brought it: the large frames that become a
``bytes`` (or a top-level ``bytearray``) copied out of ZeroMQ's memory into that value's own, a chunk at a time,
each chunk's pages of the frame given back to the system once copied (Linux), so the result exists once, not
twice, while it is copied. A Python ``bytes`` owns its memory: it cannot be made on the received frame.

What reads a frame where it arrived keeps it there (a NumPy array is made on it without a copy). A frame copied
here is left zeroed where its pages were given back: the payload this returns is the only one to read, and only
frames received from a socket (libzmq's memory, nobody else's) may be given.
"""

from __future__ import annotations

import ctypes
import io
import mmap
import sys
from typing import Any, Callable, List, Optional

import zmq

from scaler.client.serializer import DefaultSerializer
from scaler.protocol.payload import OUT_OF_BAND_BYTES, writable_buffers

OWNED_FROM_BYTES = 1 << 20  # smaller frames are copied by whatever reads them, as they came
CHUNK_BYTES = 16 << 20  # copied between two releases: what the copy holds twice at most
_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = 4  # Linux: the pages read as zeros afterwards, their memory is freed at once

# the pickle the default serializer makes of a top-level bytearray (`bytearray` applied to its buffer, out of
# band), and one whose value is its buffer itself, so the bytearray made here is the value without a copy
_BYTEARRAY_PICKLE = DefaultSerializer().serialize_frames(bytearray(OUT_OF_BAND_BYTES))[0]
_BUFFER_ITSELF = b"\x80\x05\x97."  # PROTO 5, NEXT_BUFFER, STOP


def _page_release() -> Optional[Callable[[int, int, int], int]]:
    """libc's madvise on Linux; elsewhere None (a frame is then copied whole, and held twice meanwhile)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _page_release()


def own(payload: Any) -> Any:
    """``payload`` (a frame, or a list of frames: `scaler.protocol.payload`) with its large frames that become
    ``bytes`` or a top-level ``bytearray`` copied out of the received frames, which are released as copied."""
    if type(payload) is not list:  # a whole pickle, or a serializer of the user's bytes: read as bytes
        return _copied(payload, io.BytesIO()) if _received_large(payload) else payload
    frames: List[Any] = payload
    if len(frames) == 2 and frames[0] == _BYTEARRAY_PICKLE and _received_large(frames[1]):
        return [_BUFFER_ITSELF, _copied(frames[1], bytearray())]
    large = [index for index in range(1, len(frames)) if _received_large(frames[index])]
    if not large:
        return payload
    writable = writable_buffers(frames[0])
    read_only = [index for index in large if index - 1 < len(writable) and not writable[index - 1]]
    if not read_only:  # what is made on them writes to them (a NumPy array): made where they arrived
        return payload
    owned = list(frames)
    for index in read_only:  # each becomes a bytes
        owned[index] = _copied(frames[index], io.BytesIO())
    return owned


def _received_large(frame: Any) -> bool:
    return type(frame) is zmq.Frame and len(frame) >= OWNED_FROM_BYTES


def _copied(frame: Any, into: Any) -> Any:
    """``frame``'s bytes written into ``into`` (a BytesIO: the bytes it holds, without a copy; a bytearray: it)
    a chunk at a time; after each chunk, the frame's pages it covers are given back."""
    start = _address(frame)
    released = -(-start // _PAGE) * _PAGE if start else 0
    with memoryview(frame) as whole, whole.cast("B") as view:
        size = view.nbytes
        for offset in range(0, size, CHUNK_BYTES):
            end = min(size, offset + CHUNK_BYTES)
            with view[offset:end] as chunk:
                if type(into) is bytearray:
                    into += chunk
                else:
                    into.write(chunk)
            if start and _madvise is not None:
                upto = (start + end) // _PAGE * _PAGE
                if upto > released:
                    _madvise(released, upto - released, _MADV_DONTNEED)
                    released = upto
    return into if type(into) is bytearray else into.getvalue()


def _address(frame: Any) -> int:
    """Where a received frame's bytes lie, when they may be given back (Linux); 0 otherwise."""
    if _madvise is None:
        return 0
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(frame))
    except (TypeError, ValueError):  # pyzmq made it read-only
        return 0
