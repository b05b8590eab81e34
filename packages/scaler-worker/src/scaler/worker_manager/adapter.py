"""``scaler_native_worker_adapter SCHEDULER --host H --port P``: the OpenGRIS worker adapter webhook, serving a
scheduler started with ``--adapter-webhook-url http://H:P/``.

One endpoint, ``POST /``, JSON in and out (docs/scaling.md, "The webhook"):

- ``{"action": "get_worker_adapter_info"}`` -> 200 ``{"max_worker_groups", "workers_per_group",
  "base_capabilities"}``;
- ``{"action": "start_worker_group"}`` -> 200 ``{"status", "worker_group_id", "worker_ids"}`` (a worker's ID is
  known only once it says Hello to the scheduler: the list is empty), or 429 when the groups are all taken;
- ``{"action": "shutdown_worker_group", "worker_group_id": ID}`` -> 200 ``{"status"}``; 400 without an ID,
  404 for an ID it does not know;
- anything else -> 400 ``{"error": ...}``.

Each group is local processes (`native_groups.NativeGroups`, as for ``scaler_worker_manager native``) whose
workers connect to SCHEDULER with the worker options given here; a ``--memory-limit`` that is a share of the
host's memory (``auto``, the default, or ``80%``) is divided among all the workers it may run (``--max-workers``;
unlimited, among each group's own: docs/memory.md). The adapter decides nothing: the scheduler
calls it as its scaling decision says. It listens on loopback only, unless ``--insecure``: whoever reaches it
starts and stops workers.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Sequence, Tuple

from scaler.protocol.command_line import add_common_arguments, parse_arguments, setup_logging
from scaler.protocol.errors import ScalerError
from scaler.protocol.security import is_loopback_host
from scaler.worker import WorkerConfig, add_worker_arguments
from scaler.worker_manager.group_backend import ENDED, GroupBackendError
from scaler.worker_manager.native_groups import NativeGroups, sharing_this_host

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024
POLL_SECONDS = 0.5
CLOSE_TIMEOUT_SECONDS = 15.0
START_TIMEOUT_SECONDS = 30.0
UNLIMITED_GROUPS = 2**31 - 1  # no --max-workers


class WorkerAdapter:
    """The adapter's decisions on each request, over a `NativeGroups` (thread-safe: requests come on threads).

    Groups start on a thread that lives as long as the adapter: a child ends when the thread that started it
    does (the kernel's parent-death signal), and a request's thread ends with the request."""

    def __init__(self, config: WorkerConfig, max_groups: int, workers_per_group: int) -> None:
        self._config = config
        max_workers = 0 if max_groups == UNLIMITED_GROUPS else max_groups * workers_per_group
        self._groups = NativeGroups(sharing_this_host(config, max_workers))
        self._max_groups = max_groups
        self._workers_per_group = workers_per_group
        self._running: Dict[str, str] = {}  # group ID -> where it runs
        self._lock = threading.Lock()
        self._launcher = ThreadPoolExecutor(1, thread_name_prefix="scaler-adapter-groups")

    def answer(self, request: Any) -> Tuple[int, Dict[str, Any]]:
        """(HTTP status, JSON answer) for a decoded request body."""
        if not isinstance(request, dict):
            return 400, {"error": "the request must be a JSON object"}
        action = request.get("action")
        if action is None:
            return 400, {"error": "No action specified"}
        with self._lock:
            if action == "get_worker_adapter_info":
                capabilities = {c.name: c.value for c in self._config.capabilities}
                return 200, {"max_worker_groups": self._max_groups, "workers_per_group": self._workers_per_group,
                             "base_capabilities": capabilities}  # fmt: skip
            if action == "start_worker_group":
                return self._start()
            if action == "shutdown_worker_group":
                return self._shutdown(request.get("worker_group_id"))
        return 400, {"error": f"Unknown action {action!r}"}

    def _start(self) -> Tuple[int, Dict[str, Any]]:
        if len(self._running) >= self._max_groups:
            return 429, {"error": f"all {self._max_groups} worker groups are running"}
        group_id = f"native-{uuid.uuid4().hex}"
        try:
            start = self._launcher.submit(self._groups.start, group_id.encode(), self._workers_per_group)
            where = start.result(START_TIMEOUT_SECONDS)
        except (GroupBackendError, TimeoutError) as error:
            return 500, {"error": str(error)}
        self._running[group_id] = where
        logger.info(f"Adapter: started worker group {group_id} ({where})")
        return 200, {"status": "Worker group started", "worker_group_id": group_id, "worker_ids": []}

    def _shutdown(self, group_id: Any) -> Tuple[int, Dict[str, Any]]:
        if not group_id or not isinstance(group_id, str):
            return 400, {"error": "worker_group_id not specified"}
        if group_id not in self._running:
            return 404, {"error": f"worker group {group_id} not found"}
        self._groups.stop(group_id.encode())
        del self._running[group_id]
        logger.info(f"Adapter: shutting down worker group {group_id}")
        return 200, {"status": "Worker group shutdown"}

    def poll(self) -> None:
        """Forget the groups that ended (on their own or stopped)."""
        with self._lock:
            for group_id, status, reason in self._groups.poll():
                if status == ENDED and self._running.pop(group_id.decode(), None) is not None:
                    logger.warning(f"Adapter: worker group {group_id.decode()} ended: {reason}")

    def close(self) -> None:
        with self._lock:
            self._groups.close(CLOSE_TIMEOUT_SECONDS)
            self._running.clear()
        self._launcher.shutdown(wait=False)


class _Handler(BaseHTTPRequestHandler):
    adapter: WorkerAdapter  # set on the class made per server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_REQUEST_BYTES:
            self._reply(400, {"error": f"a request needs a Content-Length of at most {MAX_REQUEST_BYTES} bytes"})
            return
        try:
            request = json.loads(self.rfile.read(int(length)) or b"null")
        except ValueError as error:
            self._reply(400, {"error": f"the request is not JSON: {error}"})
            return
        if self.path.split("?")[0] != "/":
            self._reply(404, {"error": f"no endpoint {self.path}: POST to /"})
            return
        self._reply(*self.adapter.answer(request))

    def do_GET(self) -> None:  # noqa: N802
        self._reply(405, {"error": "POST a JSON request to /"})

    def _reply(self, status: int, body: Dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug(f"Adapter: {self.address_string()} {format % args}")


def serve(adapter: WorkerAdapter, host: str, port: int) -> ThreadingHTTPServer:
    """The adapter's HTTP server, bound (`OSError` if it cannot be); `serve_forever` is the caller's."""
    handler = type("AdapterHandler", (_Handler,), {"adapter": adapter})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_native_worker_adapter",
        description="Serve the OpenGRIS worker adapter webhook: start and stop groups of Scaler workers on this "
        "host when the scheduler (--adapter-webhook-url) asks.",
    )
    add_worker_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="the webhook's interface (default: %(default)s)")
    parser.add_argument("--port", type=_port, required=True, help="the webhook's port")
    parser.add_argument("--max-workers", type=int, default=-1, metavar="N",
                        help="the most workers, in all groups, among whom a --memory-limit that is a share of "
                        "this host's memory is divided (default: -1, unlimited: each group divides it among its own "
                        "workers)")  # fmt: skip
    parser.add_argument("--workers-per-group", type=int, default=1, metavar="K",
                        help="workers in each group (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--insecure", action="store_true",
        help="listen at an address other hosts reach (anyone who reaches it starts workers)",
    )  # fmt: skip
    add_common_arguments(parser)  # --event-loop: the workers'
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals

    stop_on_signals()  # until the loop below takes the signals over: a stop during the start is clean too
    die_with_parent_from_environment()
    parser = build_parser()
    args = parse_arguments(parser, "native_worker_adapter", argv)
    try:
        setup_logging(args.logging_level, tuple(args.logging_paths), args.logging_config_file)
        config = WorkerConfig.from_arguments(args)
        if args.workers_per_group < 1:
            raise ValueError(f"--workers-per-group {args.workers_per_group} is not a positive integer")
        if args.max_workers != -1 and args.max_workers < args.workers_per_group:
            raise ValueError(f"--max-workers {args.max_workers} is less than --workers-per-group")
        if not (args.insecure or is_loopback_host(args.host)):
            raise ValueError(f"the adapter would listen at {args.host}, which other hosts reach: anyone who reaches "
                             "it starts and stops workers; pass --insecure on a network you trust")  # fmt: skip
        max_groups = UNLIMITED_GROUPS if args.max_workers == -1 else args.max_workers // args.workers_per_group
        adapter = WorkerAdapter(config, max_groups, args.workers_per_group)
        server = serve(adapter, args.host, args.port)
    except OSError as error:
        parser.exit(1, f"{parser.prog}: error: cannot listen at {args.host}:{args.port}: {error.strerror}\n")
    except (ScalerError, ValueError) as error:
        parser.error(str(error))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="scaler-adapter-http", daemon=True)
    thread.start()
    logger.info(f"Adapter: serving the worker adapter webhook at http://{args.host}:{server.server_port}/")
    try:
        while not stop.wait(POLL_SECONDS):
            adapter.poll()
    finally:
        server.shutdown()
        server.server_close()
        adapter.close()
        logger.info("Adapter: stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
