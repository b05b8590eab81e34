"""The load simulator of benchmarks/ at tiny sizes: its simulated peers against a real scheduler and storage
server get every result once and correct, and heartbeats that say truthfully what each worker holds make the
scheduler queue nothing again (it measures nothing here: timings belong to the benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "runners"))

import run_simulator  # noqa: E402
from sim_peers import Loop  # noqa: E402


def _run(scenario, tmp_path, **arguments):
    loop = Loop()
    scheduler = None
    try:
        scheduler = run_simulator.Scheduler(str(tmp_path / "scheduler.log"), arguments.get("interval", 1.0))
        metrics = scenario(loop, scheduler, SimpleNamespace(**arguments))
        problems = [p for peer in loop.peers for p in getattr(peer, "problems", [])]
        assert scheduler.process.poll() is None, "the scheduler exited"
        return metrics, problems, loop
    finally:
        loop.close()
        if scheduler is not None:
            scheduler.stop()


def test_simulated_clients_get_every_result_once_from_simulated_workers(tmp_path):
    metrics, problems, loop = _run(
        run_simulator.routing, tmp_path, workers=3, clients=2, tasks=3000, window=1000, capacity=0
    )
    assert problems == []  # each client checked each result: successful, its own, once
    assert metrics["tasks"] == 3000
    clients = [peer for peer in loop.peers if peer.role.name == "CLIENT"]
    assert all(client.results == client.submitted and not client.outstanding for client in clients)


def test_workers_holding_tasks_beat_truthfully_and_keep_them(tmp_path):
    metrics, problems, loop = _run(
        run_simulator.heartbeats, tmp_path, workers=4, held=3, interval=0.1, seconds=0.5
    )
    assert problems == []
    assert metrics["heartbeats"] > 0 and metrics["echoes"] > 0
    workers = [peer for peer in loop.peers if peer.role.name == "WORKER"]
    # a heartbeat the scheduler found wrong would have had it queue the tasks again, elsewhere
    assert all(len(worker.held) == 3 and worker.batches == 1 for worker in workers)
