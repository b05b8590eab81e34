"""Start and stop at any moment (issue 11, item 5): a stop signal at any point of a start leaves nothing behind,
children end with their parent, and an address is free again at once."""

from __future__ import annotations

import os
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
    delays = [0.05, 0.3, 0.6, 0.9, 1.0, 1.1, 1.2, 1.4, 1.7, 2.2]
    for delay in delays:
        scheduler = subprocess.Popen(
            [os.path.join(BIN, "scaler_scheduler"), address], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            time.sleep(delay)
            # Ctrl-C once, while it starts its storage server (before its main runs, Python itself would say
            # KeyboardInterrupt)
            scheduler.send_signal(signal.SIGINT if delay == 1.2 else signal.SIGTERM)
            output, _ = scheduler.communicate(timeout=60)
        finally:
            scheduler.kill()
            scheduler.wait(30)
        assert b"Traceback" not in output, output.decode(errors="replace")
        gone, alive = psutil.wait_procs(_processes_serving(storage), timeout=30)
        assert alive == [], f"left behind after a stop {delay} s into the start: {alive}"


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
