"""What a lone message costs, piece by piece: the round trip of one task (run in .envs/scaler).

    benchmarks/.envs/scaler/bin/python benchmarks/runners/scaler_lone_message.py

CPU time of this process (not wall time: the load of the machine counts less), best of 3, in µs: a message
received by a coroutine through zmq.asyncio and through the worker's reader (inproc, one asyncio.Event per
message in both); the end of a read loop (a read that raises zmq.Again, or asking ZMQ_EVENTS); the codec on a
batch of one; the worker core and the scheduler core through one task and its result. docs/performance.md
(*The round trip after the sans-I/O refactor*) reads them.
"""

import asyncio
import os
import pickle
import sys
import time
from pathlib import Path

import zmq
import zmq.asyncio

from scaler.protocol import codec, routed
from scaler.protocol import messages as m
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import FromPeer, FromStorage, Send, Start
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.worker.peer_connection import _Reader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "scaler-worker" / "tests"))
import core_harness  # noqa: E402  (the worker core's test harness: a connected WorkerCore, no sockets)

N = 20_000


def cpu_per_call(function, calls: int = N) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(calls):
            function()
        best = min(best, time.process_time() - start)
    return best / calls * 1e6


async def received(zmq_asyncio: bool) -> float:
    """A message sent on one PAIR and awaited by a coroutine on the other, per message."""
    context = zmq.asyncio.Context()
    plain = zmq.Context.shadow(context.underlying)
    sender = plain.socket(zmq.PAIR)
    sender.bind("inproc://lone")
    receiver = (context if zmq_asyncio else plain).socket(zmq.PAIR)
    receiver.connect("inproc://lone")
    reader = None if zmq_asyncio else _Reader(receiver, True, "inproc://lone")
    arrived = asyncio.Event()

    async def receive() -> None:
        while True:
            await (receiver.recv_multipart() if reader is None else reader.next())
            arrived.set()

    task = asyncio.ensure_future(receive())
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(N // 4):
            arrived.clear()
            sender.send_multipart([b"x" * 100, b"y"])
            await arrived.wait()
        best = min(best, time.process_time() - start)
    task.cancel()
    if reader is not None:
        reader.close()
    sender.close()
    receiver.close()
    context.term()
    return best / (N // 4) * 1e6


def main() -> None:
    costs = {
        "receive through zmq.asyncio": asyncio.run(received(True)),
        "receive through the worker's reader": asyncio.run(received(False)),
    }
    context = zmq.Context()
    quiet = context.socket(zmq.PAIR)
    quiet.bind("inproc://quiet")

    def again() -> None:
        try:
            quiet.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            pass

    costs["end of a read loop: zmq.Again"] = cpu_per_call(again)
    costs["end of a read loop: ZMQ_EVENTS"] = cpu_per_call(lambda: quiet.getsockopt(zmq.EVENTS))
    quiet.close()
    context.term()

    client = b"C|host|1|aa"
    task = m.Task(
        task_id=os.urandom(16), client_id=client, function_id=os.urandom(32),
        arguments=[m.Argument("", m.ArgumentKind.INLINE, pickle.dumps(1))],
    )  # fmt: skip
    task_frames = [bytes(frame) for frame in codec.encode(m.TaskBatch([task]))]
    result = m.TaskResult(task.task_id, 1, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, pickle.dumps(1))
    result_frames = [bytes(frame) for frame in codec.encode(m.TaskResultBatch([result]))]
    costs["scheduler: decode a TaskBatch of one"] = cpu_per_call(lambda: routed.decode_routed(task_frames))
    costs["scheduler: decode a TaskResultBatch of one"] = cpu_per_call(lambda: routed.decode_routed(result_frames))
    costs["worker: decode a TaskBatch of one"] = cpu_per_call(lambda: codec.decode(task_frames))

    harness = core_harness.Harness(pipeline_depth=4)
    harness.assign(core_harness.make_task(0))
    harness.answer_gets()
    harness.pump()
    harness.finish()
    harness.pump()
    worker_tasks = iter([core_harness.make_task(i) for i in range(1, 3 * N // 4 + 1)])
    from scaler.worker.processor_protocol import ProcessorResult
    from scaler.worker.processor_runner import ProcessorOutput
    from scaler.worker.worker_events import FromRunner, FromScheduler

    core = harness.core

    def worker_round_trip() -> None:
        worker_task = next(worker_tasks)
        core.handle(FromScheduler(m.TaskBatch([worker_task], 1)), 1.0)
        answer = ProcessorResult(worker_task.task_id, 0, b"x", "", None, 0.0001, "f")
        core.handle(FromRunner(ProcessorOutput(harness.runner.processor_id, answer)), 1.0)

    costs["worker core: a task and its result"] = cpu_per_call(worker_round_trip, N // 4)

    scheduler = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1"))
    scheduler.handle(Start(), 0.0)
    scheduler.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    for peer, role in ((client, m.PeerRole.CLIENT), (b"W|host|2|aa", m.PeerRole.WORKER)):
        info = m.WorkerInfo(1, 1000, [])
        scheduler.handle(FromPeer(peer, m.Hello(PROTOCOL_VERSION, role, 1, "host", info)), 0.0)
    batches = iter([routed.decode_routed(task_frames)[0] for _ in range(3 * N // 4)])
    answers = iter([routed.decode_routed(result_frames)[0] for _ in range(3 * N // 4)])  # attempt 1, as assigned

    def scheduler_round_trip() -> None:
        (sent,) = [e for e in scheduler.handle(FromPeer(client, next(batches)), 1.0) if type(e) is Send]
        scheduler.handle(FromPeer(sent.to, next(answers)), 1.0)

    costs["scheduler core: a task and its result"] = cpu_per_call(scheduler_round_trip, N // 4)
    for name, value in costs.items():
        print(f"{value:8.2f} µs  {name}")


if __name__ == "__main__":
    main()
