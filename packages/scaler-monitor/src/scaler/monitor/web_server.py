"""The web monitor's HTTP server: the page and its assets, the live feed (server-sent events), ``/metrics``, and
the task facts as JSON (``/tasks.json``: the task table's search).

One thread receives the scheduler's snapshots (`SnapshotFeed`); the standard library's threading HTTP server
answers each browser or scraper on a thread of its own. A viewer is sent the latest page state whenever a new
snapshot arrived, never a backlog: a slow or stuck viewer only misses snapshots, and nothing it does reaches the
feed thread or the scheduler.

With a token (``--token``), every request must carry it: ``Authorization: Bearer TOKEN``, or HTTP Basic with the
token as password (any user name), which a browser asks for in its login prompt.
"""

from __future__ import annotations

import base64
import hmac
import http.server
import importlib.resources
import json
import logging
import string
import threading
import time
import urllib.parse
from typing import Callable, Dict, Optional, Tuple

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scaler.monitor.dashboard_state import DashboardState
from scaler.monitor.subscription import SnapshotSubscription
from scaler.monitor.task_log import KEPT_RUNS, SEARCH_LIMIT, search
from scaler.protocol.errors import ProtocolError
from scaler.protocol.snapshot_metrics import SnapshotCollector, snapshot_registry
from scaler.protocol.task_chart import SCRIPT as TASK_CHART_SCRIPT
from scaler.protocol.task_runs import RUNNING, STATES

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0  # an event-stream comment this often, so proxies and browsers keep the stream open
_SEND_TIMEOUT_SECONDS = 30.0  # a viewer that takes no data for this long is dropped
_FEED_POLL_SECONDS = 0.5

