"""The ``scaler_symphony_cluster`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.command_line import add_common_arguments, parse_arguments

CONFIG_SECTION = "symphony_cluster"

MISSING_SOAMAPI_EXIT_STATUS = 1
NOT_IMPLEMENTED_EXIT_STATUS = 2


def _address_argument(text: str) -> str:
    try:
        return check_address(text)
    except AddressError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive_integer(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_symphony_cluster",
        description="Connect to a Scaler scheduler as a worker that runs its tasks on IBM Spectrum Symphony "
        "(requires Symphony's soamapi Python module).",
    )
    parser.add_argument("address", type=_address_argument, help="the scheduler's address, tcp://HOST:PORT")
    parser.add_argument("service_name", metavar="SERVICE", help="the Symphony service that runs the tasks")
    parser.add_argument(
        "--base-concurrency",
        "-n",
        type=_positive_integer,
        default=os.cpu_count() or 1,
        help="tasks run at once, not counting nested tasks (default: this host's CPU count)",
    )
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parse_arguments(parser, CONFIG_SECTION, argv)
    if args.address is None or args.service_name is None:  # positionals made optional by --config
        parser.error("the following arguments are required: address, SERVICE")
    try:
        import soamapi  # noqa: F401  (only whether it imports matters here)
    except ImportError as error:
        print(
            "scaler_symphony_cluster: IBM Spectrum Symphony's Python API (the soamapi module) is required but "
            f"cannot be imported ({error}). Run this on a Symphony host with the Symphony environment loaded "
            "(. $SOAM_HOME/conf/profile.soam).",
            file=sys.stderr,
        )
        return MISSING_SOAMAPI_EXIT_STATUS
    print("scaler_symphony_cluster: the Symphony worker is not implemented yet", file=sys.stderr)
    return NOT_IMPLEMENTED_EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main())
