"""Start and always stop real Scaler processes (storage, scheduler, cluster) for tests.

Every process runs in its own session so that stopping it also stops what it
started (workers, processors, an auto-started storage server), and is killed by
the kernel if the test process itself dies first (a test run stopped by a
timeout leaves nothing behind: what the started processes start dies with them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, List, Optional, Sequence

import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.process_control import die_with_parent
from scaler.protocol.security import NO_SECURITY, SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

BIN = os.path.dirname(sys.executable)


def _die_with_test() -> None:
    """Run in the child before it executes the program: SIGKILL it when the test process dies."""
    die_with_parent(signal.SIGKILL)


def free_address() -> str:
    """A scheduler address whose port + 1 and port + 2 are free too."""
    return f"tcp://127.0.0.1:{free_tcp_port(count=3)}"


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def hello_answered(
    address: str, timeout: float = 0.5, role: m.PeerRole = m.PeerRole.CLIENT, security: SecurityConfig = NO_SECURITY
) -> bool:
    """Whether something at ``address`` answers a Hello with HelloAck (saying it with the keys of ``security``)."""
    context = zmq.Context.instance()
    socket = new_socket(context, zmq.DEALER, peer_keys(security))
    socket.setsockopt(zmq.IDENTITY, b"C|probe|%d|%d" % (os.getpid(), time.monotonic_ns()))
    try:
        socket.connect(address)
        socket.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, role, os.getpid(), "probe", m.WorkerInfo())))
        if not socket.poll(int(timeout * 1000)):
            return False
        reply, _ = codec.decode(socket.recv_multipart())
        if isinstance(reply, m.HelloAck) and role == m.PeerRole.CLIENT:
            socket.send_multipart(codec.encode(m.DisconnectRequest("probe done")))
            socket.poll(200)
        return isinstance(reply, m.HelloAck)
    finally:
        socket.close(linger=0)


class Processes:
    """A set of started processes; `stop_all` ends every one of them and their children."""

    def __init__(self) -> None:
        self.processes: List[subprocess.Popen] = []

    def start(
        self, *command: str, log_path: Optional[str] = None, prefix: Sequence[str] = (), stdout: Any = None
    ) -> subprocess.Popen:
        """Start ``command`` (a program of this environment), its output to ``log_path`` (or ``stdout``, or
        nowhere); ``prefix`` runs it through another command (e.g. `network_hosts.Host.command`)."""
        output = open(log_path, "wb") if log_path else stdout or subprocess.DEVNULL
        process = subprocess.Popen(
            [*prefix, os.path.join(BIN, command[0]), *command[1:]], stdout=output,
            stderr=subprocess.STDOUT if stdout is None else None, start_new_session=True, preexec_fn=_die_with_test,
        )  # fmt: skip
        self.processes.append(process)
        return process

    def storage(self, address: str, *options: str, probe: SecurityConfig = NO_SECURITY, **kw) -> subprocess.Popen:
        """Start a storage server; wait until it answers a client's Hello (with the keys of ``probe``)."""
        process = self.start("scaler_object_storage_server", address, *options, **kw)
        _wait_answering(process, address, probe, "storage")
        return process

    def scheduler(self, address: str, *options: str, probe: SecurityConfig = NO_SECURITY, **kw) -> subprocess.Popen:
        """Start a scheduler; wait until it answers a client's Hello (with the keys of ``probe``)."""
        process = self.start("scaler_scheduler", address, *options, **kw)
        _wait_answering(process, address, probe, "scheduler")
        return process

    def cluster(self, address: str, n_workers: int, *options: str, **kw) -> subprocess.Popen:
        return self.start("scaler_cluster", "-n", str(n_workers), address, *options, **kw)

    @staticmethod
    def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                self.kill_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self.kill_group(process, signal.SIGKILL)  # children that outlived their parent too
            if process.poll() is None:
                process.wait(5)


def _wait_answering(process: subprocess.Popen, address: str, probe: SecurityConfig, what: str) -> None:
    def answered() -> bool:
        return _alive_or_raise(process) and hello_answered(address, security=probe)

    wait_until(answered, 30, f"{what} at {address}")


def _alive_or_raise(process: subprocess.Popen) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"process {process.args} exited with code {process.returncode}")
    return True


def worker_count(monitor_address: str, timeout: float = 5.0, security: SecurityConfig = NO_SECURITY) -> int:
    """Number of workers in the next monitor snapshot."""
    snapshot = next_snapshot(monitor_address, timeout, security)
    return -1 if snapshot is None else len(snapshot.workers)


def next_snapshot(
    monitor_address: str, timeout: float = 5.0, security: SecurityConfig = NO_SECURITY
) -> Optional[m.StateSnapshot]:
    """The scheduler's next monitor snapshot, or None if none came within ``timeout`` (a monitor's keys in
    ``security``)."""
    context = zmq.Context.instance()
    socket = new_socket(context, zmq.SUB, peer_keys(security))
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        socket.connect(monitor_address)
        if not socket.poll(int(timeout * 1000)):
            return None
        snapshot, _ = codec.decode(socket.recv_multipart())
        return snapshot
    finally:
        socket.close(linger=0)
