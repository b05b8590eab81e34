"""Functions the tests run as tasks (pickled by value: the worker cannot import this module)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from typing import Any, List


def add(a: Any, b: Any = 0) -> Any:
    return a + b


def describe(*args: Any, **kwargs: Any) -> Any:
    return args, kwargs


def process_id() -> int:
    return os.getpid()


def environment(*names: str) -> Any:
    return {name: os.environ.get(name) for name in names}


class TaskError(Exception):
    pass


def fail(message: str) -> None:
    raise TaskError(message)


class UnpicklableError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()  # locks do not pickle


def fail_unpicklably(message: str) -> None:
    raise UnpicklableError(message)


def return_unserializable() -> Any:
    return threading.Lock()


def exit_process(code: int) -> None:
    os._exit(code)


def call_sys_exit(code: int) -> None:
    sys.exit(code)


def crash() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def block(pid_path: str, release_path: str = "", value: Any = None) -> Any:
    """Write our pid, then wait until ``release_path`` exists (or forever when empty; bounded for safety)."""
    with open(pid_path + ".tmp", "w") as file:
        file.write(str(os.getpid()))
    os.rename(pid_path + ".tmp", pid_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if release_path and os.path.exists(release_path):
            return value
        time.sleep(0.01)
    raise TimeoutError("never released")


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def allocate(count: int) -> int:
    return len(list(range(count)))


def large(size: int) -> bytes:
    return b"r" * size


class PrefixSerializer:
    """A custom serializer: cloudpickle behind a marker, so the tests can tell it was used."""

    def serialize(self, obj: Any) -> bytes:
        import cloudpickle

        return b"PREFIX:" + cloudpickle.dumps(obj)

    def deserialize(self, payload: bytes) -> Any:
        import cloudpickle

        assert payload.startswith(b"PREFIX:"), payload[:20]
        return cloudpickle.loads(payload[len(b"PREFIX:") :])


def wait_in_client(path: str, timeout: Any = None) -> str:
    """Wait inside the Scaler client, as a task waiting for the tasks it submitted does, until ``path``
    exists (a thread resolves the future; bounded for safety)."""
    from scaler.client.future import ScalerFuture

    future = ScalerFuture(b"\x00" * 16, None, None, False)

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                future._set_error(TimeoutError(f"{path} never appeared"))
                return
            time.sleep(0.01)
        future._set_value("released")

    threading.Thread(target=watch, daemon=True).start()
    return future.result(timeout)


def block_then_wait_in_client(pid_path: str, release_path: str, path: str) -> str:
    """`block` until ``release_path`` exists, then `wait_in_client` until ``path`` does."""
    block(pid_path, release_path)
    return wait_in_client(path)


def wait_in_client_from_a_thread(path: str) -> str:
    """The same wait, in a thread of the task: the processor must not run other tasks there."""
    result: List[Any] = []
    thread = threading.Thread(target=lambda: result.append(wait_in_client(path)))
    thread.start()
    thread.join(120)
    return result[0]


def nest(directory: str, level: int) -> int:
    """Level ``level`` of a recursion: wait until level + 1 is done (it creates ``done-<level>``), then say
    this one is done. The deepest level is the one whose file exists already."""
    if not os.path.exists(os.path.join(directory, f"done-{level}")):
        wait_in_client(os.path.join(directory, f"done-{level}"))
    create_file(os.path.join(directory, f"done-{level - 1}"))
    return os.getpid()


def burn_then_wait_in_client(seconds: float, path: str) -> str:
    burn(seconds)
    return wait_in_client(path)


def burn(seconds: float) -> int:
    """Use the CPU for ``seconds`` of CPU time."""
    started = time.process_time()
    count = 0
    while time.process_time() - started < seconds:
        count += 1
    return os.getpid()


def create_file(path: str) -> str:
    with open(path, "w"):
        pass
    return "created"
