"""The worker's ZeroMQ connection (`peer_connection.ZmqConnection`): its sockets read by the event loop."""

from __future__ import annotations

import asyncio

import pytest
import zmq

from scaler.protocol.errors import DisconnectedError
from scaler.protocol.socket_reader import BURST as _BURST
from scaler.worker.peer_connection import ZmqConnect

ADDRESS = "inproc://peer-connection-test"


def test_every_message_arrives_in_order_also_those_sent_before_the_first_receive_and_past_a_burst():
    async def scenario() -> None:
        context = zmq.Context()
        peer = context.socket(zmq.ROUTER)
        peer.setsockopt(zmq.LINGER, 0)
        peer.bind(ADDRESS)
        connect = ZmqConnect(context)
        connection = connect(ADDRESS, b"worker", False)
        try:
            connection.send([b"hello"])  # the peer learns our identity from it
            identity, hello = peer.recv_multipart()
            assert (identity, hello) == (b"worker", b"hello")
            count = 2 * _BURST + 3
            for number in range(count):
                peer.send_multipart([identity, str(number).encode()])
            received = []
            for _ in range(count):  # the first ones were waiting before anyone watched the socket
                received.append(await asyncio.wait_for(connection.receive(), timeout=10))
            assert received == [[str(number).encode()] for number in range(count)]

            waiting = asyncio.ensure_future(connection.receive())  # one that arrives while a receive waits
            await asyncio.sleep(0)
            connection.send([b"answer"])
            assert peer.recv_multipart() == [identity, b"answer"]
            peer.send_multipart([identity, b"late"])
            assert await asyncio.wait_for(waiting, timeout=10) == [b"late"]
        finally:
            connection.close(0)
            peer.close()
        with pytest.raises(DisconnectedError):
            await asyncio.wait_for(connection.receive(), timeout=10)
        context.term()

    asyncio.run(scenario())


def test_a_receive_waiting_when_the_connection_closes_raises_disconnected():
    async def scenario() -> None:
        context = zmq.Context()
        connection = ZmqConnect(context)(ADDRESS + "-closing", b"worker", False)
        waiting = asyncio.ensure_future(connection.receive())
        await asyncio.sleep(0)
        connection.close(0)
        with pytest.raises(DisconnectedError):
            await asyncio.wait_for(waiting, timeout=10)
        context.term()

    asyncio.run(scenario())
