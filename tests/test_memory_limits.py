"""A worker's memory limit (issue 28, docs/memory.md), with real allocations: real storage, scheduler and a
cluster of two workers limited to 300 MiB each. A task past the limit fails alone with `MemoryLimitError`
naming memory, the limit, what was reached and its function (whether it asked for it at once, leaked it bit
by bit, or made processes of its own that hold it); the worker and the other tasks go on; ``retries=``
applies; the scheduler hears of each kill (monitor snapshot, its events log as scaler_ui shows it, Prometheus
metrics). A processor that keeps memory above 70 % of the limit between tasks is replaced before the next one;
the limit reaches the worker from a TOML file and from `SchedulerClusterCombo`, and so do the combo's storage
options."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import psutil
import pytest
from cluster_processes import next_snapshot, wait_until, worker_count

from scaler import Client, MemoryLimitError, SchedulerClusterCombo
from scaler.protocol.addresses import default_monitor_address, default_storage_address, free_tcp_port
from scaler.protocol.ids import show
from scaler.protocol.snapshot_metrics import metric_families

MIB = 1 << 20
LIMIT = "300MiB"
LIMIT_TEXT = "memory limit of 300.0 MiB"


def allocate(size: int) -> int:
    return len(b"\x01" * size)


def leak(step: int, pause: float) -> int:
    """Takes ``step`` more bytes every ``pause`` seconds, for ever: it ends by going over the limit."""
    held: List[bytes] = []
    while True:
        held.append(b"\x01" * step)
        time.sleep(pause)


def hold_in_children(count: int, size: int, pid_path: str) -> None:
    """Starts ``count`` processes that each hold ``size`` bytes (every page written), and waits for them."""
    program = f"import time; data = b'\\x01' * {size}; print('held', flush=True); time.sleep(120)"
    children = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE) for _ in range(count)]
    with open(pid_path, "w") as file:
        file.write(" ".join(str(child.pid) for child in children))
    for child in children:
        assert child.stdout is not None
        child.stdout.readline()
        child.wait()


def greedy_first_time(marker: str, size: int) -> str:
    if not os.path.exists(marker):
        open(marker, "w").close()
        allocate(size)
    return "second attempt"


def square(value: int) -> int:
    return value * value


def keep_in_a_module(size: int) -> int:
    """Leaves ``size`` bytes in a module's global after it returns (a leak, as a cache that grows is); its
    processor's pid."""
    sys.modules["os"].held_by_a_task = b"\x01" * size  # type: ignore[attr-defined]
    return os.getpid()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def processor_state() -> Tuple[int, bool]:
    """The processor's pid, and whether it holds what `keep_in_a_module` left."""
    return os.getpid(), hasattr(sys.modules["os"], "held_by_a_task")


@pytest.fixture
def limited(processes, address) -> str:
    """A cluster of two workers of 300 MiB each; its scheduler's address."""
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 2, "--memory-limit", LIMIT)
    wait_until(lambda: worker_count(default_monitor_address(address)) == 2, 60, "the workers")
    return address


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def events_log(processes, limited, tmp_path) -> Callable[[], List[Dict[str, Any]]]:
    """scaler_ui subscribed to the limited cluster (so the scheduler notes what happens): reads its events log,
    newest first."""
    port = free_tcp_port()
    monitor = default_monitor_address(limited)
    ui = processes.start("scaler_ui", monitor, "--port", str(port), log_path=str(tmp_path / "ui.log"))
    url = f"http://127.0.0.1:{port}/state.json"

    def snapshot() -> Dict[str, Any]:
        try:
            return json.loads(urllib.request.urlopen(url, timeout=10).read())["snapshot"] or {}
        except OSError:
            return {}

    wait_until(lambda: ui.poll() is None and len(snapshot().get("workers", ())) == 2, 60, "scaler_ui's snapshot")
    return lambda: snapshot().get("events", [])


