"""The OpenGRIS adapter webhook as one more worker manager, without I/O (``scaler_scheduler --adapter-webhook-url``).

The standard (docs/scaling.md, "The webhook"): one endpoint, ``POST /`` with a JSON body whose ``action`` is
``get_worker_adapter_info`` (Scaler's extension: the groups the adapter can start), ``start_worker_group`` or
``shutdown_worker_group``; a JSON answer, 200 on success, ``{"error": ...}`` with 4xx/5xx otherwise (429: no
capacity now). The scheduler decides for the webhook as for any manager (`worker_managers.py`): this module
keeps what it started through the webhook, makes its heartbeat from that, and turns each command ("you
should have N groups; stop these") into calls, as `CallWebhook` effects. The shell makes each call off the
event loop, bounded by a timeout, and hands the answer back as a `WebhookAnswer` event.

A call that fails (no answer in time, refused, a 4xx or 5xx) is logged and tried again after a delay that
doubles up to `MAX_RETRY_SECONDS`. A group the adapter started whose workers have not connected within
`START_TIMEOUT_SECONDS` is shut down.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show_group

logger = logging.getLogger(__name__)

INFO = "get_worker_adapter_info"
START = "start_worker_group"
SHUTDOWN = "shutdown_worker_group"

START_TIMEOUT_SECONDS = 60.0  # a started group none of whose workers connected by then is shut down
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
UNLIMITED_GROUPS = 2**31 - 1  # the adapter's max_worker_groups of -1

_S = m.WorkerGroupState


@dataclass(slots=True)
class CallWebhook:
    """Effect: POST ``body`` (JSON) to the webhook, and feed the answer back as `WebhookAnswer(call_id, ...)`."""

    call_id: int
    body: Dict[str, Any]


@dataclass(slots=True)
class WebhookAnswer:
    """Event: the answer to `CallWebhook` ``call_id``: its HTTP status and JSON body (status 0: no answer, and
    ``error`` says why)."""

    call_id: int
    status: int
    body: Dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass(slots=True)
class _Group:
    state: m.WorkerGroupState
    workers: int
    started: float
    calling: bool = False  # a call about it is in flight
    detail: str = ""


class WebhookManager:
    def __init__(self, url: str) -> None:
        self.url = url
        self.manager_id = b"M|webhook|" + url.encode()
        self._info: Optional[Tuple[int, int, List[m.Capability]]] = None  # max groups, workers each, capabilities
        self._asking_info = False
        self._groups: Dict[bytes, _Group] = {}  # a start in flight holds a placeholder ID until it is answered
        self._calls: Dict[int, Tuple[str, bytes]] = {}  # call ID -> (action, group)
        self._ids = itertools.count(1)
        self._desired = 0
        self._stop: List[bytes] = []
        self._retry_at = 0.0
        self._retry_delay = 0.0
        self._now = 0.0

    def heartbeat(self) -> Optional[m.WorkerManagerHeartbeat]:
        """What the webhook can start and what runs through it (None until the adapter said what it can)."""
        if self._info is None:
            return None
        max_groups, per_group, capabilities = self._info
        groups = [m.WorkerGroup(group_id, g.state, g.workers, g.detail) for group_id, g in self._groups.items()]
        running = sum(g.workers for g in self._groups.values() if g.state is _S.RUNNING)
        return m.WorkerManagerHeartbeat(
            min(max_groups * per_group, UNLIMITED_GROUPS), running, per_group, 0, max_groups, capabilities, groups,
            "webhook",
        )  # fmt: skip

    def command(self, command: m.WorkerManagerCommand) -> List[CallWebhook]:
        self._desired = command.desired_groups
        self._stop = list(command.stop_groups)
        return self._act()

    def on_tick(self, now: float, connected: Callable[[bytes], int]) -> List[CallWebhook]:
        self._now = now
        calls: List[CallWebhook] = []
        if self._info is None and not self._asking_info and now >= self._retry_at:
            self._asking_info = True
            calls.append(self._call(INFO, b"", {}))
        for group_id, group in self._groups.items():
            late = group.state is _S.RUNNING and now - group.started > START_TIMEOUT_SECONDS
            if late and connected(group_id) == 0:
                logger.warning(
                    f"Scheduler: webhook group {show_group(group_id)} has no worker connected "
                    f"{START_TIMEOUT_SECONDS:g}s after it started: shutting it down"
                )
                group.state = _S.STOPPING
        return calls + self._act()

    def on_answer(self, answer: WebhookAnswer, now: float) -> List[CallWebhook]:
        self._now = now
        action, group_id = self._calls.pop(answer.call_id, ("", b""))
        ok = answer.status == 200
        if not ok and not (action == SHUTDOWN and answer.status == 404):  # 404 on shutdown: gone already
            self._failed(action, group_id, answer)
        elif action == INFO:
            self._asking_info = False
            self._on_info(answer.body)
        elif action == START:
            self._on_started(group_id, answer.body)
        elif action == SHUTDOWN:
            self._groups.pop(group_id, None)
            logger.info(f"Scheduler: webhook shut down group {show_group(group_id)}")
        return self._act()

    # ----------------------------------------------------------------- calls

    def _act(self) -> List[CallWebhook]:
        """The calls that bring what runs to what was asked: starts while fewer groups are starting or running
        than desired, a shutdown for each group to stop (none while retrying after a failure)."""
        if self._info is None or self._now < self._retry_at:
            return []
        calls = []
        stop = set(self._stop)
        for group_id in stop:
            group = self._groups.get(group_id)
            if group is not None:
                group.state = _S.STOPPING
        for group_id, group in self._groups.items():
            if group.state is _S.STOPPING and not group.calling and not group_id.startswith(self._placeholder):
                group.calling = True
                calls.append(self._call(SHUTDOWN, group_id, {"worker_group_id": group_id.decode(errors="replace")}))
        counted = sum(g.state is not _S.STOPPING for g in self._groups.values())
        max_groups = self._info[0]
        for _ in range(min(self._desired, max_groups) - counted):
            call_id = next(self._ids)
            placeholder = self._placeholder + str(call_id).encode()
            self._groups[placeholder] = _Group(_S.STARTING, self._info[1], self._now, True, "starting")
            calls.append(self._call(START, placeholder, {}, call_id))
        return calls

    @property
    def _placeholder(self) -> bytes:
        return self.manager_id + b"/starting-"

    def _call(self, action: str, group_id: bytes, extra: Dict[str, Any], call_id: int = 0) -> CallWebhook:
        call_id = call_id or next(self._ids)
        self._calls[call_id] = (action, group_id)
        return CallWebhook(call_id, {"action": action, **extra})

    def _failed(self, action: str, group_id: bytes, answer: WebhookAnswer) -> None:
        why = answer.error or f"HTTP {answer.status}: {answer.body.get('error', answer.body) if answer.body else ''}"
        self._retry_delay = min(MAX_RETRY_SECONDS, max(FIRST_RETRY_SECONDS, self._retry_delay * 2))
        self._retry_at = self._now + self._retry_delay
        logger.warning(
            f"Scheduler: webhook {self.url}: {action} failed ({why}); trying again in {self._retry_delay:g}s"
        )
        if action == INFO:
            self._asking_info = False
        elif action == START:
            self._groups.pop(group_id, None)
        elif action == SHUTDOWN and group_id in self._groups:
            self._groups[group_id].calling = False

    def _on_info(self, body: Dict[str, Any]) -> None:
        try:
            max_groups = int(body["max_worker_groups"])
            per_group = int(body["workers_per_group"])
            capabilities = [m.Capability(str(k), int(v)) for k, v in dict(body.get("base_capabilities") or {}).items()]
        except (KeyError, TypeError, ValueError) as error:
            self._failed(INFO, b"", WebhookAnswer(0, 200, body, f"malformed adapter info: {error!r}"))
            return
        if per_group < 1:
            self._failed(INFO, b"", WebhookAnswer(0, 200, body, f"workers_per_group {per_group} is not positive"))
            return
        self._info = (UNLIMITED_GROUPS if max_groups < 0 else max_groups, per_group, capabilities)
        self._retry_delay = 0.0
        logger.info(
            f"Scheduler: webhook {self.url} starts groups of {per_group} worker(s), at most "
            f"{'unlimited' if max_groups < 0 else max_groups}"
        )

    def _on_started(self, placeholder: bytes, body: Dict[str, Any]) -> None:
        group = self._groups.pop(placeholder, None)
        group_id = str(body.get("worker_group_id") or "").encode()
        if not group_id:
            self._failed(START, b"", WebhookAnswer(0, 200, body, "the answer names no worker_group_id"))
            return
        self._retry_delay = 0.0
        workers = body.get("worker_ids")
        count = len(workers) if isinstance(workers, list) and workers else (group.workers if group else 1)
        stopping = group is not None and group.state is _S.STOPPING  # stopped while it started
        self._groups[group_id] = _Group(_S.STOPPING if stopping else _S.RUNNING, count, self._now, False, "webhook")
        logger.info(f"Scheduler: webhook started group {show_group(group_id)} of {count} worker(s)")
