"""The scheduler's HTTP calls to an OpenGRIS adapter webhook: made on threads of their own, never on the event
loop, each bounded by a timeout (the shell's side of `webhook_manager.py`)."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Tuple

from scaler.scheduler.webhook_manager import CallWebhook, WebhookAnswer

logger = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 1 << 20
_THREADS = 4  # calls at once; more wait their turn


def check_webhook_url(url: str) -> str:
    """``url`` if it is an http:// or https:// URL with a host, else `ValueError` saying why."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL of a worker adapter's webhook")
    return url


class WebhookCaller:
    """POSTs each `CallWebhook`'s body to ``url`` on a thread and hands the answer to ``deliver`` (which the
    scheduler makes thread-safe: it schedules the answer on its event loop)."""

    def __init__(self, url: str, timeout: float, deliver: Callable[[WebhookAnswer], None]) -> None:
        self.url = check_webhook_url(url)
        self.timeout = timeout
        self._deliver = deliver
        self._executor = ThreadPoolExecutor(_THREADS, thread_name_prefix="scaler-webhook")

    def call(self, effect: CallWebhook) -> None:
        future = self._executor.submit(post_json, self.url, effect.body, self.timeout)
        future.add_done_callback(lambda done: self._answered(effect.call_id, done))

    def _answered(self, call_id: int, done: Future) -> None:
        try:
            status, body, error = done.result()
        except Exception as failure:  # noqa: BLE001 - whatever broke, the core hears of a failed call
            status, body, error = 0, {}, f"{type(failure).__name__}: {failure}"
        self._deliver(WebhookAnswer(call_id, status, body, error))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def post_json(url: str, body: Dict[str, Any], timeout: float) -> Tuple[int, Dict[str, Any], str]:
    """POST ``body`` as JSON; (HTTP status, JSON answer, "") or (0, {}, why there is no answer). The whole call,
    connecting and reading the answer included, ends within about ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _read_json(response, deadline), ""
    except urllib.error.HTTPError as error:
        try:
            return error.code, _read_json(error, deadline), ""
        except (OSError, ValueError):
            return error.code, {}, ""
    except urllib.error.URLError as error:
        return 0, {}, f"cannot reach it: {error.reason}"
    except (OSError, ValueError) as error:  # a timeout (TimeoutError is an OSError), a reset, a bad answer
        if isinstance(error, TimeoutError):
            return 0, {}, f"no answer within {timeout:g}s"
        return 0, {}, f"{type(error).__name__}: {error}"


def _read_json(response: Any, deadline: float) -> Dict[str, Any]:
    chunks = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer took too long")
        chunk = response.read(65536)
        if not chunk:
            break
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ValueError(f"the answer is over {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    text = b"".join(chunks)
    if not text.strip():
        return {}
    answer = json.loads(text)
    if not isinstance(answer, dict):
        raise ValueError("the answer is not a JSON object")
    return answer
