"""``scaler_ui``: the web monitor. It subscribes to a scheduler's monitor address and serves, on
http://HOST:PORT/, a live page (charts, workers, clients, functions, task states) and ``/metrics`` for Prometheus.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Optional, Sequence

from scaler.monitor.top import address_argument
from scaler.protocol.command_line import add_common_arguments, parse_arguments, setup_logging

CONFIG_SECTION = "ui"

logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_ui",
        description="Serve a live web page of a Scaler scheduler's state, and its Prometheus metrics at /metrics.",
    )
    parser.add_argument(
        "address", type=address_argument, help="the scheduler's monitor address (by default its port + 2)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface the web server listens on (default: 127.0.0.1, this host only)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=8081,
        help="port the web server listens on (0: any free port) (default: %(default)s)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help="require this token of every request (Bearer, or as the password of the browser's login prompt); "
        "put it in the --config file to keep it out of the process list",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="serve the page at a --host other hosts reach without --token (only on a network you trust)",
    )
    from scaler.protocol.security import add_security_arguments  # pyzmq only when running

    add_security_arguments(parser)  # a monitor key, when the cluster runs with keys
    add_common_arguments(parser, event_loop=False)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parse_arguments(parser, CONFIG_SECTION, argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"argument --port: {args.port} is not a port number (0 to 65535)")
    setup_logging(args.logging_level, args.logging_paths, args.logging_config_file)

    from scaler.monitor.dashboard_state import DashboardState  # prometheus_client and pyzmq only when running
    from scaler.monitor.subscription import SnapshotSubscription
    from scaler.monitor.web_server import DashboardServer, SnapshotFeed
    from scaler.protocol.errors import ScalerError
    from scaler.protocol.security import check_http_exposure, security_from_arguments

    try:
        if not args.token:
            served = "its page and Prometheus metrics"
            check_http_exposure("scaler_ui", served, args.host, args.insecure, "Give it --token, or ")
        subscription = SnapshotSubscription(args.address, security_from_arguments(args))
    except ScalerError as error:
        print(f"scaler_ui: error: {error}", file=sys.stderr)
        return 1
    with subscription:
        feed = SnapshotFeed(subscription, DashboardState(args.address))
        try:
            server = DashboardServer(args.host, args.port, feed, args.token)
        except OSError as error:
            print(f"scaler_ui: error: cannot listen at {args.host}:{args.port}: {error}", file=sys.stderr)
            return 1
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        feed.start()
        serving = threading.Thread(target=server.serve_forever, name="scaler_ui http", daemon=True)
        serving.start()
        port = server.server_address[1]
        logger.info(f"scaler_ui: monitor {args.address}, page at http://{args.host}:{port}/, metrics at /metrics")
        try:
            while not stop.wait(0.5) and feed.failure is None:
                pass
        finally:
            server.shutdown()
            feed.stop()
            server.server_close()
    if feed.failure is not None:
        print(f"scaler_ui: error: {feed.failure}", file=sys.stderr)
        return 1
    logger.info("scaler_ui: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
