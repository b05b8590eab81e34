import socket

import pytest

from scaler.protocol.addresses import (
    AddressError,
    address_in_use,
    check_address,
    default_monitor_address,
    default_storage_address,
    free_tcp_port,
)


@pytest.mark.parametrize(
    "address", ["tcp://127.0.0.1:2345", "tcp://example.com:1", "tcp://[::1]:65535", "ipc:///tmp/scaler.sock"]
)
def test_valid_addresses(address):
    assert check_address(address) == address


@pytest.mark.parametrize(
    "address",
    [
        "",
        "127.0.0.1:2345",
        "tcp://127.0.0.1",
        "tcp://:2345",
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:65536",
        "tcp://127.0.0.1:port",
        "tcp://127.0.0.1:-1",
        "ipc://",
        "http://127.0.0.1:80",
    ],
)
def test_invalid_addresses(address):
    with pytest.raises(AddressError, match="invalid address"):
        check_address(address)
    with pytest.raises(ValueError):  # AddressError is also a ValueError
        check_address(address)


def test_defaults_derived_from_the_scheduler_address():
    assert default_storage_address("tcp://127.0.0.1:2345") == "tcp://127.0.0.1:2346"
    assert default_monitor_address("tcp://127.0.0.1:2345") == "tcp://127.0.0.1:2347"
    assert default_storage_address("ipc:///tmp/s") == "ipc:///tmp/s.storage"
    assert default_monitor_address("ipc:///tmp/s") == "ipc:///tmp/s.monitor"
    with pytest.raises(AddressError):
        default_storage_address("tcp://nowhere")


def test_free_tcp_port_can_be_bound():
    port = free_tcp_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_an_address_is_in_use_while_a_process_listens_there(tmp_path):
    port = free_tcp_port()
    assert not address_in_use(f"tcp://127.0.0.1:{port}")
    with socket.socket() as listening:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(("127.0.0.1", port))
        listening.listen()
        assert address_in_use(f"tcp://127.0.0.1:{port}")
        assert address_in_use(f"tcp://*:{port}")
    assert not address_in_use(f"tcp://127.0.0.1:{port}")  # left: free again at once, as ZeroMQ binds it
    path = str(tmp_path / "scheduler.sock")
    assert not address_in_use(f"ipc://{path}")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path)
        listening.listen()
        assert address_in_use(f"ipc://{path}")
    assert not address_in_use(f"ipc://{path}")  # the path of a process gone: ZeroMQ takes it over
