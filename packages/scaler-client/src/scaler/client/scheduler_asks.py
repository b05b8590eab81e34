"""What the client asked the scheduler and waits for an answer to, without I/O (part of `ClientCore`): its
`SchedulerInfo` (`Client.scheduler_info`; answered in the order asked) and the workers' answers to a
`WorkerCall` (`Client.upload_file`, `run`, `restart`, `get_worker_logs`; answered by call ID, which is the
command's ID)."""

from __future__ import annotations

import collections
import logging
from typing import Any, Deque, List, Set

from scaler.client.client_events import AskInfo, AskWorkers, Reply, ToScheduler
from scaler.protocol.messages import SchedulerInfo, SchedulerInfoRequest, WorkerCallAnswer

logger = logging.getLogger(__name__)


class SchedulerAsks:
    def __init__(self, out: List[Any], address: str) -> None:
        self._out = out  # the core's effects
        self._address = address
        self._info: Deque[int] = collections.deque()  # commands waiting for a SchedulerInfo, in order
        self._calls: Set[int] = set()  # commands waiting for a WorkerCallAnswer

    def ask_info(self, ask: AskInfo, now: float) -> None:
        self._out.append(ToScheduler(SchedulerInfoRequest()))
        self._info.append(ask.command_id)

    def ask_workers(self, ask: AskWorkers, now: float) -> None:
        ask.call.call_id = ask.command_id
        self._out.append(ToScheduler(ask.call))
        self._calls.add(ask.command_id)

    def on_info(self, message: SchedulerInfo, now: float) -> None:
        if not self._info:
            logger.warning(f"Client: dropped unexpected SchedulerInfo from scheduler {self._address}")
            return
        self._out.append(Reply(self._info.popleft(), message))

    def on_workers_answer(self, message: WorkerCallAnswer, now: float) -> None:
        if message.call_id not in self._calls:
            logger.warning(f"Client: dropped unexpected WorkerCallAnswer from scheduler {self._address}")
            return
        self._calls.discard(message.call_id)
        self._out.append(Reply(message.call_id, message))

    def stop(self) -> List[int]:
        """The commands that wait (the client stops: each is answered with its error)."""
        waiting = [*self._info, *self._calls]
        self._info.clear()
        self._calls.clear()
        return waiting
