"""Chaos (issue 11): 10,000 tasks while worker agents and task processors are SIGKILLed about once a second.
Every result is correct and comes once, nothing the test started is left behind. How long it takes beside a
run without kills is measured by benchmarks/chaos.py (docs/scheduling.md), not asserted here."""

from __future__ import annotations

import time

import psutil
from chaos_monkey import ChaosMonkey, agents_and_processors
from cluster_processes import next_snapshot, wait_until, worker_count

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, default_storage_address

TASKS = 10_000
WORKERS = 3


def work(value: int) -> int:
    time.sleep(0.003)  # 10,000 tasks of 3 ms on 3 workers: 10 s at least, whatever the machine
    return value * value + 1


def test_ten_thousand_tasks_while_agents_and_processors_are_killed_about_once_a_second(processes, address):
    storage = default_storage_address(address)
    monitor = default_monitor_address(address)
    processes.storage(storage)
    # a task whose processor is killed runs again: with kills every second, a task may be hit more than the
    # default three times
    processes.scheduler(address, "--object-storage-address", storage, "--max-task-deaths", "1000")
    cluster = processes.cluster(address, WORKERS)
    wait_until(lambda: worker_count(monitor) == WORKERS, 60, f"{WORKERS} workers")
    monkey = ChaosMonkey(cluster.pid)
    with Client(address=address) as client:
        monkey.start()
        try:
            results = client.map(work, [(i,) for i in range(TASKS)])
        finally:
            monkey.stop()
        assert results == [i * i + 1 for i in range(TASKS)]
    kinds = [kind for kind, _ in monkey.killed]
    assert kinds.count("agent") >= 2 and kinds.count("processor") >= 2, kinds
    _, alive = psutil.wait_procs([process for _, process in monkey.killed], timeout=30)
    assert alive == []
    snapshot = next_snapshot(monitor, 10)
    counts = {counter.name: counter.value for counter in snapshot.task_states}
    assert counts["success"] == TASKS  # one result each: none lost, none twice
    assert all(counts[state] == 0 for state in ("queued", "assigned", "canceling", "withdrawing")), counts
    wait_until(lambda: worker_count(monitor) == WORKERS, 60, "the cluster to replace every killed agent")
    agents, processors = agents_and_processors(cluster.pid)
    assert len(agents) == WORKERS and len(processors) == WORKERS