def memory_kills(events_log: Callable[[], List[Dict[str, Any]]], count: int) -> List[Dict[str, Any]]:
    """The ``count`` memory kills of the events log, oldest first, once it shows them."""
    wait_until(lambda: len([e for e in events_log() if e["kind"] == "memory kill"]) >= count, 30, "the kills")
    return [event for event in events_log() if event["kind"] == "memory kill"][::-1]


def worker_ids(address: str) -> List[bytes]:
    snapshot = next_snapshot(default_monitor_address(address))
    assert snapshot is not None
    return sorted(worker.worker_id for worker in snapshot.workers)


def test_tasks_past_the_limit_fail_alone_and_the_workers_and_other_tasks_go_on(limited, events_log, tmp_path):
    workers = worker_ids(limited)
    with Client(address=limited, timeout_seconds=60) as client:
        others = client.map(square, [(i,) for i in range(200)])
        at_once = client.submit(allocate, 1 << 30)  # far past the limit in one step
        bit_by_bit = client.submit(leak, 16 * MIB, 0.005)
        with pytest.raises(MemoryLimitError) as at_once_error:
            at_once.result(timeout=60)
        with pytest.raises(MemoryLimitError) as leak_error:
            bit_by_bit.result(timeout=60)
        assert others == [i * i for i in range(200)]
        retried = client.submit_verbose(greedy_first_time, (str(tmp_path / "marker"), 1 << 30), retries=1)
        assert retried.result(timeout=60) == "second attempt"  # retries= applies to a task stopped for memory
        assert client.submit(square, 12).result(timeout=60) == 144
    for error, function in ((at_once_error.value, "allocate"), (leak_error.value, "leak")):
        assert f"task {__name__}.{function} went over its worker's {LIMIT_TEXT}" in str(error)
        assert "its peak: " in str(error)
    assert worker_ids(limited) == workers  # the same workers, never restarted

    def kills_reported() -> bool:
        snapshot = next_snapshot(default_monitor_address(limited))
        return snapshot is not None and sum(w.heartbeat.memory_kills for w in snapshot.workers) == 3

    wait_until(kills_reported, 30, "the three kills in the monitor's snapshot")
    snapshot = next_snapshot(default_monitor_address(limited))
    assert snapshot is not None
    assert [w.heartbeat.memory_limit_bytes for w in snapshot.workers] == [300 * MIB, 300 * MIB]
    [kills] = [f for f in metric_families(snapshot, {}) if f.name == "scaler_worker_memory_kills"]
    assert sum(sample.value for sample in kills.samples) == 3
    # each is in the events log, naming its worker, task and function (each refused an allocation past the limit)
    events = memory_kills(events_log, 3)
    assert sorted(event["text"].split(" of ")[1].split(":")[0] for event in events) == [
        f"{__name__}.{function}" for function in ("allocate", "greedy_first_time", "leak")
    ]
    for event in events:
        assert event["subject"] in {show(worker) for worker in workers}
        assert event["text"].startswith(f"worker {event['subject']} stopped task ")
        assert event["text"].endswith(f"an allocation past its {LIMIT_TEXT} was refused")


def test_processes_a_task_started_count_and_are_stopped_with_it(limited, events_log, tmp_path):
    pid_path = tmp_path / "pids"
    with Client(address=limited, timeout_seconds=60) as client:
        # 2 x 200 MiB: each process is under the limit, together they are past it
        future = client.submit(hold_in_children, 2, 200 * MIB, str(pid_path))
        with pytest.raises(MemoryLimitError) as error:
            future.result(timeout=60)
        assert client.submit(square, 3).result(timeout=60) == 9
    text = str(error.value)
    assert f"task {__name__}.hold_in_children went over its worker's {LIMIT_TEXT}" in text
    assert "its processor (with the processes it started) reached " in text
    children = [int(pid) for pid in pid_path.read_text().split()]
    wait_until(lambda: all(gone(pid) for pid in children), 10, "the task's processes to be stopped")
    [event] = memory_kills(events_log, 1)  # the processor was stopped at the memory it reached
    task = f"task {future.task_id.hex()} of {__name__}.hold_in_children"
    assert f"stopped {task}: memory " in event["text"] and event["text"].endswith("over its limit of 300.0 MiB")


