"""Micro-costs of this project's per-task building blocks, in µs per task (run in .envs/scaler).

    benchmarks/.envs/scaler/bin/python benchmarks/runners/scaler_micro.py

No sockets and no processes: the codec on a 1,000-task batch, a future, a pickled argument, a Pipe hop.
These are the floors behind the per-process numbers of docs/performance.md.
"""

import concurrent.futures
import json
import multiprocessing
import os
import pickle
import time

from scaler.client.future import ScalerFuture
from scaler.protocol import codec
from scaler.protocol import messages as m

BATCH = 1000


def per_item(function, items: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best / items * 1e6


def main() -> None:
    tasks = [
        m.Task(
            task_id=os.urandom(16), client_id=os.urandom(16), function_id=os.urandom(16),
            arguments=[m.Argument(name="", kind=m.ArgumentKind.INLINE, data=pickle.dumps(i))],
        )
        for i in range(BATCH)
    ]  # fmt: skip
    batch = m.TaskBatch(tasks=tasks)
    frames = codec.encode(batch)
    results = m.TaskResultBatch(
        results=[
            m.TaskResult(task_id=t.task_id, attempt=1, payload_kind=m.PayloadKind.INLINE, payload=pickle.dumps(i))
            for i, t in enumerate(tasks)
        ]
    )
    result_frames = codec.encode(results)
    costs = {
        "codec.encode TaskBatch, per task": per_item(lambda: codec.encode(batch), BATCH),
        "codec.decode TaskBatch, per task": per_item(lambda: codec.decode(frames), BATCH),
        "codec.encode TaskResultBatch, per result": per_item(lambda: codec.encode(results), BATCH),
        "codec.decode TaskResultBatch, per result": per_item(lambda: codec.decode(result_frames), BATCH),
        "encoded bytes per task (TaskBatch)": len(frames[0]) / BATCH,
        "m.Task(...) construction": per_item(
            lambda: [m.Task(task_id=b"x" * 16, client_id=b"y" * 16, function_id=b"z" * 16) for _ in range(BATCH)],
            BATCH,
        ),
        "concurrent.futures.Future()": per_item(lambda: [concurrent.futures.Future() for _ in range(BATCH)], BATCH),
        "ScalerFuture(...)": per_item(
            lambda: [ScalerFuture(b"x" * 16, None, None, False, 1.0) for _ in range(BATCH)], BATCH
        ),
        "pickle.dumps(int)": per_item(lambda: [pickle.dumps(i) for i in range(BATCH)], BATCH),
    }
    parent, child = multiprocessing.Pipe()
    payload = pickle.dumps(("task", b"x" * 16, [("", pickle.dumps(1))]))

    def pipe_hops():
        for _ in range(BATCH):
            parent.send_bytes(payload)
            child.recv_bytes()

    costs["Pipe send_bytes + recv_bytes (same process), per message"] = per_item(pipe_hops, BATCH)
    print(json.dumps({key: round(value, 2) for key, value in costs.items()}, indent=1))


if __name__ == "__main__":
    main()
