"""A result's large frames that become bytes are copied out of the received frames a chunk at a time, each
chunk's pages given back, so the result exists once while it is copied (received_payloads.py), with frames
received from a real ZeroMQ socket; frames that are read where they arrived stay as they came."""

from __future__ import annotations

import pickle
import re
from typing import Any, Iterator, List

import pytest
import zmq

from scaler.client import received_payloads
from scaler.client.serializer import DefaultSerializer, deserialize_payload

MIB = 1 << 20
SIZE = 128 * MIB
# what a peak must stay under: a copy made whole before its frame is freed adds SIZE; a chunk at a time adds
# CHUNK_BYTES, and what else this process's threads allocate meanwhile (an earlier test's agent thread ending,
# on a busy machine) adds its own, measured up to 15 MiB more
HELD_TWICE = SIZE // 2


@pytest.fixture
def pair() -> Iterator[Any]:
    """Sends frames over TCP and returns them as received (``copy=False``: ZeroMQ's memory)."""
    context = zmq.Context()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    sender.setsockopt(zmq.LINGER, 0)
    receiver.setsockopt(zmq.LINGER, 0)
    try:
        receiver.connect(f"tcp://127.0.0.1:{sender.bind_to_random_port('tcp://127.0.0.1')}")

        def received(frames: List[Any]) -> List[Any]:
            sender.send_multipart(frames, copy=False)
            assert receiver.poll(30_000), "the frames did not arrive"
            return receiver.recv_multipart(copy=False)

        yield received
    finally:
        sender.close()
        receiver.close()
        context.term()


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


def _memory_now() -> int:
    """This process's resident memory; its peak (VmHWM) starts again from it."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    return _kib("VmRSS")


def _peak_over(before: int) -> int:
    return _kib("VmHWM") - before


def _payload(received: List[Any]) -> Any:
    """What storage_requests hands on: the pickle as bytes (small frames are copied, codec.received_blobs), and
    the large frames as they came."""
    return [received[0].bytes, *received[1:]] if len(received) > 1 else received[0]


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_top_level_bytes_or_bytearray_result_exists_once_while_it_is_copied(pair, kind):
    value = kind(b"\x01") * SIZE
    payload = _payload(pair(DefaultSerializer().serialize_frames(value)))
    del value
    before = _memory_now()
    owned = received_payloads.own(payload)
    peak = _peak_over(before)
    del payload  # the frame: its pages were given back as they were copied
    result = deserialize_payload(DefaultSerializer(), owned)
    assert type(result) is kind and len(result) == SIZE and result.count(b"\x01") == SIZE
    assert result is owned[1]  # made once, here, not copied again by the pickle
    assert peak < HELD_TWICE  # the frame's copy held twice only a chunk at a time


def test_a_serializer_of_the_users_gets_its_single_frame_as_bytes_held_once(pair):
    [frame] = pair([b"\x02" * SIZE])
    before = _memory_now()
    owned = received_payloads.own(frame)
    peak = _peak_over(before)
    del frame
    assert type(owned) is bytes and owned == b"\x02" * SIZE
    assert peak < HELD_TWICE


class Writable:
    """Pickles its data as a writable out-of-band buffer, as a NumPy array does."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> Any:
        return Writable, (pickle.PickleBuffer(self.data),)


def test_frames_read_where_they_arrived_stay_as_they_came(pair):
    received = pair(DefaultSerializer().serialize_frames(Writable(bytearray(b"\x03" * (2 * MIB)))))
    payload = _payload(received)
    owned = received_payloads.own(payload)
    assert owned is payload and owned[1] is received[1]  # a writable buffer: the value is made on the frame
    small = pair([b"\x04" * (received_payloads.OWNED_FROM_BYTES - 1)])[0]
    assert received_payloads.own(small) is small
    data = b"\x05" * (2 * MIB)
    assert received_payloads.own(data) is data  # not received from a socket: nothing to copy out, or give back
