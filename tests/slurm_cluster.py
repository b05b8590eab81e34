"""A real one-node Slurm for tests, started and always stopped by the test: munged, slurmctld and slurmd from
the distribution's packages (``slurm-wlm``, ``munge``; `dev.py test` installs them), run as root in a folder of
their own: their own munge socket, their own ports, their own ``slurm.conf`` (named by ``SLURM_CONF``, which
the Slurm commands read), so nothing of the host's configuration is used or changed. Jobs get no CPU or
memory limits here. Every daemon is stopped by the PID it was started with."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List

from cluster_processes import wait_until

from scaler.protocol.addresses import free_tcp_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "runuser")
START_SECONDS = 30
STOP_SECONDS = 5


class SlurmCluster:
    def __init__(self, directory: Path) -> None:
        missing = [name for name in DAEMONS if shutil.which(name, path=f"{os.environ.get('PATH')}:/usr/sbin") is None]
        if missing or os.geteuid() != 0:
            raise RuntimeError(
                f"a real Slurm needs root and the packages slurm-wlm and munge (missing: "
                f"{', '.join(missing) or 'none'}; euid {os.geteuid()}): apt-get install slurm-wlm munge "
                "(dev.py test does it)"
            )
        self.directory = directory
        # munged runs as the user munge, which must reach its directory: not under pytest's (root only)
        self.munge = Path(tempfile.mkdtemp(prefix="scaler-munge-"))
        self.node = socket.gethostname().split(".")[0]
        self.environment: Dict[str, str] = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
        self._daemons: List[subprocess.Popen] = []

    def start(self) -> None:
        directory = self.directory
        for name in ("state", "spool", "log"):
            (directory / name).mkdir(parents=True, exist_ok=True)
        munge = self.munge
        shutil.chown(munge, "munge", "munge")
        os.chmod(munge, 0o755)
        self._start("munged", [
            "runuser", "-u", "munge", "--", _sbin("munged"), "--foreground", f"--socket={munge}/socket",
            "--key-file=/etc/munge/munge.key", f"--log-file={munge}/log", f"--pid-file={munge}/pid",
            f"--seed-file={munge}/seed",
        ])  # fmt: skip
        wait_until(lambda: (munge / "socket").exists(), START_SECONDS, "munged's socket")
        ports = free_tcp_port(count=2)
        (directory / "slurm.conf").write_text(
            "\n".join([
                "ClusterName=scalertest", f"SlurmctldHost={self.node}", "SlurmUser=root", "AuthType=auth/munge",
                f"AuthInfo=socket={munge}/socket", f"SlurmctldPort={ports}", f"SlurmdPort={ports + 1}",
                f"StateSaveLocation={directory}/state", f"SlurmdSpoolDir={directory}/spool",
                f"SlurmctldPidFile={directory}/slurmctld.pid", f"SlurmdPidFile={directory}/slurmd.pid",
                f"SlurmctldLogFile={directory}/log/slurmctld.log", f"SlurmdLogFile={directory}/log/slurmd.log",
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU", "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none", "SchedulerType=sched/backfill",
                "ReturnToService=2", "MinJobAge=300",
                "SlurmdParameters=config_overrides",  # the node as configured: more CPUs than cores (jobs sleep)
                f"NodeName={self.node} CPUs=8 RealMemory=1000 State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            ]) + "\n"
        )  # fmt: skip
        self._start("slurmctld", [_sbin("slurmctld"), "-D"])
        self._start("slurmd", [_sbin("slurmd"), "-D"])
        wait_until(lambda: self.command("sinfo", "-h", "-o", "%t").strip() == "idle", START_SECONDS, "an idle node")

    def command(self, *arguments: str) -> str:
        done = subprocess.run(arguments, capture_output=True, text=True, timeout=30, env=self.environment)
        return done.stdout if done.returncode == 0 else ""

    def jobs(self) -> List[str]:
        """``JOBID STATE`` of every job Slurm knows that has not ended."""
        return self.command("squeue", "-h", "-o", "%i %T").split("\n")[:-1]

    def cancel_all(self) -> None:
        """Cancel every job (a test's jobs end with the test) and wait until Slurm has none left running."""
        self.command("scancel", f"--user={getpass.getuser()}")
        wait_until(lambda: not self.jobs(), START_SECONDS, "every job to end")

    def stop(self) -> None:
        """Cancel what runs, then stop slurmd, slurmctld and munged, in that order (slurmd waits for its
        controller), each by the PID it was started with (munged: the one it wrote, runuser's child)."""
        try:
            self.cancel_all()
        finally:
            for process in reversed(self._daemons):
                if process is self._daemons[0]:  # runuser: munged ends, then runuser does
                    _terminate_pid_file(self.munge / "pid")
                elif process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(STOP_SECONDS)
            shutil.rmtree(self.munge, ignore_errors=True)

    def _start(self, name: str, command: List[str]) -> None:
        log = open(self.directory / "log" / f"{name}.out", "wb")
        self._daemons.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.environment))


def _terminate_pid_file(path: Path) -> None:
    try:
        os.kill(int(path.read_text().strip()), signal.SIGTERM)
    except (OSError, ValueError):
        pass


def _sbin(name: str) -> str:
    return shutil.which(name, path=f"{os.environ.get('PATH')}:/usr/sbin") or name
