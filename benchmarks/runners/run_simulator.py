"""The load simulator: one real scheduler (and the storage server it starts) driven by simulated peers.

    python run_simulator.py routing --workers 1000 --clients 10 --tasks 200000 --out RESULT.json
    python run_simulator.py heartbeats --workers 1000 --interval 0.1 --held 100 --out RESULT.json
    python run_simulator.py peer_memory --workers 1000 --clients 100 --out RESULT.json
    python run_simulator.py queue_memory --tasks 10000000 --out RESULT.json
    python run_simulator.py new_worker --workers 1000 --out RESULT.json

The scheduler is the program users run (``python -m scaler.scheduler.cli``, builtin asyncio loop, as in the
other benchmarks), in its own process, with its storage server; its CPU time and resident memory are read with
psutil. Every worker
and client is a `sim_peers` peer in this process (`sim_peers.Loop`), so the scheduler alone does the work it
would do for real peers. Started by ``benchmarks/run.py --simulator`` inside this project's virtualenv; writes
one JSON object (``status``, ``metrics``, ``problems``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import psutil
import zmq
from sim_peers import BATCH_TASKS, Loop, SimClient, SimWorker

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.process_control import start_child, stop_child
from scaler.protocol.version import PROTOCOL_VERSION

CONNECT_SECONDS_PER_PEER = 0.05  # bound on connecting peers: 10 s + this per peer
RUN_TIMEOUT_SECONDS = 900.0
START_TRIES = 3
SERVED_SECONDS = 30.0  # a new worker given no task in this long is counted as never served
START_SECONDS = 30.0


class Scheduler:
    """``python -m scaler.scheduler.cli`` on free local ports, with the storage server it uses at port + 1 (started
    here, so that a port taken between the choice and the bind is noticed at once and other ports tried)."""

    def __init__(self, log_path: str, heartbeat_interval: float = 1.0, python: str = sys.executable) -> None:
        self._log = open(log_path, "w")
        self._python = python
        self.processes: List[subprocess.Popen] = []
        for _ in range(START_TRIES):
            self.port = _free_ports(3)
            self.address = f"tcp://127.0.0.1:{self.port}"
            self.monitor_address = f"tcp://127.0.0.1:{self.port + 2}"
            storage = f"tcp://127.0.0.1:{self.port + 1}"
            common = ["--logging-level", "WARNING", "--event-loop", "builtin"]
            self.processes = [
                self._start("scaler.storage", storage, *common),
                self._start("scaler.scheduler.cli", self.address, *common, "--object-storage-address", storage,
                            "--heartbeat-interval-seconds", repr(heartbeat_interval)),
            ]  # fmt: skip
            if self._answers():
                self.process = self.processes[1]
                self._psutil = psutil.Process(self.process.pid)
                return
            self.stop()
        raise RuntimeError(f"no scheduler answered in {START_TRIES} tries (see {log_path})")

    def _start(self, module: str, *arguments: str) -> subprocess.Popen:
        command = [self._python, "-m", module, *arguments]
        return start_child(command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)

    def _answers(self) -> bool:
        """Whether the scheduler answers a Hello (it does once its storage server did) while both run."""
        context = zmq.Context()
        probe = context.socket(zmq.DEALER)
        probe.setsockopt(zmq.LINGER, 0)
        probe.connect(self.address)
        try:
            probe.send_multipart(codec.encode(m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, os.getpid(), "probe")))
            deadline = time.monotonic() + START_SECONDS
            while time.monotonic() < deadline and all(process.poll() is None for process in self.processes):
                if probe.poll(200):
                    return type(codec.decode(probe.recv_multipart())[0]) is m.HelloAck
            return False
        finally:
            probe.close(linger=0)
            context.term()

    def cpu(self) -> float:
        times = self._psutil.cpu_times()
        return times.user + times.system

    def rss(self) -> int:
        return self._psutil.memory_info().rss

    def stop(self) -> None:
        for process in reversed(self.processes):
            stop_child(process, timeout=10.0)


def _free_ports(count: int) -> int:
    """A port such that it and the ``count - 1`` after it are free now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + count < 65536 and all(_free(port + i) for i in range(1, count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Monitor:
    """The scheduler's monitor feed (XPUB, port + 2): how many tasks each state holds, once a second."""

    def __init__(self, loop: Loop, address: str) -> None:
        self.socket = loop.context.socket(zmq.SUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(address)
        self.states: Dict[str, int] = {}
        loop.add(self)  # type: ignore[arg-type]

    def read(self, now: float) -> None:
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            snapshot, _ = codec.decode(frames)
            self.states = {counter.name: counter.value for counter in snapshot.task_states}


def _identity(kind: str, index: int) -> bytes:
    return f"{kind}|simulator|{os.getpid()}|{index:012x}".encode()


def _connect(loop: Loop, peers: List[Any]) -> float:
    """Say Hello from each peer; wait for every HelloAck. The seconds it took."""
    started = time.monotonic()
    for peer in peers:
        peer.hello()
        loop.touched(peer)
    timeout = 10 + CONNECT_SECONDS_PER_PEER * len(peers)
    loop.run_until(lambda: all(peer.greeted_at is not None for peer in peers), timeout, f"{len(peers)} Hellos")
    return time.monotonic() - started


def _serve(loop: Loop, seconds: float) -> None:
    end = time.monotonic() + seconds
    loop.run_until(lambda: time.monotonic() >= end, seconds + 60, "serving")


def _process_cpu() -> float:
    times = os.times()
    return times.user + times.system


# --- scenarios: each returns its metrics; the peers' problems are gathered by `main` ------------------------------


def routing(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """Tasks/s through the scheduler: ``--clients`` clients submit ``--tasks`` no-op tasks in all (at most
    ``--window`` unanswered over all clients), ``--workers`` workers answer each at once."""
    clients = [SimClient(loop, scheduler.address, _identity("C", i)) for i in range(args.clients)]
    _connect(loop, clients)
    workers = [
        SimWorker(loop, scheduler.address, _identity("W", i), capacity=args.capacity) for i in range(args.workers)
    ]
    connect_seconds = _connect(loop, workers)
    window = max(BATCH_TASKS, args.window // args.clients)
    per_client = max(1, args.tasks // args.clients)

    def all_answered() -> bool:
        return all(client.to_submit == 0 and client.results == client.submitted for client in clients)

    for client in clients:  # a warm-up tenth, unmeasured
        client.submit(max(1, per_client // 10), window)
    loop.run_until(all_answered, RUN_TIMEOUT_SECONDS, "warm-up")
    cpu, own_cpu, started = scheduler.cpu(), _process_cpu(), time.perf_counter()
    for client in clients:
        client.submit(per_client, window)
    loop.run_until(all_answered, RUN_TIMEOUT_SECONDS, f"{per_client * args.clients} tasks")
    seconds = time.perf_counter() - started
    cpu, own_cpu = scheduler.cpu() - cpu, _process_cpu() - own_cpu
    tasks = per_client * args.clients
    batches = sum(worker.batches for worker in workers)
    return {
        "tasks": tasks,
        "seconds": seconds,
        "tasks_per_s": tasks / seconds,
        "scheduler_cpu_us_per_task": cpu * 1e6 / tasks,
        "scheduler_capacity_tasks_per_s": tasks / cpu,  # at one core of its own
        "scheduler_busy": cpu / seconds,
        "simulator_cpu_us_per_task": own_cpu * 1e6 / tasks,
        "tasks_per_worker_batch": sum(worker.tasks_done for worker in workers) / max(1, batches),
        "connect_seconds": connect_seconds,
    }


def round_trip(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """One task at a time: a client submits a task, waits for its result, and again, ``--tasks`` times, to
    ``--workers`` workers that answer at once: the scheduler's CPU per round trip."""
    (client,) = clients = [SimClient(loop, scheduler.address, _identity("C", 0))]
    _connect(loop, clients)
    workers = [SimWorker(loop, scheduler.address, _identity("W", i)) for i in range(args.workers)]
    _connect(loop, workers)

    def answered() -> bool:
        return client.to_submit == 0 and client.results == client.submitted

    client.submit(max(1, args.tasks // 10), 1, 1)  # a warm-up tenth, unmeasured
    loop.run_until(answered, RUN_TIMEOUT_SECONDS, "warm-up")
    cpu, started = scheduler.cpu(), time.perf_counter()
    client.submit(args.tasks, 1, 1)
    loop.run_until(answered, RUN_TIMEOUT_SECONDS, f"{args.tasks} round trips")
    seconds, cpu = time.perf_counter() - started, scheduler.cpu() - cpu
    return {
        "round_trips": args.tasks,
        "ms_per_round_trip": seconds * 1e3 / args.tasks,
        "scheduler_cpu_us_per_round_trip": cpu * 1e6 / args.tasks,
    }


def heartbeats(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """Scheduler CPU per worker heartbeat: ``--workers`` workers beating every ``--interval`` seconds, each
    holding ``--held`` tasks it has not answered (tasks of an hour each: they stay)."""
    client = SimClient(loop, scheduler.address, _identity("C", 0))
    _connect(loop, [client])
    held = args.held
    workers = [
        SimWorker(loop, scheduler.address, _identity("W", i), delay=3600.0, capacity=max(1, held))
        for i in range(args.workers)
    ]
    _connect(loop, workers)
    if held:
        client.submit(held * len(workers), held * len(workers))
        loop.run_until(lambda: all(len(w.held) == held for w in workers), RUN_TIMEOUT_SECONDS, "tasks held")
    _serve(loop, 2 * args.interval + 1)  # every worker has beaten since
    beats, echoes = sum(w.heartbeats for w in workers), sum(w.echoes for w in workers)
    cpu, started = scheduler.cpu(), time.perf_counter()
    _serve(loop, args.seconds)
    cpu, seconds = scheduler.cpu() - cpu, time.perf_counter() - started
    beats, echoes = sum(w.heartbeats for w in workers) - beats, sum(w.echoes for w in workers) - echoes
    return {
        "held_per_worker": held,
        "heartbeats": beats,
        "echoes": echoes,
        "heartbeats_per_s": beats / seconds,
        "scheduler_cpu_us_per_heartbeat": cpu * 1e6 / max(1, beats),
        "scheduler_busy": cpu / seconds,
    }


def peer_memory(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """The scheduler's resident memory per connected worker and per connected client (no tasks)."""
    probe = SimClient(loop, scheduler.address, _identity("C", 0))
    _connect(loop, [probe])
    _serve(loop, 2.0)
    base = scheduler.rss()
    workers = [SimWorker(loop, scheduler.address, _identity("W", i)) for i in range(args.workers)]
    _connect(loop, workers)
    _serve(loop, 2.0)  # a heartbeat of each
    with_workers = scheduler.rss()
    clients = [SimClient(loop, scheduler.address, _identity("C", i + 1)) for i in range(args.clients)]
    _connect(loop, clients)
    _serve(loop, 2.0)
    with_clients = scheduler.rss()
    return {
        "workers": len(workers),
        "clients": len(clients),
        "bytes_per_worker": (with_workers - base) / len(workers),
        "bytes_per_client": (with_clients - with_workers) / len(clients),
        "rss_mb": with_clients / 1e6,
    }


def queue_memory(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """The scheduler's resident memory per queued task: one client submits ``--tasks`` tasks, no worker takes
    any; the monitor feed says when the scheduler holds them all."""
    monitor = Monitor(loop, scheduler.monitor_address)
    client = SimClient(loop, scheduler.address, _identity("C", 0))
    client.keep_ids = False
    _connect(loop, [client])
    _serve(loop, 2.0)
    base, cpu, started = scheduler.rss(), scheduler.cpu(), time.perf_counter()
    peak = base
    step = 200_000  # sent as the scheduler takes them: the simulator holds no more than this in its socket
    while client.submitted < args.tasks:
        client.submit(min(step, args.tasks - client.submitted), args.tasks)
        target = client.submitted
        queued = lambda target=target: monitor.states.get("queued", 0) >= target  # noqa: E731
        loop.run_until(queued, RUN_TIMEOUT_SECONDS, f"{target} queued")
        peak = max(peak, scheduler.rss())
    seconds, cpu = time.perf_counter() - started, scheduler.cpu() - cpu
    return {
        "tasks": args.tasks,
        "bytes_per_task": (peak - base) / args.tasks,
        "rss_mb": peak / 1e6,
        "queued_per_s": args.tasks / seconds,
        "scheduler_cpu_us_per_queued_task": cpu * 1e6 / args.tasks,
    }


def new_worker(loop: Loop, scheduler: Scheduler, args: Any) -> Dict[str, Any]:
    """How soon a worker that joins ``--workers`` busy ones (tasks of ``--delay`` seconds) gets a task: while
    tasks wait in the scheduler (each worker holds 10, as its capacity allows), and while none does (they all sit
    in the workers' queues, 20 each: only balancing moves them). A newcomer given nothing within `SERVED_SECONDS`
    counts in ``{case}_unserved`` (and the next joins)."""
    metrics: Dict[str, Any] = {}
    index = 0
    for case, capacity, per_worker in (("queued", 10, 30), ("on_workers", 1000, 20)):
        client = SimClient(loop, scheduler.address, _identity("C", index))
        _connect(loop, [client])
        workers = [
            SimWorker(loop, scheduler.address, _identity("W", index + i), delay=args.delay, capacity=capacity)
            for i in range(args.workers)
        ]
        index += len(workers)
        _connect(loop, workers)
        total = per_worker * len(workers)
        client.submit(total, total)
        loop.run_until(lambda w=workers, c=case, t=total: _placed(w, c, t), RUN_TIMEOUT_SECONDS, "every worker busy")
        waits, unserved = [], 0
        for _ in range(args.joins):
            newcomer = SimWorker(loop, scheduler.address, _identity("W", index), delay=args.delay)
            index += 1
            joined = time.monotonic()
            newcomer.hello()
            loop.touched(newcomer)
            served = lambda newcomer=newcomer: newcomer.first_batch_at is not None  # noqa: E731
            workers.append(newcomer)
            try:
                loop.run_until(served, SERVED_SECONDS, "a newcomer's first task")
            except TimeoutError:
                unserved += 1
                continue
            waits.append(newcomer.first_batch_at - joined)  # type: ignore[operator]
        metrics[f"{case}_unserved"] = unserved
        if waits:
            metrics[f"{case}_seconds"] = sorted(waits)[len(waits) // 2]
            metrics[f"{case}_max_seconds"] = max(waits)
        for peer in [client, *workers]:  # the next case starts from an empty cluster
            loop.remove(peer)
        _serve(loop, 1.0)
    return metrics


def _placed(workers: List[SimWorker], case: str, total: int) -> bool:
    """``queued``: every worker is full (the rest waits in the scheduler); else every task reached a worker."""
    if case == "queued":
        return all(len(worker.held) == worker.capacity for worker in workers)
    return sum(len(worker.held) + worker.tasks_done for worker in workers) == total


SCENARIOS: Dict[str, Callable[[Loop, Scheduler, Any], Dict[str, Any]]] = {
    "routing": routing,
    "round_trip": round_trip,
    "heartbeats": heartbeats,
    "peer_memory": peer_memory,
    "queue_memory": queue_memory,
    "new_worker": new_worker,
}


def main() -> None:
    parser = argparse.ArgumentParser(description="one scenario of the load simulator")
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=20_000, help="unanswered tasks, over all clients")
    parser.add_argument("--capacity", type=int, default=0, help="the workers' queue capacity (0: the default)")
    parser.add_argument("--interval", type=float, default=1.0, help="heartbeat interval, seconds")
    parser.add_argument("--held", type=int, default=0, help="tasks each worker holds (heartbeats)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long heartbeats are measured")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per task (new_worker)")
    parser.add_argument("--joins", type=int, default=5, help="workers that join, one after another (new_worker)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--log", default=os.devnull, help="the scheduler's (and its storage server's) output")
    parser.add_argument("--scheduler-python", default=sys.executable,
                        help="the interpreter that runs the scheduler and its storage server (default: this one)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # three descriptors per simulated peer
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    record: Dict[str, Any] = {"scenario": args.scenario, "arguments": vars(args)}
    loop = Loop()
    scheduler = None
    try:
        interval = args.interval if args.scenario == "heartbeats" else 1.0
        scheduler = Scheduler(args.log, interval, args.scheduler_python)
        record["metrics"] = SCENARIOS[args.scenario](loop, scheduler, args)
        problems = [f"{peer.identity.decode()}: {p}" for peer in loop.peers for p in getattr(peer, "problems", [])]
        record["problems"] = problems[:20]
        record["status"] = "ok" if not problems and scheduler.process.poll() is None else "error"
        if scheduler.process.poll() is not None:
            record["detail"] = f"the scheduler exited with {scheduler.process.returncode}"
    except BaseException as error:  # recorded: one failing run does not stop the others
        record["status"] = "error"
        record["detail"] = f"{type(error).__name__}: {error}"
        record["traceback"] = traceback.format_exc()[-4000:]
    finally:
        loop.close()
        if scheduler is not None:
            scheduler.stop()
        with open(args.out, "w") as file:
            json.dump(record, file)


if __name__ == "__main__":
    main()
