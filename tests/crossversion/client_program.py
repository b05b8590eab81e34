"""A client program written against the API every release has: another release's Python runs it.

python client_program.py ADDRESS    # prints one JSON object: what each call returned, or why it was refused
"""

import json
import math
import sys

from scaler import Client


def fail():
    raise ValueError("raised in the task")


def main(address):
    try:
        with Client(address, timeout_seconds=30) as client:
            report = {
                "submit": client.submit(math.sqrt, 16).result(timeout=60),
                "map": round(sum(client.map(math.sqrt, [(i,) for i in range(100)])), 2),
                "get": client.get({"a": 2, "c": (math.sqrt, "a")}, keys=["c"]),
                "object": client.submit(len, client.send_object(b"x" * 1_000_000)).result(timeout=60),
                "large_result": len(client.submit(bytes, 2_000_000).result(timeout=60)),
            }
            try:
                client.submit(fail).result(timeout=60)
            except ValueError as error:
                report["error"] = str(error)
    except Exception as error:
        report = {"refused": f"{type(error).__name__}: {error}"}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
