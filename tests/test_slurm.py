"""``scaler_worker_manager slurm`` on a real one-node Slurm (`slurm_cluster.py`): each worker group is a job.

The same burst as tests/test_scaling.py runs on jobs that retire before their time limit; jobs Slurm kills,
never starts, or refuses to take are noticed and accounted for."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import cloudpickle
import pytest
import test_scaling
from cluster_processes import Processes, next_snapshot, wait_until
from slurm_cluster import SlurmCluster
from test_scaling import SCALE, WAIT, logged, run_burst

from scaler import Client
from scaler.protocol.addresses import default_monitor_address

cloudpickle.register_pickle_by_value(test_scaling)  # run_once goes to the workers by value


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.environment["SLURM_CONF"]  # for the managers the tests start
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if before is None:
            del os.environ["SLURM_CONF"]
        else:
            os.environ["SLURM_CONF"] = before


@pytest.fixture(autouse=True)
def _jobs_end_with_the_test(slurm) -> Iterator[None]:
    try:
        yield
    finally:
        slurm.cancel_all()


def slurm_manager(processes: Processes, address: str, log: Path, *options: str) -> subprocess.Popen:
    jobs = log.parent / "jobs"
    return processes.start("scaler_worker_manager", "slurm", address, "--partition", "debug", "--job-directory",
                           str(jobs), "--squeue-interval-seconds", "0.5", *options, log_path=str(log))  # fmt: skip


def test_a_burst_of_5000_tasks_runs_once_each_on_jobs_that_retire_before_their_time_limit(
    slurm, processes, address, tmp_path
):
    scheduler_log = tmp_path / "scheduler.log"
    processes.scheduler(address, *SCALE, log_path=str(scheduler_log))
    log = tmp_path / "manager.log"
    # a time limit of one minute, drained 58 s before it: each job retires after 2 s of running
    slurm_manager(processes, address, log, "--max-jobs", "2", "--time-limit", "1", "--drain-margin-seconds", "58")
    run_burst(address, tmp_path / "runs")
    assert logged(log, "ran its time: it retires") and logged(scheduler_log, "drained: its manager stops it")
    monitor = default_monitor_address(address)
    wait_until(lambda: not slurm.jobs() and not (next_snapshot(monitor) or _empty).workers, WAIT, "idle jobs ended")
    assert re.search(r"group \S+: slurm job \d+", log.read_text())


class _Empty:
    workers = [None]  # no snapshot yet: not idle


_empty = _Empty()


def busy_jobs(address: str) -> list:
    """The Slurm jobs whose workers hold tasks now, from the scheduler's snapshot (a group's detail names its job)."""
    snapshot = next_snapshot(default_monitor_address(address))
    if snapshot is None:
        return []
    busy = {w.group_id for w in snapshot.workers if w.assigned_tasks}
    groups = [g for manager in snapshot.managers for g in manager.heartbeat.groups]
    return [g.detail.split()[-1] for g in groups if g.group_id in busy and g.detail.startswith("slurm job ")]


def long_task(x: int) -> int:
    time.sleep(1.5)
    return x + 1


def test_jobs_slurm_kills_never_starts_or_refuses_are_noticed_and_the_work_still_done(
    slurm, processes, address, tmp_path
):
    processes.scheduler(address, *SCALE, "--allocate-policy", "capability")
    refused, pending, killed = (tmp_path / name for name in ("refused.log", "pending.log", "killed.log"))
    slurm_manager(processes, address, refused, "--max-jobs", "1", "--partition", "nosuch", "-pwc", "refused")
    slurm_manager(processes, address, pending, "--max-jobs", "1", "--sbatch-option=--begin=now+3600",
                  "--start-timeout-seconds", "2", "-pwc", "pending")  # fmt: skip
    slurm_manager(processes, address, killed, "--max-jobs", "2")
    with Client(address=address, timeout_seconds=WAIT) as client:
        client.submit_verbose(long_task, (0,), {}, capabilities={"refused": 1})
        client.submit_verbose(long_task, (0,), {}, capabilities={"pending": 1})
        futures = [client.submit(long_task, i) for i in range(4)]
        jobs = []
        wait_until(lambda: bool(jobs.extend(busy_jobs(address))) or bool(jobs), WAIT, "a job whose worker has tasks")
        job = jobs[0]
        slurm.command("scancel", job)  # as Slurm kills a job (a time limit, a failed node)
        assert [future.result(WAIT) for future in futures] == [1, 2, 3, 4]  # what the killed job held ran again
        wait_until(lambda: logged(killed, f"slurm job {job} cancelled"), WAIT, "the killed job noticed")
        wait_until(lambda: logged(pending, "not running 2s after its start: stopping it"), WAIT, "the late job")
        wait_until(lambda: logged(refused, "no new group for 2s"), WAIT, "the refused job tried again")
    text = refused.read_text()
    assert "could not start: sbatch failed (exit 1): sbatch: error: invalid partition specified: nosuch" in text
    assert "Traceback" not in text + pending.read_text() + killed.read_text()
    wait_until(lambda: not any("PENDING" in line for line in slurm.jobs()), WAIT, "the late job cancelled")


def test_a_killed_managers_job_works_on_then_ends_once_idle_instead_of_at_its_time_limit(
    slurm, processes, address, tmp_path
):
    """SIGKILL leaves the manager no chance to cancel its job: the scheduler sends the job's workers away once
    they are idle, and the job ends (its time limit is the partition's default, far away)."""
    scheduler_log = tmp_path / "scheduler.log"
    processes.scheduler(address, *SCALE, log_path=str(scheduler_log))
    manager = slurm_manager(processes, address, tmp_path / "manager.log", "--max-jobs", "1")
    with Client(address=address, timeout_seconds=WAIT) as client:
        first = [client.submit(long_task, i) for i in range(2)]
        jobs: list = []
        wait_until(lambda: bool(jobs.extend(busy_jobs(address))) or bool(jobs), WAIT, "a job whose worker has tasks")
        manager.kill()
        manager.wait(WAIT)
        later = [client.submit(long_task, i) for i in range(2, 4)]  # the job's workers still take work
        assert [future.result(WAIT) for future in first + later] == [1, 2, 3, 4]
    wait_until(lambda: not slurm.jobs(), WAIT, "the killed manager's idle job to end")
    assert logged(scheduler_log, "sent away: group") and logged(scheduler_log, "idle, and its manager is gone")
