"""Functions the tests run as tasks (pickled by value: the worker cannot import this module)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
import types
from typing import Any


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


def _wait_for_file(path: str) -> str:
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    return "released"


# The same function as if it were part of the Scaler client (its module name is what the processor looks
# at): a task waiting in it looks like a task waiting for the results of tasks it submitted.
wait_like_a_client = types.FunctionType(
    _wait_for_file.__code__, {"__name__": "scaler.client.future", "os": os, "time": time}, "wait_like_a_client"
)


def wait_in_client(path: str) -> str:
    return wait_like_a_client(path)


def create_file(path: str) -> str:
    with open(path, "w"):
        pass
    return "created"
