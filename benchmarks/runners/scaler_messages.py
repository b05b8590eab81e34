"""Count the scheduler's messages per task for one workload (this project only; run in .envs/scaler).

    PYTHONPATH=benchmarks/runners benchmarks/.envs/scaler/bin/python \\
        benchmarks/runners/scaler_messages.py map_noop 20000

Reads the scheduler's monitor snapshots (its cumulative sent/received counters, by message type) before and
after the workload, so docs/performance.md can say how many messages, and so how many decodes and encodes, the
scheduler handles per task. Prints JSON.
"""

import json
import sys
import time

import bench_common
import zmq
from run_scaler import ScalerEngine

from scaler.protocol import codec
from scaler.protocol.messages import StateSnapshot


def snapshot(socket, after: float) -> StateSnapshot:
    """The first snapshot published after ``after`` (snapshots come once a second)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if socket.poll(500):
            message, _ = codec.decode(socket.recv_multipart())
            if isinstance(message, StateSnapshot) and time.monotonic() > after:
                return message
    raise RuntimeError("no monitor snapshot")


def counts(message: StateSnapshot):
    return (
        {c.name: c.value for c in message.messages_received},
        {c.name: c.value for c in message.messages_sent},
    )


def main() -> None:
    workload, size = sys.argv[1], int(sys.argv[2])
    engine = ScalerEngine(2)
    engine.start()
    try:
        engine.wait_ready()
        host, port = engine.cluster.get_address().rsplit(":", 1)
        socket = zmq.Context.instance().socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(f"{host}:{int(port) + 2}")
        time.sleep(1.5)  # the scheduler publishes only while someone is subscribed
        received_before, sent_before = counts(snapshot(socket, time.monotonic() + 1.1))
        bench_common.WORKLOADS[workload](engine, size)
        received_after, sent_after = counts(snapshot(socket, time.monotonic() + 1.1))
        per_task = {
            "received": {k: round((v - received_before.get(k, 0)) / size, 4) for k, v in received_after.items()
                         if v != received_before.get(k, 0)},
            "sent": {k: round((v - sent_before.get(k, 0)) / size, 4) for k, v in sent_after.items()
                     if v != sent_before.get(k, 0)},
        }
        print(json.dumps({"workload": workload, "size": size, "scheduler_messages_per_task": per_task}, indent=1))
        socket.close(linger=0)
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
