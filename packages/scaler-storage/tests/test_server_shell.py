"""`ObjectStorageServer` in this process: a failing handler does not stop the loop, and `stop` ends `serve`."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, List

import pytest
import zmq
import zmq.asyncio

from scaler.protocol import codec
from scaler.protocol.addresses import AddressError, free_tcp_port
from scaler.protocol.messages import Hello, HelloAck, ObjectRequest, ObjectRequestKind, ObjectResponse
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.storage.object_store import ObjectStore
from scaler.storage.server import ObjectStorageServer
from scaler.storage.storage_events import Reply


class StoreThatFailsOnGet(ObjectStore):
    def handle(self, event: Any, now: float) -> List[Reply]:
        if isinstance(getattr(event, "message", None), ObjectRequest) and event.message.kind == ObjectRequestKind.GET:
            raise RuntimeError("boom")
        return super().handle(event, now)


async def _receive(socket: zmq.asyncio.Socket) -> Any:
    frames = await asyncio.wait_for(socket.recv_multipart(), timeout=20)
    return codec.decode(frames)[0]


def test_a_failing_handler_is_logged_and_the_server_keeps_serving(caplog: pytest.LogCaptureFixture):
    address = f"tcp://127.0.0.1:{free_tcp_port()}"

    async def scenario() -> None:
        context = zmq.asyncio.Context()
        server = ObjectStorageServer(address, StoreThatFailsOnGet(), context)
        server.bind()
        serving = asyncio.ensure_future(server.serve())
        peer = context.socket(zmq.DEALER)
        peer.setsockopt(zmq.LINGER, 0)
        peer.setsockopt(zmq.IDENTITY, b"C|shell-test|1|ab")
        peer.connect(address)
        try:
            await peer.send_multipart(codec.encode(Hello(version=PROTOCOL_VERSION)))
            assert isinstance(await _receive(peer), HelloAck)
            await peer.send_multipart(codec.encode(ObjectRequest(request_id=1, kind=ObjectRequestKind.GET)))
            await peer.send_multipart(codec.encode(ObjectRequest(request_id=2, kind=ObjectRequestKind.DELETE)))
            reply = await _receive(peer)
            assert isinstance(reply, ObjectResponse) and reply.request_id == 2
            server.stop("test over")
            await asyncio.wait_for(serving, timeout=20)
        finally:
            peer.close(linger=0)
            serving.cancel()
            context.term()

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert "dropped a message from C|shell-test|1|ab it failed to read (_on_frames)" in caplog.text
    assert "RuntimeError: boom" in caplog.text
    assert "ObjectStorageServer: test over, shutting down" in caplog.text


def test_bind_failure_names_the_address():
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    context = zmq.asyncio.Context()
    first = ObjectStorageServer(address, ObjectStore(), context)
    second = ObjectStorageServer(address, ObjectStore())
    try:
        first.bind()
        with pytest.raises(AddressError, match=f"cannot bind to {address}"):
            second.bind()
    finally:
        first.close()
        context.term()


def test_invalid_address_is_refused_before_binding():
    with pytest.raises(AddressError, match="invalid address"):
        ObjectStorageServer("localhost:2346", ObjectStore())