# the page's files, served from the installed package: path -> (file in scaler/monitor/static, content type)
STATIC_FILES: Dict[str, Tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


def _static(name: str) -> bytes:
    return (importlib.resources.files("scaler.monitor") / "static" / name).read_bytes()


class SnapshotFeed:
    """The thread that receives snapshots into a `DashboardState`; viewers wait on `changed` for the next one."""

    def __init__(self, subscription: SnapshotSubscription, state: DashboardState) -> None:
        self.state = state
        self.changed = threading.Condition()
        self.version = 0  # bumped on each snapshot, under `changed`
        self._subscription = subscription
        self.failure: Optional[str] = None  # why the feed stopped by itself: the scheduler refused it
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scaler_ui feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                snapshot = self._subscription.receive(_FEED_POLL_SECONDS)
            except ProtocolError as error:  # the scheduler refused the connection: nothing will come
                self.failure = str(error)
                return
            if snapshot is None:
                continue
            with self.changed:
                self.state.on_snapshot(snapshot, time.time())
                self.version += 1
                self.changed.notify_all()

    def wait_for_change(self, version: int, timeout: float) -> int:
        """The current version once it differs from ``version``, or after ``timeout`` (then unchanged)."""
        with self.changed:
            self.changed.wait_for(lambda: self.version != version or self._stopping.is_set(), timeout)
            return self.version

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()
        with self.changed:
            self.changed.notify_all()
        self._thread.join(timeout=5)


class DashboardServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a viewer's thread never keeps the program alive

    def __init__(self, host: str, port: int, feed: SnapshotFeed, token: Optional[str] = None) -> None:
        self.feed = feed
        self.token = token.encode() if token else None
        self.registry = snapshot_registry(SnapshotCollector(self._metrics_source))
        super().__init__((host, port), DashboardRequestHandler)

    def _metrics_source(self):
        with self.feed.changed:
            return self.feed.state.metrics_source

    def authorized(self, header: Optional[str]) -> bool:
        if self.token is None:
            return True
        if not header:
            return False
        scheme, _, credentials = header.partition(" ")
        offered = credentials.strip().encode()
        if scheme.lower() == "basic":
            try:
                offered = base64.b64decode(offered, validate=True).partition(b":")[2]
            except ValueError:
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(offered, self.token)


class DashboardRequestHandler(http.server.BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    server_version = "scaler_ui"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(_SEND_TIMEOUT_SECONDS)

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        path = self.path.split("?", 1)[0]
        if not self.server.authorized(self.headers.get("Authorization")):
            self._send(401, b"this scaler_ui needs its token\n", "text/plain; charset=utf-8",
                       {"WWW-Authenticate": 'Basic realm="scaler_ui", charset="UTF-8"'})  # fmt: skip
            return
        route = _ROUTES.get(path)
        if route is not None:
            route(self)
        elif path == "/task_chart.js":  # the chart the performance reports draw too (scaler.protocol)
            self._send(200, TASK_CHART_SCRIPT.encode(), "text/javascript; charset=utf-8")
        elif path in STATIC_FILES:
            name, content_type = STATIC_FILES[path]
            self._send(200, _static(name), content_type)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self._common_headers(headers)
        self.end_headers()
        self.wfile.write(body)

    def _common_headers(self, headers: Optional[Dict[str, str]] = None) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
        for name, value in (headers or {}).items():
            self.send_header(name, value)

    def _metrics(self) -> None:
        self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)

    def _state(self) -> None:
        feed = self.server.feed
        with feed.changed:
            body = feed.state.page_json.encode()
        self._send(200, body, "application/json")

    def _tasks(self) -> None:
        """The task runs kept (going on, then ended, newest first) that match the query's ``function`` (a part of
        its name), ``state`` and ``task`` (the start of its ID), at most ``limit``: ``{"matched", "tasks"}``."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        first = {name: values[0].strip() for name, values in query.items()}
        problem = _query_problem(first)
        if problem is not None:
            self._send(400, f"{problem}\n".encode(), "text/plain; charset=utf-8")
            return
        limit = max(0, min(int(first.get("limit", SEARCH_LIMIT)), KEPT_RUNS))
        feed = self.server.feed
        with feed.changed:
            arrivals = feed.state.tasks.newest_first()
        found = search(arrivals, first.get("function", ""), first.get("state", ""), first.get("task", ""), limit)
        self._send(200, json.dumps(found).encode(), "application/json")

    def _events(self) -> None:
        """Server-sent events: ``history`` (the chart points so far) and ``stream`` (the task runs of the last
        minutes) once, then ``state`` on each new snapshot."""
        feed = self.server.feed
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self._common_headers()
        self.end_headers()
        self.close_connection = True
        with feed.changed:
            version = feed.version
            history = json.dumps(list(feed.state.history))
            stream = json.dumps(feed.state.stream_window())
            page = feed.state.page_json
        try:
            self._event("history", history)
            self._event("stream", stream)
            self._event("state", page)
            while not feed.stopping:
                current = feed.wait_for_change(version, KEEPALIVE_SECONDS)
                if current == version:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                version = current
                with feed.changed:
                    page = feed.state.page_json
                self._event("state", page)
        except OSError:  # the viewer left, or stopped reading
            return

    def _event(self, name: str, data: str) -> None:
        self.wfile.write(f"event: {name}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the name http.server calls
        logger.debug(f"scaler_ui: {self.address_string()} {format % args}")


_TASK_QUERY = ("function", "state", "task", "limit")
_RUN_STATES = (*STATES.values(), RUNNING)


def _query_problem(query: Dict[str, str]) -> Optional[str]:
    """What is wrong with a ``/tasks.json`` query, in words (None: nothing): a typo must not read as no match."""
    unknown = sorted(set(query) - set(_TASK_QUERY))
    if unknown:
        return f"unknown parameter(s) {', '.join(unknown)}: /tasks.json takes {', '.join(_TASK_QUERY)}"
    if query.get("state", "") not in ("", *_RUN_STATES):
        return f"state {query['state']!r} is none of {', '.join(_RUN_STATES)}"
    if any(digit not in string.hexdigits for digit in query.get("task", "")):
        return f"task {query['task']!r} is not the start of a task ID (hexadecimal digits)"
    limit = query.get("limit", "0")
    if not (limit.isascii() and limit.isdigit()):
        return f"limit {query['limit']!r} is not a number"
    return None


_ROUTES: Dict[str, Callable[[DashboardRequestHandler], None]] = {
    "/events": DashboardRequestHandler._events,
    "/metrics": DashboardRequestHandler._metrics,
    "/state.json": DashboardRequestHandler._state,
    "/tasks.json": DashboardRequestHandler._tasks,
}
