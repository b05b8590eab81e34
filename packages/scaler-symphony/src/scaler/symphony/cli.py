"""The ``scaler_symphony_cluster`` command line: one worker of a scheduler whose tasks run on Symphony.

Its options are every worker's (`scaler.worker.add_worker_arguments`: the scheduler's address, capabilities,
queue size, heartbeats, timeouts, and whatever every worker takes), the common ones (`--config`, logging,
`--event-loop`), and Symphony's: the application, the base concurrency, the session type, the user.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from scaler.protocol.command_line import add_common_arguments, parse_arguments, positive_int, setup_logging
from scaler.protocol.errors import ScalerError
from scaler.protocol.process_control import stop_on_signals
from scaler.symphony.symphony_settings import DEFAULT_SESSION_TYPE, DEFAULT_USER, SymphonySettings
from scaler.worker import WorkerConfig, add_worker_arguments

CONFIG_SECTION = "symphony_cluster"
PASSWORD_VARIABLE = "SCALER_SYMPHONY_PASSWORD"  # the Symphony user's password (not an option: it would show in ps)

MISSING_SOAMAPI_EXIT_STATUS = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_symphony_cluster",
        description="Connect to a Scaler scheduler as one worker whose tasks run on IBM Spectrum Symphony, as tasks "
        "of a Symphony application running the Scaler service (requires Symphony's soamapi Python module).",
    )
    add_worker_arguments(parser, local_tasks=False)  # its tasks run on Symphony's hosts, under Symphony's limits
    parser.add_argument(
        "service_name",
        metavar="SERVICE",
        help="the Symphony application that runs the tasks, as registered with soamreg (its service must be the "
        "Scaler service, python -m scaler.symphony.service)",
    )
    parser.add_argument(
        "--base-concurrency",
        "-n",
        type=positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="tasks in Symphony at once, not counting nested tasks (submitted from tasks running on this worker), "
        "which are never held back (default: this host's CPU count)",
    )
    parser.add_argument(
        "--session-type",
        default=DEFAULT_SESSION_TYPE,
        metavar="TYPE",
        help=f"a session type of the application's profile (default: {DEFAULT_SESSION_TYPE})",
    )
    parser.add_argument(
        "--symphony-user",
        default=DEFAULT_USER,
        metavar="USER",
        help=f"the Symphony user to connect as (default: {DEFAULT_USER}); its password is read from the "
        f"{PASSWORD_VARIABLE} environment variable (default: {DEFAULT_USER})",
    )
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    stop_on_signals()  # until the event loop takes the signals over: a stop during the start is clean too
    parser = build_parser()
    try:
        args = parse_arguments(parser, CONFIG_SECTION, argv)
        if args.address is None or args.service_name is None:  # positionals made optional by --config
            parser.error("the following arguments are required: address, SERVICE")
        config = WorkerConfig.from_arguments(args)
        settings = SymphonySettings(
            application=args.service_name,
            base_concurrency=args.base_concurrency,
            session_type=args.session_type,
            user=args.symphony_user,
            password=os.environ.get(PASSWORD_VARIABLE, DEFAULT_USER),
        )
    except (ScalerError, ValueError) as error:
        parser.error(str(error))
    try:
        import soamapi  # noqa: F401  (the worker imports it; here, whether it imports is what matters)
    except ImportError as error:
        print(
            "scaler_symphony_cluster: IBM Spectrum Symphony's Python API (the soamapi module) is required but "
            f"cannot be imported ({error}). Run this on a Symphony host with the Symphony environment loaded "
            "(. $SOAM_HOME/conf/profile.soam).",
            file=sys.stderr,
        )
        return MISSING_SOAMAPI_EXIT_STATUS
    from scaler.symphony.symphony_worker import run_symphony_worker

    setup_logging(config.logging_level, config.logging_paths)
    return run_symphony_worker(config, settings)


if __name__ == "__main__":
    sys.exit(main())
