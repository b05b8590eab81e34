"""Clusters started from the command-line programs with or without keys, and raw peers that hold keys: what the
security tests (`test_security.py`, `test_revocation.py`, `test_task_output_isolation.py`) attack.

A raw peer is a pyzmq DEALER and the codec, no `Client`: it sends what no Scaler client or worker would."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any, Optional, Tuple

import zmq
from cluster_processes import wait_until, worker_count

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address
from scaler.protocol.connection_events import REFUSED, ConnectionWatch, closed_in_handshake
from scaler.protocol.keygen import ClusterKeys, write_cluster_keys, write_key_pair
from scaler.protocol.security import NO_SECURITY, SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

ANSWER_MS = 30_000


@dataclass
class Cluster:
    address: str
    keys: Optional[ClusterKeys]  # None: no security
    log_path: str

    @property
    def monitor_address(self) -> str:
        return default_monitor_address(self.address)

    def security(self, role: str) -> SecurityConfig:
        return NO_SECURITY if self.keys is None else getattr(self.keys, role)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as file:
            return file.read()


def start_cluster(
    processes, address: str, tmp_path, secure: bool, n_workers: int = 2, scheduler_options: Tuple[str, ...] = ()
) -> Cluster:
    """A scheduler (which starts its storage server, with ``scheduler_options``) and ``n_workers`` workers from
    the command-line programs, with keys when ``secure``."""
    os.makedirs(tmp_path, exist_ok=True)
    keys = write_cluster_keys(str(tmp_path / "keys")) if secure else None
    cluster = Cluster(address, keys, str(tmp_path / "scheduler.log"))
    server_options = [*(keys.server.to_arguments() if keys else []), *scheduler_options]
    processes.scheduler(address, *server_options, probe=cluster.security("client"), log_path=cluster.log_path)
    if n_workers:
        processes.cluster(address, n_workers, *cluster.security("worker").to_arguments())
        monitor = cluster.security("monitor")
        wait_until(lambda: worker_count(cluster.monitor_address, 5, monitor) == n_workers, 60, "the workers")
    return cluster


def another_client_key(cluster: Cluster, tmp_path, name: str = "mallory") -> SecurityConfig:
    """A second authorized client key (another user of the same cluster)."""
    assert cluster.keys is not None
    public, secret = write_key_pair(str(tmp_path), name)
    os.replace(public, os.path.join(cluster.keys.server.authorized_keys, "clients", f"{name}.key"))
    return replace(cluster.keys.client, key_file=secret)


class RawPeer:
    """A DEALER that says Hello (unless told not to) and then sends what a test wants; it knows a refused handshake
    when it sees one."""

    def __init__(
        self, address: str, role: m.PeerRole, security: SecurityConfig, identity: bytes, say_hello: bool = True
    ) -> None:
        self.identity = identity
        self._keys = peer_keys(security)
        self._context = zmq.Context()
        self.socket = new_socket(self._context, zmq.DEALER, self._keys)
        self.socket.setsockopt(zmq.IDENTITY, identity)
        self._address = address
        self._watch = ConnectionWatch(self.socket, self._keys, "the peer")  # a refused handshake, as Scaler sees it
        self.socket.connect(address)
        self.hello = m.Hello(PROTOCOL_VERSION, role, os.getpid(), "attacker", m.WorkerInfo(1, 10, []))
        self.answer = self.request(self.hello) if say_hello else None

    def send(self, message: Any, blobs: Tuple[Any, ...] = ()) -> None:
        self.socket.send_multipart(codec.encode(message, blobs))

    def request(self, message: Any, blobs: Tuple[Any, ...] = ()) -> Any:
        self.send(message, blobs)
        return self.receive()

    def receive(self) -> Any:
        """The next message, or the refused handshake's reason (a str); fails the test when neither comes."""
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self._watch.monitor, zmq.POLLIN)
        deadline = time.monotonic() + ANSWER_MS / 1000
        while time.monotonic() < deadline:
            ready = dict(poller.poll(500))
            if self.socket in ready:
                return codec.decode(self.socket.recv_multipart())[0]
            if self._watch.monitor in ready and self._watch.change(self._watch.monitor.recv_multipart()) == REFUSED:
                return self._watch.refusal or closed_in_handshake(self._address, "a scheduler")
        raise AssertionError("neither an answer nor a refused handshake")

    def receive_a(self, kind: type) -> Any:
        """The next message of type ``kind``, past the `ClientHeartbeatEcho`s the scheduler sends every greeted
        client, asked or not, whenever a monitor comes or goes."""
        while True:
            message = self.receive()
            if type(message) is not m.ClientHeartbeatEcho:
                assert type(message) is kind, message
                return message

    def close(self) -> None:
        self._watch.close()
        self.socket.close(linger=0)
        self._context.term()
