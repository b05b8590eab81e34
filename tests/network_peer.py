"""A client program for the network tests: run on a host (`network_hosts.Host.command`), it drives a Client
and tells what happens as JSON lines on stdout ({"event": ..., ...}), which the test reads with bounded waits;
an exception ends each command with "error" (its type and text).

    python network_peer.py wait ADDRESS             # until a scheduler answers at ADDRESS (exit 1 after 60 s)
    python network_peer.py map ADDRESS COUNT SECONDS [--again] [--linger MARKER]
        # COUNT tasks of SECONDS each, one event per result ("result"), then "done" with every value; or
        # "error" with the exception's type and text; with --again, then a new Client and one task ("again");
        # with --linger, after "done" the Client stays until the file MARKER exists, then runs one more task
        # (whatever the scheduler sent before reaches it first) and says "lingered" with the number of results
        # it dropped as ones it already had
    python network_peer.py hold ADDRESS MARKER      # one task that writes the file MARKER and sleeps an hour
    python network_peer.py gil ADDRESS SECONDS      # one task that holds the GIL in C for SECONDS; "done"
    python network_peer.py large ADDRESS MEGABYTES  # one task given a bytes argument of that many 10**6 bytes
    python network_peer.py graph ADDRESS NODES      # a graph of NODES nodes, every one asked for: "done" with
                                                    # the sum of their values
    python network_peer.py objects ADDRESS          # an object of 1 MiB put in storage every 0.2 s: "stored"
                                                    # each time, until one fails: "error"

Every Client uses a timeout of 600 s (`CLIENT_OPTIONS`, the tests' "never"): only the network's own detection
ends their waits; with ``--defaults`` last, the Client's default timeout instead; with ``--reconnect SECONDS``
(before it), it waits that long for a lost scheduler (``reconnect_seconds``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster_processes import hello_answered  # noqa: E402

from scaler import Client  # noqa: E402

CLIENT_OPTIONS: Dict[str, Any] = {"timeout_seconds": 600.0}
AGAIN_SECONDS = 60.0  # how long --again tries to connect


def tell(event: str, **details: Any) -> None:
    print(json.dumps({"event": event, "time": time.time(), **details}), flush=True)


def sleep_and_square(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value * value


def mark_and_sleep(marker: str, seconds: float) -> None:
    with open(marker, "w"):  # the test sees that the task runs: the hosts share the file system
        pass
    time.sleep(seconds)


def hold_the_gil(seconds: int) -> int:
    import ctypes

    ctypes.PyDLL(None).sleep(seconds)  # a PyDLL call keeps the GIL: the processor's threads all stop meanwhile
    return seconds


def length(data: bytes) -> int:
    return len(data)


def increment(value: int) -> int:
    return value + 1


def wait(address: str) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if hello_answered(address, timeout=1.0):
            return 0
    return 1


class DroppedResults(logging.Handler):
    """Counts the results the client drops as ones it already had (or never asked for)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "dropped result of unknown or finished task" in record.getMessage()


def run_map(address: str, count: int, seconds: float, again: bool, linger: Optional[str] = None) -> None:
    dropped = DroppedResults()
    client_logger = logging.getLogger("scaler.client.tasks_in_flight")
    client_logger.setLevel(logging.DEBUG)
    client_logger.addHandler(dropped)
    try:
        with Client(address=address, **CLIENT_OPTIONS) as client:
            tell("connected")
            futures = [client.submit(sleep_and_square, i, seconds) for i in range(count)]
            values: List[int] = []
            for index, future in enumerate(futures):
                values.append(future.result())
                tell("result", index=index)
            tell("done", values=values)
            if linger is not None:
                while not os.path.exists(linger):
                    time.sleep(0.1)
                client.submit(sleep_and_square, 0, 0).result()
                tell("lingered", dropped=dropped.count)
    except Exception as error:  # noqa: BLE001 - what failed is what the test reads
        tell("error", type=type(error).__name__, message=str(error))
        if not again:
            return
        deadline = time.monotonic() + AGAIN_SECONDS
        while True:
            try:
                with Client(address=address, timeout_seconds=5) as client:
                    tell("again", value=client.submit(sleep_and_square, 3, 0).result())
                    return
            except Exception as error:  # noqa: BLE001 - tried until the deadline
                if time.monotonic() > deadline:
                    tell("error", type=type(error).__name__, message=str(error))
                    return


def main() -> int:
    if sys.argv[-1] == "--defaults":
        CLIENT_OPTIONS.clear()
        del sys.argv[-1]
    if "--reconnect" in sys.argv:
        position = sys.argv.index("--reconnect")
        CLIENT_OPTIONS["reconnect_seconds"] = float(sys.argv[position + 1])
        del sys.argv[position : position + 2]
    command, address, *rest = sys.argv[1:]
    if command == "wait":
        return wait(address)
    if command == "map":
        linger = rest[rest.index("--linger") + 1] if "--linger" in rest else None
        run_map(address, int(rest[0]), float(rest[1]), "--again" in rest, linger)
        return 0
    try:
        with Client(address=address, **CLIENT_OPTIONS) as client:
            tell("connected")
            if command == "hold":
                client.submit(mark_and_sleep, rest[0], 3600).result()
            elif command == "gil":
                tell("done", value=client.submit(hold_the_gil, int(rest[0])).result())
            elif command == "large":
                tell("done", value=client.submit(length, bytes(int(rest[0]) * 10**6)).result())
            elif command == "objects":
                while True:
                    client.send_object(bytes(2**20))
                    tell("stored")
                    time.sleep(0.2)
            elif command == "graph":
                graph = {f"n{i}": (increment, i) for i in range(int(rest[0]))}
                tell("done", value=sum(client.get(graph, keys=list(graph)).values()))
    except Exception as error:  # noqa: BLE001 - what failed is what the test reads
        tell("error", type=type(error).__name__, message=str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
