"""Tasks that need capabilities no worker has.

Under every allocation policy a task runs only on a worker that offers every capability it needs
(`TaskRouting` queues it apart until one has room). When no connected worker offers them, and no worker manager
can start one, the task would wait for ever without a word: `MissingCapabilities` looks at the queue at each
tick and, once such tasks have had no capable worker for `GRACE_SECONDS` (workers that are starting have said
Hello by then), logs a warning and lets them wait for one to join (``--missing-capabilities wait``, the
default), or rejects them (``fail``): each task's future raises `TaskRejectedError` naming the capabilities.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, FrozenSet

from scaler.protocol.security import RefusalLog
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.task_routing import TaskRouting

GRACE_SECONDS = 3.0  # tasks wait this long for a capable worker to say Hello before they are warned of or failed
CHOICES = ("wait", "fail")

logger = logging.getLogger(__name__)


class MissingCapabilities:
    def __init__(self, choice: str, routing: TaskRouting, can_start: Callable[[FrozenSet[str]], bool]) -> None:
        if choice not in CHOICES:
            raise ValueError(f"missing capabilities: {choice!r} is not one of {', '.join(CHOICES)}")
        self._fail = choice == "fail"
        self._routing = routing
        self._can_start = can_start  # whether a worker manager can start a worker that offers them
        self._since: Dict[FrozenSet[str], float] = {}  # needs -> since when queued tasks need them and none offers
        self._log = RefusalLog()  # a warning per set of capabilities: the first, then one a minute

    def on_tick(self, now: float, out: Outbox) -> None:
        routing = self._routing
        needing = {needs: count for needs, count in routing.queued_by_needs().items() if needs}
        for needs in [needs for needs in self._since if needs not in needing]:
            del self._since[needs]
        for needs, count in needing.items():
            if routing.offers(needs) or self._can_start(needs):
                self._since.pop(needs, None)
                continue
            if now - self._since.setdefault(needs, now) < GRACE_SECONDS:
                continue
            names = ",".join(sorted(needs))
            if self._fail:
                reason = (
                    f"the scheduler rejected this task: no worker offers the capabilities it needs ({names}), and "
                    "no worker manager can start one (scaler_scheduler --missing-capabilities fail)"
                )
                count = routing.reject_queued(needs, reason, out)
                what = f"rejected {count} task(s) that need"
            else:
                what = f"{count} task(s) wait for a worker that offers"
            if self._log.should_log(names, now) is not None:
                also = "" if self._fail else "; they run when one joins (--missing-capabilities fail rejects them)"
                logger.warning(f"Scheduler: {what} capabilities {names}: no worker has them{also}")
