"""A bounded fuzz test (issue 11): frames mutated from the golden messages (one of every message type, as this
protocol version encodes them) are sent to a real scheduler (as a client and as a worker), to a real object
storage server, and to a real worker (from a scheduler's socket made here). Afterwards every daemon is alive,
no task is stranded, and a normal client gets correct results.

The mutations are drawn from a seeded generator (`SEED`), so a failure replays: each frame is a golden message
with one to four of: a bit flipped, a byte or a whole word (a Cap'n Proto pointer) replaced, a word copied over
another (pointers that alias), the frame cut short, random bytes appended; some carry random extra frames.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Iterator, List

import cloudpickle
import zmq
from cluster_processes import next_snapshot, wait_until, worker_count
from raw_peers import RawPeer, identity

from scaler import Client
from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import ProtocolError
from scaler.protocol.version import PROTOCOL_VERSION, show_version

SEED = 20261125
FRAMES_PER_TARGET = 1500
PEERS_PER_TARGET = 15  # the frames of a target are spread over this many peers, one after the other
GOLDEN = Path(__file__).resolve().parent.parent / "packages" / "scaler-protocol" / "tests" / "golden"
LIVE_STATES = ("queued", "assigned", "canceling", "withdrawing")


def square(value: int) -> int:
    return value * value


def golden_frames() -> List[bytes]:
    directory = GOLDEN / f"v{show_version(PROTOCOL_VERSION)}"
    frames = [path.read_bytes() for path in sorted(directory.glob("*.bin"))]
    assert len(frames) == len(m.MESSAGE_TYPES), directory
    return frames


def mutations(count: int, seed: int) -> Iterator[List[bytes]]:
    """``count`` messages (lists of frames) mutated from the golden ones."""
    rng = random.Random(seed)
    golden = golden_frames()
    for _ in range(count):
        frame = bytearray(rng.choice(golden))
        for _ in range(rng.randint(1, 4)):
            how = rng.randrange(6)
            words = len(frame) // 8
            if how == 0 and frame:
                frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
            elif how == 1 and frame:
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            elif how == 2 and words:
                at = 8 * rng.randrange(words)
                frame[at : at + 8] = rng.randbytes(8)
            elif how == 3 and words >= 2:
                source, target = 8 * rng.randrange(words), 8 * rng.randrange(words)
                frame[target : target + 8] = frame[source : source + 8]
            elif how == 4:
                del frame[rng.randrange(len(frame) + 1) :]
            else:
                frame += rng.randbytes(rng.choice((1, 8, 64)))
        extra = [rng.randbytes(rng.randrange(100)) for _ in range(rng.choice((0, 0, 0, 1, 3)))]
        yield [bytes(frame), *extra]


def fuzz(context: zmq.Context, address: str, role: m.PeerRole, seed: int) -> None:
    """Mutated frames to ``address`` from peers of ``role`` that said Hello (every other peer stays a stranger)."""
    frames = mutations(FRAMES_PER_TARGET, seed)
    for number in range(PEERS_PER_TARGET):
        peer = RawPeer(context, address, identity("W" if role == m.PeerRole.WORKER else "C"))
        try:
            if number % 2 == 0:
                assert type(peer.hello(role)) is m.HelloAck
            for _ in range(FRAMES_PER_TARGET // PEERS_PER_TARGET):
                peer.send_frames(next(frames))
                while peer.receive(0) is not None:  # whatever it answers: read, not kept
                    pass
        finally:
            peer.close()


def live_tasks(monitor: str) -> int:
    snapshot = next_snapshot(monitor, 10)
    assert snapshot is not None, "no snapshot from the scheduler"
    return sum(counter.value for counter in snapshot.task_states if counter.name in LIVE_STATES)


def test_mutated_frames_to_every_daemon_leave_them_alive_and_serving(processes, address):
    storage = default_storage_address(address)
    monitor = default_monitor_address(address)
    storage_process = processes.storage(storage)
    # --protected: a frame that mutates into a shutdown request is refused, as anyone's would be
    scheduler_process = processes.scheduler(address, "--object-storage-address", storage, "--protected")
    cluster = processes.cluster(address, 1)
    wait_until(lambda: worker_count(monitor) == 1, 60, "the worker")
    context = zmq.Context()
    fake = context.socket(zmq.ROUTER)  # a scheduler's socket for the worker fuzzed directly
    fake.setsockopt(zmq.LINGER, 0)
    fake_address = f"tcp://127.0.0.1:{fake.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        lone_worker = processes.start("scaler_worker", fake_address, "--worker-timeout-seconds", "600")
        worker_id = _accept(fake, storage)

        fuzz(context, address, m.PeerRole.CLIENT, SEED)
        fuzz(context, address, m.PeerRole.WORKER, SEED + 1)
        fuzz(context, storage, m.PeerRole.CLIENT, SEED + 2)
        sent = _fuzz_worker(fake, worker_id, SEED + 3)

        for process in (storage_process, scheduler_process, cluster, lone_worker):
            assert process.poll() is None, f"{process.args} exited with code {process.returncode}"
        wait_until(lambda: live_tasks(monitor) == 0, 120, "no task left in the scheduler once the fuzzers left")
        with Client(address=address) as client:
            assert client.map(square, [(i,) for i in range(100)]) == [i * i for i in range(100)]
        assert worker_count(monitor) == 1
        assert _runs_a_task(context, fake, worker_id, storage) == 49, f"after {sent} frames"
        assert lone_worker.poll() is None
    finally:
        fake.close(linger=0)
        context.destroy(linger=0)


def _accept(fake: zmq.Socket, storage: str) -> bytes:
    """The lone worker's Hello, answered: its identity."""
    while True:
        assert fake.poll(60_000), "no Hello from the worker"
        worker_id, *frames = fake.recv_multipart()
        if type(codec.decode(frames)[0]) is m.Hello:
            ack = m.HelloAck(PROTOCOL_VERSION, storage, 1.0, 600.0, m.PeerRole.SCHEDULER)
            fake.send_multipart([worker_id, *codec.encode(ack)])
            return worker_id


