import pytest
import zmq

from scaler.protocol.addresses import free_tcp_port


@pytest.fixture
def publisher():
    """(address, socket) of a bound XPUB socket, as a scheduler's monitor address would be."""
    context = zmq.Context()
    socket = context.socket(zmq.XPUB)
    socket.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    socket.bind(address)
    try:
        yield address, socket
    finally:
        socket.close(linger=0)
        context.term()