def test_a_processor_that_keeps_memory_between_tasks_is_replaced_before_the_next_task(processes, address, tmp_path):
    """One worker of 300 MiB: a task that frees what it took leaves its processor in place; one that leaves
    230 MiB in a module's global (above 70 % of the limit, 210 MiB) has the next task run in a new processor."""
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage)
    log = tmp_path / "cluster.log"
    processes.cluster(address, 1, "--memory-limit", LIMIT, "--logging-level", "INFO", log_path=str(log))
    wait_until(lambda: worker_count(default_monitor_address(address)) == 1, 60, "the worker")
    with Client(address=address, timeout_seconds=60) as client:
        first, held = client.submit(processor_state).result(timeout=60)
        assert client.submit(allocate, 230 * MIB).result(timeout=60) == 230 * MIB  # taken and given back
        assert client.submit(processor_state).result(timeout=60) == (first, False)  # the same processor
        assert client.submit(keep_in_a_module, 230 * MIB).result(timeout=60) == first
        second, held = client.submit(processor_state).result(timeout=60)
    assert second != first and not held  # a new processor, without the leak
    wait_until(lambda: gone(first), 10, "the replaced processor to end")
    text = log.read_text()
    assert "replaced processor" in text and "between tasks, above 210.0 MiB" in text


def test_the_limit_reaches_the_worker_from_a_toml_file(processes, address, tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text('[cluster]\nmemory_limit = "200MiB"\n')
    storage = default_storage_address(address)
    processes.storage(storage)
    processes.scheduler(address, "--object-storage-address", storage)
    processes.cluster(address, 1, "--config", str(config))
    with Client(address=address, timeout_seconds=60) as client:
        with pytest.raises(MemoryLimitError) as error:
            client.submit(allocate, 1 << 30).result(timeout=60)
    assert f"task {__name__}.allocate went over its worker's memory limit of 200.0 MiB" in str(error.value)


def test_the_combos_memory_options_reach_its_worker_and_its_storage_server(tmp_path):
    """``memory_limit=`` bounds the combo's worker; ``storage_memory_limit=`` and ``spill_directory=`` make its
    storage server spill into that directory past 16 MiB, and read every object back right."""
    spill = tmp_path / "spill"
    combo = SchedulerClusterCombo(
        n_workers=1, memory_limit="200MiB", storage_memory_limit="16MiB", spill_directory=str(spill),
        logging_paths=("/dev/null",),
    )  # fmt: skip
    try:
        with Client(address=combo.get_address(), timeout_seconds=60) as client:
            with pytest.raises(MemoryLimitError) as error:
                client.submit(allocate, 1 << 30).result(timeout=60)
            objects = [bytes([index]) * (4 * MIB) for index in range(12)]  # 48 MiB: three times the budget
            references = [client.send_object(data) for data in objects]
            spilled = _spill_files(spill)
            digests = client.map(digest, [(reference,) for reference in references])
            assert digests == [hashlib.sha256(data).hexdigest() for data in objects]
    finally:
        combo.shutdown()
    assert f"task {__name__}.allocate went over its worker's memory limit of 200.0 MiB" in str(error.value)
    assert len(spilled) >= 8  # at most 4 of 4 MiB fit in 16 MiB: the others went to the directory given


def _spill_files(directory: Path) -> List[str]:
    """The files of the storage server's spill directory, made inside ``directory`` (`scaler-spill-*`)."""
    [own] = os.listdir(directory)
    return os.listdir(directory / own)