def _fuzz_worker(fake: zmq.Socket, worker_id: bytes, seed: int) -> int:
    """Mutated frames from the scheduler's side, except those that decode to what tells a worker to leave (a
    DisconnectRequest, a Refusal): it would, rightly. What it answers is read and dropped."""
    sent = 0
    for frames in mutations(FRAMES_PER_TARGET, seed):
        try:
            message, _ = codec.decode(frames)
            if type(message) in (m.DisconnectRequest, m.Refusal):
                continue
        except ProtocolError:
            pass
        fake.send_multipart([worker_id, *frames])
        sent += 1
        while fake.poll(0):
            fake.recv_multipart()
    return sent


def _runs_a_task(context: zmq.Context, fake: zmq.Socket, worker_id: bytes, storage: str) -> int:
    """A valid task, its function put in storage here, through the fake scheduler: the worker's answer."""
    owner = identity("C")
    putter = RawPeer(context, storage, owner)
    try:
        assert type(putter.hello(m.PeerRole.CLIENT)) is m.HelloAck
        function_id = b"fuzz-function-01"
        putter.send(m.ObjectRequest(1, m.ObjectRequestKind.PUT, owner, [function_id]), (cloudpickle.dumps(square),))
        assert putter.expect(m.ObjectResponse).statuses == [m.ObjectStatus.OK]
    finally:
        putter.close()
    task = m.Task(
        task_id=b"fuzz-task-000001",
        client_id=owner,
        function_id=function_id,
        arguments=[m.Argument("", m.ArgumentKind.INLINE, cloudpickle.dumps(7))],
        attempt=1,
    )
    fake.send_multipart([worker_id, *codec.encode(m.TaskBatch([task], sequence=1_000_000))])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not fake.poll(1000):
            continue
        _, *frames = fake.recv_multipart()
        message, _ = codec.decode(frames)
        if type(message) is m.TaskResultBatch:
            for result in message.results:
                if result.task_id == task.task_id:
                    assert result.status == m.TaskStatus.SUCCESS, (result.status, result.error_text)
                    return cloudpickle.loads(result.payload)
    raise AssertionError("the worker did not run a valid task after the fuzzing")
