"""Starting the processes of a cluster on this host and waiting until each serves: what `SchedulerClusterCombo`
and ``scaler_up`` share.

Each process is a program of Scaler (``python -m ...``) started in a session of its own, so that a terminal's
Ctrl-C (SIGINT to its foreground process group) reaches the program that started it alone, and ending with that
program (`process_control.start_child`). A daemon serves once it answers a Hello (`wait_for_hello`); the web
monitor once its page answers (`wait_for_page`); a process that exits first, or does not serve in time, is a
`ClusterStartError` naming it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Sequence, Tuple, Union

import zmq

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.errors import ScalerError
from scaler.protocol.process_control import start_child, stop_child
from scaler.protocol.security import SecurityConfig, new_socket, peer_keys
from scaler.protocol.version import PROTOCOL_VERSION

START_TIMEOUT_SECONDS = 60.0
_POLL_MILLISECONDS = 100


class ClusterStartError(ScalerError):
    """A process of the local cluster did not start."""


def start_program(module: str, *arguments: str) -> subprocess.Popen:
    """``python -m module arguments`` in a session of its own, ending with this process."""
    return start_child([sys.executable, "-m", module, *arguments], stdin=subprocess.DEVNULL, start_new_session=True)


def wait_for_hello(
    address: str, process: subprocess.Popen, what: str, security: SecurityConfig, timeout: float = START_TIMEOUT_SECONDS
) -> None:
    """Until the process at ``address`` answers a monitor's Hello (a Refusal counts: it is up)."""
    deadline = time.monotonic() + timeout
    socket: zmq.Socket = new_socket(zmq.Context.instance(), zmq.DEALER, peer_keys(security))
    try:
        socket.connect(address)
        hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.MONITOR, os.getpid(), "", m.WorkerInfo())
        socket.send_multipart(codec.encode(hello))
        while time.monotonic() < deadline:
            _check_running(process, what, address)
            if socket.poll(_POLL_MILLISECONDS):
                socket.recv_multipart()  # HelloAck or Refusal: either way it is up
                return
        raise ClusterStartError(f"the {what} at {address} did not answer within {timeout:g}s")
    finally:
        socket.close(linger=0)


# ------------------------------------------------------------------------------------------- the web monitor


def dashboard_place(address: Union[str, int]) -> Tuple[str, int]:
    """``(host, port)`` of a web monitor from ``"HOST:PORT"``, ``":PORT"`` or a port (this host only: 127.0.0.1);
    port 0 is a free port, chosen now."""
    if isinstance(address, bool) or not isinstance(address, (str, int)):
        raise ValueError(f"dashboard address {address!r}: expected 'HOST:PORT', ':PORT' or a port number")
    host, _, port = str(address).rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"dashboard address {address!r}: expected 'HOST:PORT', ':PORT' or a port number")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port) or free_tcp_port(host)


def web_monitor_arguments(monitor_address: str, host: str, port: int, *options: str) -> Tuple[str, ...]:
    """The arguments of ``python -m`` that run ``scaler_ui`` for the scheduler whose monitor is at
    ``monitor_address``, serving at ``host:port``; `ClusterStartError` when scaler-monitor is not installed."""
    if importlib.util.find_spec("scaler.monitor") is None:
        raise ClusterStartError("a dashboard needs scaler-monitor: pip install scaler-monitor (or pip install scaler)")
    return ("scaler.monitor.ui", monitor_address, "--host", host, "--port", str(port), *options)


def dashboard_link(host: str, port: int) -> str:
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}/"


def wait_for_page(url: str, process: subprocess.Popen, timeout: float = START_TIMEOUT_SECONDS) -> None:
    """Until ``url`` answers (any HTTP status: it serves), or `ClusterStartError`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_running(process, "web monitor", url)
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except (urllib.error.URLError, OSError):
            time.sleep(_POLL_MILLISECONDS / 1000)
    raise ClusterStartError(f"the web monitor at {url} did not answer within {timeout:g}s")


def _check_running(process: subprocess.Popen, what: str, where: str) -> None:
    if process.poll() is not None:
        raise ClusterStartError(f"the {what} at {where} exited with code {process.returncode} while starting")


def stop_all(processes: Sequence[subprocess.Popen], timeout: float) -> None:
    """SIGTERM to each process, last started first, then SIGKILL to any still running after ``timeout``."""
    for process in reversed(processes):
        stop_child(process, timeout)
