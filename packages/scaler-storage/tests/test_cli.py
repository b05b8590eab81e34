"""The command line (help, option errors, --config) and the programmatic entry in a multiprocessing Process."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.ids import IDGenerator
from scaler.protocol.messages import ObjectStatus
from scaler.storage.server import run_object_storage_server

ids = IDGenerator()
RUN_TIMEOUT_SECONDS = 30
CONSOLE_SCRIPT = Path(sys.executable).parent / "scaler_object_storage_server"
MODULE = [sys.executable, "-m", "scaler.storage"]


def run(command: List[str]) -> Tuple[int, str, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as error:  # run() has killed the child before raising
        raise AssertionError(f"{command} still running after {RUN_TIMEOUT_SECONDS} seconds: {error.output}") from None
    return done.returncode, done.stdout, done.stderr


def free_address() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


@pytest.mark.parametrize("command", [[str(CONSOLE_SCRIPT)], MODULE], ids=["console-script", "python-m"])
def test_help(command: List[str]):
    code, out, err = run([*command, "-h"])
    assert code == 0, err
    assert "scaler_object_storage_server" in out and "address" in out
    for option in ("--max-object-size", "--max-memory", "--config", "--event-loop", "--logging-level"):
        assert option in out


@pytest.mark.parametrize(
    "arguments, complaint",
    [
        (["--bogus", "tcp://127.0.0.1:1"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: address"),
        (["http://127.0.0.1:1"], "invalid address 'http://127.0.0.1:1'"),
        (["tcp://127.0.0.1:99999"], "invalid address 'tcp://127.0.0.1:99999'"),
        (["tcp://127.0.0.1:1", "--max-object-size", "12Q"], "argument --max-object-size/-mos: invalid size '12Q'"),
        (["tcp://127.0.0.1:1", "--max-memory", "0"], "argument --memory-limit/--max-memory/-mm: invalid size '0'"),
        (["tcp://127.0.0.1:1", "--event-loop", "tokio"], "argument --event-loop/-el: invalid choice: 'tokio'"),
        (["tcp://127.0.0.1:1", "--config", "/nonexistent/scaler.toml"], "cannot read config file"),
    ],
)
def test_bad_command_lines_exit_2_naming_the_problem(arguments: List[str], complaint: str):
    code, out, err = run([str(CONSOLE_SCRIPT), *arguments])
    assert code == 2, (out, err)
    assert complaint in err
    assert "Traceback" not in err


def test_address_in_use_exits_2_naming_the_address():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        code, out, err = run([*MODULE, address])
    assert code == 2, (out, err)
    assert f"cannot bind to {address}" in err and "in use" in err
    assert "Traceback" not in err


def test_config_file_section_sets_address_and_limits(start_storage, connect, tmp_path: Path):
    address = free_address()
    config = tmp_path / "scaler.toml"
    config.write_text(
        "[scheduler]\nsomething_else = 1\n\n"
        f'[object_storage_server]\naddress = "{address}"\nmax_object_size = "1K"\nmax_memory = 4096\n'
        "max-client-memory = 1536\n"
    )
    server = start_storage("--config", str(config), address=address, pass_address=False)
    peer = connect(server)
    small, large, over_quota = ids.next_id(), ids.next_id(), ids.next_id()
    answer = peer.put(b"C|config|1|a", [(small, b"s" * 1024), (large, b"l" * 1025), (over_quota, b"q" * 1000)])
    assert answer.statuses == [ObjectStatus.OK, ObjectStatus.TOO_LARGE, ObjectStatus.OVER_QUOTA]
    assert "max object size 1.0 KiB, memory limit 4.0 KiB (a client's objects: 1.5 KiB)" in server.log()


@pytest.mark.parametrize(
    "section, complaint",
    [
        ('colour = "blue"', "[object_storage_server] has unknown option 'colour'"),
        ("max_memory = 0", "argument --memory-limit: invalid size 0"),
        ('max_object_size = "lots"', "invalid size 'lots'"),
    ],
)
def test_bad_config_file_exits_2(tmp_path: Path, section: str, complaint: str):
    config = tmp_path / "scaler.toml"
    config.write_text(f"[object_storage_server]\n{section}\n")
    code, out, err = run([*MODULE, free_address(), "--config", str(config)])
    assert code == 2, (out, err)
    assert complaint in err


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_run_object_storage_server_in_a_multiprocessing_process(
    start_method: str, connect, wait_serving, tmp_path: Path
):
    """The entry the scheduler and SchedulerClusterCombo use: blocking, stopped by SIGTERM, exit code 0."""
    address = free_address()
    log = tmp_path / "storage.log"
    process = multiprocessing.get_context(start_method).Process(
        target=run_object_storage_server,
        args=(address,),
        kwargs={"max_object_size": 1000, "max_memory": 10_000, "logging_level": "INFO", "logging_paths": [str(log)]},
    )
    process.start()
    try:
        read_log = lambda: log.read_text() if log.exists() else ""  # noqa: E731
        wait_serving(address, lambda: process.exitcode, read_log)
        peer = connect(address)
        answer = peer.put(b"C|combo|1|a", [(ids.next_id(), b"x" * 1000), (ids.next_id(), b"x" * 1001)])
        assert answer.statuses == [ObjectStatus.OK, ObjectStatus.TOO_LARGE]

        process.terminate()
        process.join(timeout=15)
        assert process.exitcode == 0, read_log()
        assert f"ObjectStorageServer: listen to address {address}" in read_log()
        assert "ObjectStorageServer: received SIGTERM, shutting down" in read_log()
    finally:
        if process.is_alive():
            process.kill()
            process.join(timeout=15)
