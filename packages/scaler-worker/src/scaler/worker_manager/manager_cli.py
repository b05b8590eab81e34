"""``scaler_worker_manager {native,slurm} SCHEDULER_ADDRESS ...``: grow and shrink worker groups as the
scheduler decides (docs/scaling.md).

``native`` runs each group as local processes (``scaler_cluster``) on this host; ``slurm`` runs each group as
a Slurm job. Every worker option (capabilities, queue size, heartbeats, timeouts, the workers' keys) is
passed to the workers of every group; the manager's own key is ``--manager-key-file``. A ``--config`` file's
options are read from its ``[native_worker_manager]`` or ``[slurm_worker_manager]`` section.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from scaler.protocol.command_line import (
    add_common_arguments,
    non_negative_float,
    non_negative_int,
    parse_arguments,
    positive_float,
    positive_int,
    setup_logging,
)
from scaler.protocol.errors import ScalerError
from scaler.protocol.security import SecurityConfig, peer_keys
from scaler.worker import WorkerConfig, add_worker_arguments, parse_capabilities

PROGRAM = "scaler_worker_manager"
KINDS = ("native", "slurm")


def build_parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROGRAM} {kind}",
        description={
            "native": "Start and stop groups of Scaler workers on this host as the scheduler decides.",
            "slurm": "Start and stop groups of Scaler workers as Slurm jobs as the scheduler decides.",
        }[kind],
    )
    add_worker_arguments(parser)
    group = parser.add_argument_group("worker groups", "how many, and how large (docs/scaling.md)")
    if kind == "native":
        group.add_argument("--max-workers", type=positive_int, metavar="N",
                           help="the most workers this host runs, in all groups (required)")  # fmt: skip
        group.add_argument("--workers-per-group", type=positive_int, default=1, metavar="K",
                           help="workers started and stopped together (default: %(default)s)")  # fmt: skip
        group.add_argument("--group-lifetime-seconds", type=non_negative_float, default=0.0, metavar="SECONDS",
                           help="a group that ran this long is drained and replaced if needed (default: 0, no "
                           "limit)")  # fmt: skip
    else:
        group.add_argument("--max-jobs", type=positive_int, metavar="N",
                           help="the most Slurm jobs (worker groups) at once, queued or running "
                           "(required)")  # fmt: skip
        group.add_argument("--job-workers", type=positive_int, default=1, metavar="K",
                           help="workers in each job (default: %(default)s)")  # fmt: skip
        group.add_argument("--partition", default="", help="the Slurm partition (default: Slurm's default)")
        group.add_argument("--time-limit", default="", metavar="TIME",
                           help="each job's time limit, in Slurm's format (30, 1:00:00, 1-0); a job is drained "
                           "before it (default: the partition's)")  # fmt: skip
        group.add_argument("--drain-margin-seconds", type=non_negative_float, default=60.0, metavar="SECONDS",
                           help="a job is drained this long before its time limit (default: %(default)s)")  # fmt: skip
        group.add_argument("--start-timeout-seconds", type=non_negative_float, default=600.0, metavar="SECONDS",
                           help="a job Slurm has not started after this long is cancelled (default: %(default)s; "
                           "0: wait forever)")  # fmt: skip
        group.add_argument("--cpus-per-worker", type=positive_int, default=1, metavar="N",
                           help="CPUs asked for each worker (default: %(default)s)")  # fmt: skip
        group.add_argument("--memory", default="", help="memory asked for each job, as sbatch --mem takes it")
        group.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                           help="one more option for sbatch, e.g. --sbatch-option=--account=proj "
                           "(repeatable)")  # fmt: skip
        group.add_argument("--job-directory", default="scaler-jobs", metavar="DIR",
                           help="where job scripts and job output go: a directory the compute nodes share "
                           "(default: %(default)s)")  # fmt: skip
        group.add_argument("--squeue-interval-seconds", type=positive_float, default=5.0, metavar="SECONDS",
                           help="how often squeue is asked about the jobs (default: %(default)s)")  # fmt: skip
        group.add_argument("--python", default=sys.executable, metavar="PATH",
                           help="the Python of the jobs, with scaler-worker installed (default: this one, "
                           "%(default)s)")  # fmt: skip
    group.add_argument("--min-groups", type=non_negative_int, default=0, metavar="N",
                       help="groups kept however idle (default: %(default)s)")  # fmt: skip
    group.add_argument("--leave-timeout-seconds", type=non_negative_float, default=30.0, metavar="SECONDS",
                       help="on a stop signal, groups drain this long at most before they stop (default: "
                       "%(default)s)")  # fmt: skip
    parser.add_argument("--manager-key-file", metavar="FILE",
                        help="the manager's own key pair (NAME.key_secret), authorized as a worker manager; "
                        "--key-file is the workers' (docs/security.md)")  # fmt: skip
    add_common_arguments(parser)
    return parser


def _native(args: Any, config: WorkerConfig) -> Tuple[Dict[str, Any], Any]:
    from scaler.worker_manager.native_groups import NativeGroups, sharing_this_host

    if args.max_workers < args.workers_per_group:
        raise ValueError(f"--max-workers {args.max_workers} is less than --workers-per-group {args.workers_per_group}")
    max_groups = args.max_workers // args.workers_per_group
    limits = dict(workers_per_group=args.workers_per_group, max_groups=max_groups,
                  retire_after_seconds=args.group_lifetime_seconds)  # fmt: skip
    return limits, NativeGroups(sharing_this_host(config, max_groups * args.workers_per_group))


def _slurm(args: Any, config: WorkerConfig) -> Tuple[Dict[str, Any], Any]:
    from scaler.worker_manager.slurm_groups import SlurmGroups, SlurmOptions, time_limit_seconds

    for command in ("sbatch", "scancel", "squeue"):
        if shutil.which(command) is None:
            raise ValueError(f"{command} is not on PATH: the slurm manager needs Slurm's client commands")
    retire_after = 0.0
    if args.time_limit:
        retire_after = time_limit_seconds(args.time_limit) - args.drain_margin_seconds
        if retire_after <= 0:
            raise ValueError(f"--time-limit {args.time_limit} is not longer than --drain-margin-seconds")
    options = SlurmOptions(
        partition=args.partition, time_limit=args.time_limit, cpus_per_worker=args.cpus_per_worker,
        memory=args.memory, sbatch_options=tuple(args.sbatch_option), job_directory=args.job_directory,
        python=args.python, poll_seconds=args.squeue_interval_seconds,
    )  # fmt: skip
    limits = dict(workers_per_group=args.job_workers, max_groups=args.max_jobs, retire_after_seconds=retire_after,
                  start_timeout_seconds=args.start_timeout_seconds)  # fmt: skip
    return limits, SlurmGroups(config, options)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals

    stop_on_signals()  # until the event loop takes the signals over
    die_with_parent_from_environment()
    arguments: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] not in KINDS:
        top = argparse.ArgumentParser(prog=PROGRAM, description="Grow and shrink Scaler worker groups as the "
                                      "scheduler decides: native (this host) or slurm (Slurm jobs).")  # fmt: skip
        top.add_argument("kind", choices=KINDS, help="what runs the worker groups")
        if arguments and arguments[0] in ("-h", "--help"):
            top.print_help()
            return 0
        top.error(f"choose what runs the worker groups: {' or '.join(KINDS)}" + (
            f", not {arguments[0]!r}" if arguments else ""))  # fmt: skip
    kind = arguments[0]
    parser = build_parser(kind)
    args = parse_arguments(parser, f"{kind}_worker_manager", arguments[1:])
    limit = "max_workers" if kind == "native" else "max_jobs"
    if getattr(args, limit) is None:  # required, from the command line or the config file
        option = limit.replace("_", "-")
        parser.error(f"--{option} is required (or {option} in [{kind}_worker_manager] of --config)")
    try:
        setup_logging(args.logging_level, tuple(args.logging_paths), args.logging_config_file)
        if args.worker_group_id:
            raise ValueError("--worker-group-id is given to each group by the manager, not to the manager")
        config = WorkerConfig.from_arguments(args)
        workers_keys = peer_keys(config.security)
        if workers_keys.secure != bool(args.manager_key_file):
            raise ValueError("with keys, give both the manager's key pair (--manager-key-file) and the workers' "
                             "(--key-file), with --server-key-file")  # fmt: skip
        own = SecurityConfig(key_file=args.manager_key_file, server_key_file=config.security.server_key_file)
        keys = peer_keys(own)
        limits, backend = (_native if kind == "native" else _slurm)(args, config)
        if args.min_groups > limits["max_groups"]:
            raise ValueError(f"--min-groups {args.min_groups} is more than the {limits['max_groups']} groups allowed")
    except (ScalerError, ValueError) as error:
        parser.error(str(error))
    from scaler.worker_manager.manager_agent import run_manager
    from scaler.worker_manager.manager_core import ManagerSettings

    settings = ManagerSettings(
        scheduler_address=config.scheduler_address, kind=kind, min_groups=args.min_groups,
        capabilities=parse_capabilities(args.per_worker_capabilities),
        heartbeat_interval_seconds=config.heartbeat_interval_seconds, timeout_seconds=config.worker_timeout_seconds,
        leave_timeout_seconds=args.leave_timeout_seconds, **limits,
    )  # fmt: skip
    try:
        return run_manager(settings, backend, keys, args.event_loop)
    except KeyboardInterrupt:  # a signal before the event loop took the signals over
        return 0


if __name__ == "__main__":
    sys.exit(main())
