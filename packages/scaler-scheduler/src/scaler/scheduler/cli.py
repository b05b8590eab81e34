"""``scaler_scheduler``: run a scheduler."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence

from scaler.protocol.command_line import (
    add_common_arguments,
    byte_size,
    non_negative_float,
    parse_arguments,
    parse_size,
    positive_float,
    positive_int,
    run_event_loop,
    setup_logging,
)
from scaler.protocol.errors import ScalerError
from scaler.protocol.message_limits import DEFAULT_MAX_MESSAGE_SIZE, show_size
from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals
from scaler.protocol.security import add_security_arguments, security_from_arguments
from scaler.scheduler.graph_tasks import DEFAULT_INLINE_BUDGET
from scaler.scheduler.missing_capabilities import CHOICES, GRACE_SECONDS
from scaler.scheduler.scaling_policy import ScalingSettings
from scaler.scheduler.task_routing import DEFAULT_MAX_CLIENT_TASKS

# options of the object storage server the scheduler starts (when none answers at port + 1): name -> its option
STORAGE_OPTIONS = {
    "max_object_size": "--max-object-size",
    "storage_memory_limit": "--memory-limit",
    "spill_directory": "--spill-directory",
    "object_directory": "--object-directory",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_scheduler", description="Run the Scaler scheduler: routes tasks from clients to workers."
    )
    parser.add_argument("address", help="address to listen on, e.g. tcp://127.0.0.1:2345")
    parser.add_argument(
        "--object-storage-address", "-osa", default=None,
        help="object storage server to use (default: port + 1, started here if none answers)",
    )  # fmt: skip
    parser.add_argument("--monitor-address", "-ma", default=None, help="monitor PUB address (default: port + 2)")
    parser.add_argument(
        "--metrics-port", type=int, default=None,
        help="serve Prometheus metrics at http://METRICS_HOST:PORT/metrics (needs scaler-scheduler[metrics])",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-host", default="127.0.0.1",
        help="interface of --metrics-port (default: 127.0.0.1, this host only; any other needs --insecure: the "
        "metrics are plain HTTP without authentication)",
    )  # fmt: skip
    parser.add_argument("--protected", "-p", action="store_true", help="refuse shutdown requests from clients")
    parser.add_argument(
        "--dashboard-link", default="", metavar="URL",
        help="the page of a web monitor (scaler_ui) of this scheduler, told to clients that ask "
        "(Client.dashboard_link, Client.scheduler_info) (default: none)",
    )  # fmt: skip
    parser.add_argument(
        "--allocate-policy", "-ap", choices=("even", "capability"), default="even",
        help="even: the least loaded worker that has the capabilities a task needs; capability: the same (the "
        "earlier engine's name) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--missing-capabilities", choices=CHOICES, default="wait",
        help=f"a task whose capabilities no worker offers (nor a worker manager can start) for {GRACE_SECONDS:g}s: "
        "wait for one to join, with a warning, or fail (TaskRejectedError) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--max-task-deaths", type=int, default=3,
        help="a task whose processor died this many times fails (WorkerDiedError) instead of running again "
        "(default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--graph-sorter", "-gs", choices=("auto", "graphblas", "python"), default="auto",
        help="graph task bookkeeping: GraphBLAS (the graphblas extra), pure Python, or auto: GraphBLAS if installed "
        "(default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--graph-inline-bytes", type=int, default=DEFAULT_INLINE_BUDGET,
        help="small graph results the scheduler holds for their dependants, in bytes; beyond that (and always "
        "with 0) results other graph nodes need go through object storage (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--heartbeat-interval-seconds", "-hi", type=float, default=1.0, metavar="SECONDS",
        help="how often clients and workers send heartbeats (told them when they connect; a worker or client "
        "set to beat more often keeps its own) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--client-timeout-seconds", "-ct", type=float, default=60.0, metavar="SECONDS",
        help="a client silent this long is forgotten: its tasks cancelled, its objects deleted (a client whose "
        "connection closes is forgotten at once) (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--worker-timeout-seconds", "-wt", type=float, default=60.0, metavar="SECONDS",
        help="a worker silent this long is forgotten and its tasks run elsewhere (a worker whose connection "
        "closes, at once) (default: %(default)s)",
    )  # fmt: skip
    limits = parser.add_argument_group("limits", "what one peer may send and hold (docs/security.md)")
    limits.add_argument(
        "--max-message-size", type=byte_size, default=DEFAULT_MAX_MESSAGE_SIZE, metavar="SIZE",
        help="the largest message a client, worker or manager may send; a peer that sends a larger one is "
        f"disconnected. Suffixes K, M, G (default: {show_size(DEFAULT_MAX_MESSAGE_SIZE)})",
    )  # fmt: skip
    limits.add_argument(
        "--max-client-tasks", type=positive_int, default=DEFAULT_MAX_CLIENT_TASKS, metavar="N",
        help="the tasks a client may have queued here, waiting for a worker (graphs aside): a client of protocol "
        "1.8 holds the others back, an older one has them refused (default: %(default)s)",
    )  # fmt: skip
    scaling = parser.add_argument_group("scaling", "how worker managers grow and shrink (docs/scaling.md)")
    scaling.add_argument(
        "--scale-up-after-seconds", type=non_negative_float, default=1.0, metavar="SECONDS",
        help="tasks wait for a processor this long before worker managers start groups for them "
        "(default: %(default)s)",
    )  # fmt: skip
    scaling.add_argument(
        "--scale-down-idle-seconds", type=non_negative_float, default=30.0, metavar="SECONDS",
        help="a manager's worker group whose workers hold no task this long is drained and stopped "
        "(default: %(default)s)",
    )  # fmt: skip
    scaling.add_argument(
        "--adapter-webhook-url", default="", metavar="URL",
        help="an OpenGRIS worker adapter's webhook (scaler_native_worker_adapter): the scheduler starts and "
        "shuts down its worker groups as it does a worker manager's (default: none)",
    )  # fmt: skip
    scaling.add_argument(
        "--adapter-webhook-timeout-seconds", type=positive_float, default=10.0, metavar="SECONDS",
        help="each call to the webhook ends within this time; a call that does not is tried again later "
        "(default: %(default)s)",
    )  # fmt: skip
    storage = parser.add_argument_group(
        "the object storage server it starts", "without --object-storage-address, when none answers at port + 1"
    )
    storage.add_argument(
        "--max-object-size", type=byte_size, default=None, metavar="SIZE",
        help="largest object it accepts; suffixes K, M, G, T (default: the storage server's, 1 GiB)",
    )  # fmt: skip
    storage.add_argument(
        "--storage-memory-limit", type=byte_size, default=None, metavar="SIZE",
        help="memory it holds objects in, past which it spills them (default: the storage server's, half the host's)",
    )  # fmt: skip
    storage.add_argument(
        "--spill-directory", default=None, metavar="DIR",
        help="where it spills objects past its memory limit, or none (default: the storage server's, the temporary "
        "directory)",
    )  # fmt: skip
    storage.add_argument(
        "--object-directory", default=None, metavar="DIR",
        help="keep every object in a file there too: the storage server started again with it (after this scheduler "
        "was restarted, or died) serves them again (default: none)",
    )  # fmt: skip
    add_security_arguments(parser, serves=True, scheduler=True)
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    stop_on_signals()  # until the event loop takes the signals over: a stop during the start is clean too
    die_with_parent_from_environment()
    parser = build_parser()
    args = parse_arguments(parser, "scheduler", argv)
    try:  # a value from --config arrives unconverted when it is not text
        args.max_message_size = parse_size(args.max_message_size)
    except ValueError as error:
        parser.error(f"argument --max-message-size: {error}")
    from scaler.scheduler.server import SchedulerServer

    try:
        setup_logging(args.logging_level, tuple(args.logging_paths), args.logging_config_file)
        server = SchedulerServer(
            args.address,
            object_storage_address=args.object_storage_address,
            monitor_address=args.monitor_address,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            protected=args.protected,
            allocate_policy=args.allocate_policy,
            missing_capabilities=args.missing_capabilities,
            dashboard_link=args.dashboard_link,
            max_task_deaths=args.max_task_deaths,
            graph_sorter=args.graph_sorter,
            graph_inline_bytes=args.graph_inline_bytes,
            heartbeat_interval_seconds=args.heartbeat_interval_seconds,
            client_timeout_seconds=args.client_timeout_seconds,
            worker_timeout_seconds=args.worker_timeout_seconds,
            security=security_from_arguments(args),
            scaling=ScalingSettings(args.scale_up_after_seconds, args.scale_down_idle_seconds),
            adapter_webhook_url=args.adapter_webhook_url,
            adapter_webhook_timeout_seconds=args.adapter_webhook_timeout_seconds,
            max_message_size=args.max_message_size,
            max_client_tasks=args.max_client_tasks,
            storage_arguments=[
                *(f"{option}={value}" for name, option in STORAGE_OPTIONS.items() if (value := getattr(args, name))),
                *_logging_arguments(args),
            ],
        )
        run_event_loop(server.run, args.event_loop)  # until SIGTERM/SIGINT or an accepted client shutdown
    except ScalerError as error:
        print(f"scaler_scheduler: error: {error}", file=sys.stderr)
        sys.exit(1)


def _logging_arguments(args: argparse.Namespace) -> List[str]:
    """The scheduler's logging options, for the object storage server it starts: it logs as the scheduler does."""
    if args.logging_config_file:
        return ["--logging-config-file", args.logging_config_file]
    return ["--logging-level", args.logging_level, "--logging-paths", *args.logging_paths]


if __name__ == "__main__":
    main()
