"""The ``scaler_worker`` command line: one worker agent (scaler_cluster starts its workers through it).

Run as ``python -m scaler.worker.worker_main``, so that the processors it
spawns import this small module as their ``__main__`` rather than a user's
script. Keep the imports at the top light for the same reason.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Optional, Sequence

CONFIG_SECTION = "worker"


def build_parser() -> argparse.ArgumentParser:
    from scaler.protocol.command_line import add_common_arguments
    from scaler.worker.worker_config import add_worker_arguments

    parser = argparse.ArgumentParser(
        prog="scaler_worker",
        description="One Scaler worker: an agent that takes tasks from the scheduler and a processor subprocess "
        "that runs them. Use scaler_cluster to keep several alive.",
    )
    add_worker_arguments(parser)
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from scaler.protocol.command_line import parse_arguments, setup_logging
    from scaler.protocol.errors import ScalerError, SecurityError
    from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals
    from scaler.worker.worker_agent import run_worker
    from scaler.worker.worker_config import WorkerConfig
    from scaler.worker.worker_events import EXIT_REFUSED

    stop_on_signals()  # until the event loop takes the signals over: a stop during the start is clean too
    die_with_parent_from_environment(signal.SIGTERM)  # the agent then leaves cleanly
    parser = build_parser()
    try:
        args = parse_arguments(parser, CONFIG_SECTION, argv)
        config = WorkerConfig.from_arguments(args)
        setup_logging(config.logging_level, config.logging_paths, config.logging_config_file)
    except (ScalerError, ValueError) as error:
        parser.error(str(error))
    try:
        return run_worker(config)
    except SecurityError as error:  # key files it cannot use: retrying will not help
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:  # SIGINT before the event loop took over the signal
        return 0


if __name__ == "__main__":
    sys.exit(main())
