"""The scheduler's calls to a webhook (`webhook_calls.py`) against real HTTP servers in the test's process: every
call ends within its timeout, whatever the server does, and says what it got."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, List

import pytest

from scaler.scheduler.webhook_calls import WebhookCaller, check_webhook_url, post_json
from scaler.scheduler.webhook_manager import CallWebhook, WebhookAnswer


@pytest.fixture
def webhook() -> Iterator[str]:
    """POST / answers by its body's action: "ok" 200 with the request echoed, "fail" 500, "hang" nothing,
    "garbage" 200 with a body that is not JSON."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            action = request["action"]
            if action == "hang":
                release.wait(30)
                return
            status, body = {"ok": (200, json.dumps({"echo": request}).encode()),
                            "fail": (500, b'{"error": "boom"}'), "garbage": (200, b"<html>")}[action]  # fmt: skip
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_answers_errors_and_silence_each_come_back_within_the_timeout(webhook):
    assert post_json(webhook, {"action": "ok", "n": 1}, 5.0) == (200, {"echo": {"action": "ok", "n": 1}}, "")
    assert post_json(webhook, {"action": "fail"}, 5.0) == (500, {"error": "boom"}, "")
    assert post_json(webhook, {"action": "hang"}, 0.5) == (0, {}, "no answer within 0.5s")
    status, body, error = post_json(webhook, {"action": "garbage"}, 5.0)
    assert (status, body) == (0, {}) and "JSONDecodeError" in error
    status, body, error = post_json("http://127.0.0.1:1/", {"action": "ok"}, 5.0)
    assert status == 0 and error.startswith("cannot reach it")


def test_the_caller_delivers_each_answer_from_its_own_threads(webhook):
    answers: List[WebhookAnswer] = []
    done = threading.Event()

    def deliver(answer: WebhookAnswer) -> None:
        answers.append(answer)
        if len(answers) == 2:
            done.set()

    caller = WebhookCaller(webhook, 0.5, deliver)
    try:
        caller.call(CallWebhook(1, {"action": "hang"}))  # a slow webhook does not hold the other calls back
        caller.call(CallWebhook(2, {"action": "ok"}))
        assert done.wait(10)
    finally:
        caller.close()
    assert [(a.call_id, a.status) for a in answers] == [(2, 200), (1, 0)]


def test_only_http_urls_are_webhooks():
    assert check_webhook_url("https://h:8080/hook") == "https://h:8080/hook"
    for bad in ("ftp://h/", "h:8080", "http://", "tcp://127.0.0.1:1"):
        with pytest.raises(ValueError, match="is not an http:// or https:// URL"):
            check_webhook_url(bad)
