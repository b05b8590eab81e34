"""Start and stop at any moment (issue 11, item 5): a stop signal at any point of a start leaves nothing behind,
children end with their parent, and an address is free again at once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from typing import List

import psutil
from cluster_processes import BIN, hello_answered, wait_until

from scaler import Client, SchedulerClusterCombo
from scaler.protocol.addresses import default_storage_address


def _processes_serving(address: str) -> List[psutil.Process]:
    """The processes whose command line names ``address`` (what a stopped scheduler must not leave behind)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if address in " ".join(process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            pass
    return found


def test_a_stop_signal_at_any_moment_of_a_schedulers_start_leaves_nothing_behind(address):
    """The scheduler probes for a storage server for a second, then starts one: the signals fall before, while
    and after it does. Each stop is clean (no traceback), its storage server goes with it, and the next
    scheduler takes the same address at once."""
    storage = default_storage_address(address)
    moments: List[object] = [0.05, 0.3, 0.6, 0.9, 1.0, 1.1, "storage", 1.2, 1.4, 1.7, 2.2]
    for moment in moments:
        scheduler = subprocess.Popen(
            [os.path.join(BIN, "scaler_scheduler"), address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            if moment == "storage":
                # Ctrl-C once, as soon as its storage server's process exists (its main runs then: before it,
                # while the interpreter starts, Python itself would say KeyboardInterrupt)
                wait_until(psutil.Process(scheduler.pid).children, 60, "the storage server's process")
                scheduler.send_signal(signal.SIGINT)
            else:
                time.sleep(moment)  # type: ignore[arg-type]
                scheduler.send_signal(signal.SIGTERM)
            output, _ = scheduler.communicate(timeout=60)
        finally:
            scheduler.kill()
            scheduler.wait(30)
        assert b"Traceback" not in output, output.decode(errors="replace")
        gone, alive = psutil.wait_procs(_processes_serving(storage), timeout=30)
        assert alive == [], f"left behind after a stop at {moment} (s) of the start: {alive}"


def test_a_killed_scheduler_takes_the_storage_server_it_started_with_it(processes, address):
    scheduler = processes.scheduler(address)
    storage = default_storage_address(address)
    assert hello_answered(storage)
    (child,) = psutil.Process(scheduler.pid).children()
    scheduler.kill()
    child.wait(30)
    processes.scheduler(address)  # the address, and its storage server's, are free again at once
    assert hello_answered(storage)


def test_fifty_combos_start_and_stop_one_after_another_on_one_address(address):
    for attempt in range(50):
        combo = SchedulerClusterCombo(address=address, n_workers=1, logging_paths=("/dev/null",))
        try:
            if attempt % 10 == 0:
                with Client(address=address) as client:
                    assert client.submit(abs, -attempt).result(timeout=60) == attempt
        finally:
            combo.shutdown()
    wait_until(lambda: not _processes_serving(address.rsplit(":", 1)[1]), 30, "every process of the combos to end")


def _submits_from_inside(value: int) -> int:
    with Client() as client:  # inside a task: the processor's shared connection to the scheduler
        return client.submit(abs, value).result(timeout=60)


def test_a_stopped_workers_processors_say_goodbye_for_the_clients_their_tasks_made(processes, address, tmp_path):
    """A task that submits tasks connects its processor to the scheduler as a client. When the worker stops, that
    connection leaves with a DisconnectRequest, as the worker itself does: the scheduler sees no client lost."""
    log = tmp_path / "scheduler.log"
    processes.scheduler(address, log_path=str(log))
    cluster = processes.cluster(address, 2)
    with Client(address=address) as client:
        futures = [client.submit(_submits_from_inside, -n) for n in range(8)]
        assert [future.result(timeout=60) for future in futures] == list(range(8))
    cluster.send_signal(signal.SIGTERM)
    cluster.wait(30)

    def workers_left() -> bool:
        return len(re.findall(r"Scheduler: worker \S+ disconnected: ", log.read_text(errors="replace"))) == 2

    wait_until(workers_left, 30, "both workers to say goodbye")
    lines = log.read_text(errors="replace").splitlines()
    # (a readiness probe that gave up before the scheduler answered closes without a goodbye: not what this tests)
    lost = [line for line in lines if "(its connection closed)" in line and "|probe|" not in line]
    assert not lost, "\n".join(lines)
    goodbyes = [line for line in lines if "Scheduler: client" in line and line.endswith(" disconnected")]
    assert len(goodbyes) >= 2, "\n".join(lines)  # this test's client, and at least one processor's
