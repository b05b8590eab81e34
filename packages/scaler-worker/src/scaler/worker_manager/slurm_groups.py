"""Worker groups as Slurm jobs: each group is one job (``sbatch`` of a script that runs ``scaler_cluster``),
stopped with ``scancel``, and followed with ``squeue``.

A job waits in Slurm's queue (its group is starting) until Slurm runs it (running); a job that ends, whether
its group was stopped, Slurm killed it (its time limit, a failed node, a preemption) or it exited, is
reported ended with its final state; a job ``squeue`` no longer knows has ended too. The Slurm commands run
with the environment of the manager (``SLURM_CONF`` included) and each is bounded by the command timeout; a
command that fails or does not answer is an error that names it and says what Slurm said.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from scaler.protocol.ids import show_group
from scaler.worker import WorkerConfig
from scaler.worker_manager.group_backend import ENDED, RUNNING, GroupBackendError, cluster_command

logger = logging.getLogger(__name__)

# squeue's states of a job that runs, and of one that is over (the others wait: PENDING, CONFIGURING, ...)
_RUNNING_STATES = {"RUNNING", "COMPLETING", "STAGE_OUT"}
_ENDED_STATES = {
    "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
    "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",
}  # fmt: skip

Run = Callable[..., subprocess.CompletedProcess]


@dataclass(frozen=True)
class SlurmOptions:
    partition: str = ""  # empty: Slurm's default partition
    time_limit: str = ""  # sbatch --time (e.g. "30", "1:00:00", "1-0"); empty: the partition's default
    cpus_per_worker: int = 1
    memory: str = ""  # sbatch --mem, per job; empty: Slurm's default
    sbatch_options: Sequence[str] = field(default_factory=tuple)  # more options for sbatch, as given
    job_directory: str = "."  # the job scripts and their output (on a file system the compute nodes share)
    python: str = sys.executable  # the interpreter the jobs run scaler_cluster with
    command_timeout: float = 30.0
    poll_seconds: float = 5.0  # squeue this often (each call is work for slurmctld)


def time_limit_seconds(text: str) -> float:
    """Slurm's time format in seconds: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
    days-hours:minutes, days-hours:minutes:seconds; `ValueError` for anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match or text.strip() in ("", "0"):
        raise ValueError(f"{text!r} is not a Slurm time limit (minutes, h:m:s, days-h:m:s)")
    days, first, second, third = match.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        parts = [int(days) * 24 + int(first), int(second or 0), int(third or 0)]
    elif third is not None:  # hours:minutes:seconds
        parts = [int(first), int(second), int(third)]
    elif second is not None:  # minutes:seconds
        parts = [0, int(first), int(second)]
    else:  # minutes
        parts = [0, int(first), 0]
    return float(parts[0] * 3600 + parts[1] * 60 + parts[2])


class SlurmGroups:
    kind = "slurm"

    def __init__(self, config: WorkerConfig, options: SlurmOptions, run: Run = subprocess.run) -> None:
        self._config = config
        self._options = options
        self._run = run
        self._jobs: Dict[bytes, str] = {}  # group -> job ID
        self._running: Set[bytes] = set()  # reported running
        self._user = getpass.getuser()
        self._squeue_failing = False
        self.poll_seconds = options.poll_seconds
        os.makedirs(options.job_directory, exist_ok=True)

    def start(self, group_id: bytes, workers: int) -> str:
        options = self._options
        name = group_id.decode().rpartition("/")[2]
        script = os.path.join(os.path.abspath(options.job_directory), f"scaler-group-{name}-{os.getpid()}.sh")
        command = " ".join(map(shlex.quote, cluster_command(self._config, group_id, workers, options.python)))
        with open(script, "w") as file:
            file.write(f"#!/bin/sh\n# Scaler worker group {show_group(group_id)}\nexec {command}\n")
        arguments = [
            "sbatch", "--parsable", f"--job-name=scaler-{name}", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={workers * options.cpus_per_worker}",
            f"--output={os.path.join(os.path.abspath(options.job_directory), 'scaler-job-%j.out')}",
            *([f"--partition={options.partition}"] if options.partition else []),
            *([f"--time={options.time_limit}"] if options.time_limit else []),
            *([f"--mem={options.memory}"] if options.memory else []),
            *options.sbatch_options, script,
        ]  # fmt: skip
        output = self._command(arguments)
        job_id = output.strip().split(";")[0]
        if not job_id.isdigit():
            raise GroupBackendError(f"sbatch answered {output.strip()!r}, not a job ID")
        self._jobs[group_id] = job_id
        return f"slurm job {job_id}"

    def stop(self, group_id: bytes) -> None:
        job_id = self._jobs.get(group_id)
        if job_id is not None:
            self._command(["scancel", job_id])

    def poll(self) -> List[Tuple[bytes, str, str]]:
        if not self._jobs:
            return []
        states = self._job_states()
        if states is None:
            return []
        changes = []
        for group_id, job_id in list(self._jobs.items()):
            state, reason = states.get(job_id, ("", ""))
            if state in _RUNNING_STATES and group_id not in self._running:
                self._running.add(group_id)
                changes.append((group_id, RUNNING, ""))
            elif state in _ENDED_STATES or not state:
                del self._jobs[group_id]
                self._running.discard(group_id)
                what = state.lower() if state else "no longer known to Slurm"
                detail = f" ({reason})" if reason and reason != "None" else ""
                changes.append((group_id, ENDED, f"slurm job {job_id} {what}{detail}"))
        return changes

    def close(self, timeout: float) -> None:
        if self._jobs:
            try:
                self._command(["scancel", *self._jobs.values()])
            except GroupBackendError as error:
                logger.error(f"could not cancel the jobs of this manager ({' '.join(self._jobs.values())}): {error}")
            self._jobs.clear()

    def _job_states(self) -> Optional[Dict[str, Tuple[str, str]]]:
        """Every job of this user that squeue knows: job ID -> (state, reason); None when squeue fails."""
        try:
            output = self._command(["squeue", "--noheader", "--states=all", f"--user={self._user}",
                                    "--format=%i|%T|%r"])  # fmt: skip
        except GroupBackendError as error:
            if not self._squeue_failing:
                logger.warning(f"cannot follow the Slurm jobs: {error}; trying again")
            self._squeue_failing = True
            return None
        self._squeue_failing = False
        states = {}
        for line in output.splitlines():
            job_id, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            states[job_id] = (state.split()[0] if state else "", reason)
        return states

    def _command(self, arguments: List[str]) -> str:
        try:
            done = self._run(arguments, capture_output=True, text=True, timeout=self._options.command_timeout)
        except FileNotFoundError:
            raise GroupBackendError(f"{arguments[0]} is not installed here (no Slurm client commands)") from None
        except subprocess.TimeoutExpired:
            raise GroupBackendError(
                f"{arguments[0]} did not answer within {self._options.command_timeout:g}s"
            ) from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout or "").strip().replace("\n", " ")
            raise GroupBackendError(f"{arguments[0]} failed (exit {done.returncode}): {said or 'it said nothing'}")
        return done.stdout
