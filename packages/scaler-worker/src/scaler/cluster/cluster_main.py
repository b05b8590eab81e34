"""The ``scaler_cluster`` command line: keep N workers of one scheduler alive on this host."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from scaler.protocol.command_line import add_common_arguments, parse_arguments, positive_int
from scaler.protocol.errors import ScalerError
from scaler.protocol.security import security_from_arguments
from scaler.worker import add_worker_arguments

CONFIG_SECTION = "cluster"


def _default_workers() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_cluster",
        description="Start N Scaler workers that connect to the scheduler at ADDRESS, and replace any that dies.",
    )
    parser.add_argument(
        "--num-of-workers",
        "-n",
        type=positive_int,
        default=_default_workers(),
        metavar="N",
        help=f"number of workers (default: number of CPUs - 1, here {_default_workers()})",
    )
    add_worker_arguments(parser)
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from scaler.cluster.cluster import run_cluster
    from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals

    stop_on_signals()  # until the supervisor takes the signals over: a stop during the start is clean too
    die_with_parent_from_environment()  # started by a program (SchedulerClusterCombo): end with it
    parser = build_parser()
    try:
        args = parse_arguments(parser, CONFIG_SECTION, argv)
    except ScalerError as error:
        parser.error(str(error))
    try:
        return run_cluster(
            args.address,
            args.num_of_workers,
            per_worker_capabilities=args.per_worker_capabilities,
            per_worker_queue_size=args.per_worker_queue_size,
            heartbeat_interval_seconds=args.heartbeat_interval_seconds,
            worker_timeout_seconds=args.worker_timeout_seconds,
            task_inline_threshold=args.task_inline_threshold,
            event_loop=args.event_loop,
            logging_level=args.logging_level,
            logging_paths=args.logging_paths,
            logging_config_file=args.logging_config_file,
            die_with_parent_process=False,  # a cluster started from a shell outlives the shell (nohup, &)
            security=security_from_arguments(args),
            worker_group_id=args.worker_group_id,
            memory_limit=args.memory_limit,
            preload=args.preload,
        )
    except (ScalerError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except KeyboardInterrupt:  # SIGINT before the supervisor took over the signal
        return 0


if __name__ == "__main__":
    sys.exit(main())
