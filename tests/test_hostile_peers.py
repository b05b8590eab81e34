"""Hostile peers against real daemons (issue 25): no peer wedges the scheduler or the object storage server.

Connection churn: thousands of raw pyzmq peers that each say Hello and, once answered, close, a wave of them
together (the scheduler's own handling of each departure used to overflow its queue to the storage server,
whose exception killed the reader of its connection monitor; the unread monitor then stopped ZeroMQ's I/O
thread: the scheduler answered nobody and hung on SIGTERM). Afterwards the next client is served at once and
each daemon stops on SIGTERM within two seconds. With keys and without: each churned peer holds a client key.

One huge message: a raw peer's graph (or task batch) of 150,000 tasks in one message, while a client with a
2 s timeout keeps submitting (the scheduler that took such a message whole was busy for seconds: its clients
took it for lost, and it took them for silent). The graph's sender holds a client key on a cluster with keys.

The attacks are written in `hostile_attacks.py`; `test_hostile_neighbours.py` runs them all at once.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pytest
import zmq
from cluster_processes import free_address, wait_until, worker_count
from hostile_attacks import (
    ANSWER_SECONDS,
    answered,
    chain_graph,
    churn_identity,
    hello_then_close,
    huge_message_sent,
    waiting_batch,
)
from raw_peers import RawClient

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.keygen import ClusterKeys, write_cluster_keys
from scaler.protocol.security import NO_SECURITY, SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

CHURN = 10_000  # connections
WAVE = 5_000  # of them open at once, then closed together: the scheduler broke at about 5,000
STOP_SECONDS = 2.0  # for a daemon to end after SIGTERM


@dataclass
class Daemons:
    address: str  # the scheduler's
    storage_address: str
    keys: Optional[ClusterKeys]
    storage: subprocess.Popen
    scheduler: Optional[subprocess.Popen]

    def security(self, role: str) -> SecurityConfig:
        return NO_SECURITY if self.keys is None else getattr(self.keys, role)


@pytest.fixture(params=[False, True], ids=["without keys", "with keys"])
def secure(request) -> bool:
    return request.param


@pytest.fixture(autouse=True)
def _descriptors_for_a_wave():
    """A wave takes two file descriptors per connection here and one in the daemon (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 3 * WAVE + 1024
    if hard != resource.RLIM_INFINITY and hard < wanted:
        raise AssertionError(f"this test needs {wanted} open files (ulimit -Hn is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def start_daemons(
    processes, tmp_path, secure: bool, scheduler: bool, scheduler_options: Sequence[str] = ()
) -> Daemons:
    """A storage server, and a scheduler (with ``scheduler_options``) that uses it and one worker if ``scheduler``,
    with keys if ``secure``."""
    address = free_address()
    storage_address = default_storage_address(address)
    keys = write_cluster_keys(str(tmp_path / "keys")) if secure else None
    server = keys.server.to_arguments() if keys is not None else []
    probe = keys.client if keys is not None else NO_SECURITY
    storage = processes.storage(storage_address, *server, probe=probe, log_path=str(tmp_path / "storage.log"))
    daemons = Daemons(address, storage_address, keys, storage, None)
    if scheduler:
        daemons.scheduler = processes.scheduler(
            address, "--object-storage-address", storage_address, *server, *scheduler_options, probe=probe,
            log_path=str(tmp_path / "scheduler.log"),
        )  # fmt: skip
        processes.cluster(address, 1, *daemons.security("worker").to_arguments())
        monitor = daemons.security("monitor")
        wait_until(lambda: worker_count(default_monitor_address(address), 5, monitor) == 1, 60, "the worker")
    return daemons


def stops_on_sigterm(process: subprocess.Popen) -> int:
    """The exit code of ``process`` after SIGTERM; fails the test if it does not end within `STOP_SECONDS`."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{process.args[0]} did not stop within {STOP_SECONDS}s of SIGTERM") from None


def test_connection_churn_leaves_the_scheduler_serving_and_stoppable(processes, tmp_path, secure):
    daemons = start_daemons(processes, tmp_path, secure, scheduler=True)
    hello_then_close(daemons.address, daemons.security("client"), CHURN, WAVE)
    with Client(daemons.address, security=daemons.security("client"), timeout_seconds=ANSWER_SECONDS) as client:
        assert client.submit(pow, 2, 10).result(timeout=ANSWER_SECONDS) == 1024
    assert daemons.scheduler is not None
    assert stops_on_sigterm(daemons.scheduler) == 0
    assert stops_on_sigterm(daemons.storage) == 0
    log = (tmp_path / "scheduler.log").read_text(errors="replace")
    assert "Traceback" not in log  # nothing escaped a reader, nor was any event dropped by an error


class StoragePeer:
    """A raw DEALER at the storage server under ``identity``, with the keys of ``security``."""

    def __init__(self, context: zmq.Context, address: str, identity: bytes, security: SecurityConfig) -> None:
        self.socket = new_socket(context, zmq.DEALER, peer_keys(security))
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, identity)
        self.socket.connect(address)
        self.identity = identity

    def request(self, message: m.Message, blobs: tuple = ()) -> Any:
        self.socket.send_multipart(codec.encode(message, blobs))
        assert self.socket.poll(int(ANSWER_SECONDS * 1000)), f"no answer to a {type(message).__name__}"
        return codec.decode(self.socket.recv_multipart())[0]

    def hello(self) -> Any:
        return self.request(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, os.getpid(), "test", m.WorkerInfo()))

    def get(self, object_id: bytes) -> Any:
        return self.request(m.ObjectRequest(1, m.ObjectRequestKind.GET, self.identity, [object_id]))

    def close(self) -> None:
        self.socket.close(linger=0)


def test_connection_churn_leaves_the_storage_server_serving_and_forgetting_who_left(processes, tmp_path, secure):
    daemons = start_daemons(processes, tmp_path, secure, scheduler=False)
    security = daemons.security("client")
    context = zmq.Context()
    live = StoragePeer(context, daemons.storage_address, b"C|live|1|000001", security)
    try:
        assert type(live.hello()) is m.HelloAck
        hello_then_close(daemons.storage_address, security, CHURN, WAVE)
        # the peer still connected is still served; those that left must say Hello again on a new connection
        assert type(live.get(b"nothing")) is m.ObjectResponse
        for index in random.Random(25).sample(range(CHURN), 100):
            returning = StoragePeer(context, daemons.storage_address, churn_identity(index), security)
            try:
                answer = returning.get(b"nothing")
                assert type(answer) is m.Refusal and "send Hello first" in answer.reason, (index, answer)
            finally:
                returning.close()
        newcomer = StoragePeer(context, daemons.storage_address, b"C|new|1|000002", security)
        try:
            assert type(newcomer.hello()) is m.HelloAck
            put = m.ObjectRequest(2, m.ObjectRequestKind.PUT, newcomer.identity, [b"an object"])
            assert newcomer.request(put, (b"its value",)).statuses == [m.ObjectStatus.OK]
            assert newcomer.get(b"an object").statuses == [m.ObjectStatus.OK]
        finally:
            newcomer.close()
    finally:
        live.close()
        context.term()
    assert stops_on_sigterm(daemons.storage) == 0
    assert "Traceback" not in (tmp_path / "storage.log").read_text(errors="replace")


# --- one big message disconnects nobody else ---------------------------------------------------------------------

SHORT_TIMEOUT = 2.0  # seconds: the legitimate client's own, and the scheduler's for its clients
HUGE = 150_000  # graph nodes or tasks in one message (~34 MB): a scheduler that took it whole was busy 4 s


@pytest.mark.parametrize(
    "huge, secure",
    [(chain_graph, False), (chain_graph, True), (waiting_batch, False)],
    ids=["graph without keys", "graph with keys", "task batch without keys"],
)
def test_one_huge_message_from_one_peer_never_disconnects_another_client(processes, tmp_path, huge, secure):
    """A raw peer sends a graph of 150,000 nodes (or a batch of 150,000 tasks) in one message; meanwhile a
    client with a 2 s timeout (and the scheduler's 2 s for clients) keeps submitting: it is never taken for
    lost, on either side, and gets every result while the scheduler takes the message (the raw peer's heartbeat
    sent after it is answered once the scheduler has taken it whole: a peer's messages are handled in order)."""
    options = ("--client-timeout-seconds", str(SHORT_TIMEOUT), "--allocate-policy", "capability",
               "--max-client-tasks", str(2 * HUGE))  # fmt: skip
    daemons = start_daemons(processes, tmp_path, secure, scheduler=True, scheduler_options=options)
    security = daemons.security("client")
    context = zmq.Context()
    hostile = RawClient(context, daemons.address, daemons.storage_address, security)
    try:
        assert type(hostile.storage.hello(m.PeerRole.CLIENT)) is m.HelloAck
        # seconds: it says Hello to the scheduler after
        frames = codec.encode(huge(hostile.peer_id, hostile.task(len, ()).function_id, HUGE))
        with Client(daemons.address, security=security, timeout_seconds=SHORT_TIMEOUT) as client:
            assert client.submit(pow, 2, 0).result(timeout=ANSWER_SECONDS) == 1
            huge_message_sent(hostile, frames)
            rounds_while_busy = 0
            deadline = time.monotonic() + 180
            while not answered(hostile):
                assert time.monotonic() < deadline, "the scheduler never took the whole graph"
                hostile.scheduler.send(m.ClientHeartbeat())  # the raw peer is alive too (its echoes come after)
                assert client.submit(pow, 2, rounds_while_busy).result(timeout=ANSWER_SECONDS) == 2**rounds_while_busy
                rounds_while_busy += 1
            assert rounds_while_busy > 0, "the scheduler took the message whole before the client was answered"
            assert client.submit(pow, 3, 3).result(timeout=ANSWER_SECONDS) == 27
    finally:
        hostile.close()
        context.term()
    log = (tmp_path / "scheduler.log").read_text(errors="replace")
    assert "timed out" not in log and "Traceback" not in log
