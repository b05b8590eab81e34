"""How objects travel as payload frames in `ObjectRequest` (put) and `ObjectResponse` (get).

An object's payload is one frame (bytes-like), or a list of several frames (the
default serializer's pickle followed by the buffers it holds out of band). The
frames of all objects of a message follow the message in order; ``frameCounts``
says how many belong to each object, and is left empty when each has one (so a
protocol 1.0 peer reads such a message as before).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from scaler.protocol.messages import ObjectResponse, ObjectStatus


def pack(payloads: Sequence[Any]) -> Tuple[List[Any], List[int]]:
    """The frames of ``payloads``, in order, and the frame counts to send with them."""
    frames: List[Any] = []
    counts: List[int] = []
    several = False
    for payload in payloads:
        if type(payload) is list:
            frames.extend(payload)
            counts.append(len(payload))
            several = several or len(payload) != 1
        else:
            frames.append(payload)
            counts.append(1)
    return frames, counts if several else []


def split(frame_counts: Sequence[int], objects: int, frames: Sequence[Any]) -> List[List[Any]]:
    """The frames of each of the ``objects`` objects of a put, in order (``frame_counts`` empty: one each). The
    counts must add up to the frames (the storage server checks it first)."""
    counts = frame_counts or [1] * objects
    split: List[List[Any]] = []
    start = 0
    for count in counts:
        split.append(list(frames[start : start + count]))
        start += count
    return split


def found(response: ObjectResponse, frames: Sequence[Any]) -> List[Optional[Any]]:
    """The payload of each of ``response.object_ids`` in a get's answer: None where its status is not ok (or its
    frames are missing), the frame of an object of one frame, the list of frames of an object of several."""
    counts = iter(response.frame_counts)
    position = 0
    payloads: List[Optional[Any]] = []
    for status in response.statuses:
        count = next(counts, 1) if status == ObjectStatus.OK else 0
        if count == 0 or position + count > len(frames):
            payloads.append(None)
            continue
        payloads.append(frames[position] if count == 1 else list(frames[position : position + count]))
        position += count
    return payloads


def size(payload: Any) -> int:
    """The bytes of a payload, over all its frames."""
    if type(payload) is list:
        return sum(memoryview(frame).nbytes for frame in payload)
    return len(payload)


def largest_frame(payload: Any) -> int:
    """The bytes of a payload's largest frame (what a socket's message size limit is checked against)."""
    if type(payload) is list:
        return max((memoryview(frame).nbytes for frame in payload), default=0)
    return len(payload)
