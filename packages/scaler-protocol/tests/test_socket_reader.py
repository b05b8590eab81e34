"""The one reader of every shell (`socket_reader`): bursts, the error rule, and the asyncio driver."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, List

import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.socket_reader import LoopReader, SocketReader, decoder
from scaler.protocol.version import PROTOCOL_VERSION


def _pair(context: zmq.Context, name: str) -> Any:
    reader, writer = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    for sock in (reader, writer):
        sock.setsockopt(zmq.LINGER, 0)
    reader.bind(f"inproc://{name}")
    writer.connect(f"inproc://{name}")
    return reader, writer


def test_a_burst_reads_up_to_its_limit_and_says_more_waits_then_the_rest():
    context = zmq.Context()
    reader, writer = _pair(context, "burst")
    try:
        for number in range(5):
            writer.send(b"%d" % number)
        read = SocketReader(reader, burst=3)
        events: List[Any] = []
        assert read.read(events) is True  # stopped at the limit: more waits
        assert events == [[b"0"], [b"1"], [b"2"]]
        assert read.read(events) is False
        assert events[3:] == [[b"3"], [b"4"]]
        assert read.read(events) is False and len(events) == 5  # nothing to read: no error, nothing more
    finally:
        reader.close()
        writer.close()
        context.term()


def test_a_message_that_cannot_be_read_is_dropped_and_logged_and_the_reader_reads_on(caplog):
    context = zmq.Context()
    reader, writer = _pair(context, "errors")

    def to_event(frames: List[bytes]) -> Any:
        if frames == [b"bad"]:
            raise ValueError("cannot read this")
        return None if frames == [b"nothing"] else [frames[0], frames[0]]  # None: no event; a list: several

    try:
        for frame in (b"bad", b"a", b"nothing", b"b"):
            writer.send(frame)
        events: List[Any] = []
        with caplog.at_level(logging.ERROR):
            SocketReader(reader, to_event, name="Tester").read(events)
        assert events == [b"a", b"a", b"b", b"b"]
        assert "Tester: dropped a message it failed to read (to_event)" in caplog.text
        assert "cannot read this" in caplog.text
    finally:
        reader.close()
        writer.close()
        context.term()


def test_the_decoder_drops_a_malformed_message_naming_the_peer(caplog):
    context = zmq.Context()
    reader, writer = _pair(context, "decoder")
    try:
        writer.send(b"not a message")
        writer.send_multipart(codec.encode(m.HelloAck(PROTOCOL_VERSION)))
        events: List[Any] = []
        with caplog.at_level(logging.WARNING):
            SocketReader(reader, decoder(lambda message, blobs: message, "Tester", "the peer")).read(events)
        assert [type(event) for event in events] == [m.HelloAck]
        assert "Tester: dropped malformed message from the peer" in caplog.text
    finally:
        reader.close()
        writer.close()
        context.term()


def test_a_loop_reader_delivers_each_burst_including_what_came_before_it_started():
    async def scenario() -> List[Any]:
        context = zmq.Context()
        reader, writer = _pair(context, "loop")
        delivered: List[Any] = []
        done = asyncio.get_running_loop().create_future()

        def deliver(events: List[Any], more: bool) -> None:
            delivered.append((len(events), more))
            if sum(count for count, _ in delivered) == 7 and not done.done():
                done.set_result(None)

        try:
            for number in range(5):  # before anyone watched the socket
                writer.send(b"%d" % number)
            watched = LoopReader(SocketReader(reader, burst=3), deliver)
            watched.start(asyncio.get_running_loop())
            await asyncio.sleep(0.01)
            writer.send(b"5")
            writer.send(b"6")
            await asyncio.wait_for(done, timeout=10)
            watched.stop()
            return delivered
        finally:
            reader.close()
            writer.close()
            context.term()

    delivered = asyncio.run(scenario())
    assert delivered[:2] == [(3, True), (2, False)]  # a full burst, then the rest soon after
    assert sum(count for count, _ in delivered) == 7
