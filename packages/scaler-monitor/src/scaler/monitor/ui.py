"""``scaler_ui``: the web monitor. Not implemented yet: it parses its options and says so."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from scaler.monitor.top import address_argument
from scaler.protocol.command_line import ConfigError, add_common_arguments, parse_arguments

CONFIG_SECTION = "ui"

NOT_IMPLEMENTED_EXIT_STATUS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_ui", description="Serve a web page showing a Scaler scheduler's state (not implemented yet)."
    )
    parser.add_argument(
        "address", type=address_argument, help="the scheduler's monitor address (by default its port + 2)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface the web server listens on")
    parser.add_argument("--port", type=int, default=8081, help="port the web server listens on")
    add_common_arguments(parser, event_loop=False)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    try:
        parse_arguments(parser, CONFIG_SECTION, argv)
    except ConfigError as error:
        parser.error(str(error))
    print(
        "scaler_ui: the web monitor is not implemented yet; use `scaler_top ADDRESS` to watch the scheduler",
        file=sys.stderr,
    )
    return NOT_IMPLEMENTED_EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main())
