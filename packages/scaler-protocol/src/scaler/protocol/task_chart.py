"""The task stream chart that scaler_ui's page and the client's performance reports share.

`task_chart.js` (beside this module) draws runs on a canvas; `compact` writes runs (`task_runs.TaskRun`) in the
form it reads (`decodeTaskRuns`): names once each, times as seconds from an origin, so that many runs take little
room in a page update or a report file. `SCRIPT` is the chart's code, which the monitor serves and a report
inlines.
"""

from __future__ import annotations

import importlib.resources
from typing import Any, Dict, Hashable, List, Sequence

from scaler.protocol.task_runs import RUNNING, STATES, TaskRun, position

CHART_STATES = [*STATES.values(), RUNNING]  # the order of TASK_CHART_STATES in task_chart.js
_STATE_CODES = {state: code for code, state in enumerate(CHART_STATES)}

SCRIPT = (importlib.resources.files("scaler.protocol") / "task_chart.js").read_text(encoding="utf-8")


def compact(runs: Sequence[TaskRun], origin: float) -> Dict[str, Any]:
    """``runs`` as plain JSON values for `decodeTaskRuns`, their times in seconds from ``origin`` (to the
    microsecond)."""
    functions: Dict[Hashable, int] = {}
    workers: Dict[Hashable, int] = {}
    clients: Dict[Hashable, int] = {}
    columns: Dict[str, List[Any]] = {name: [] for name in ("task", "f", "w", "c", "s", "q", "b", "e")}
    errors: Dict[str, str] = {}
    for i, run in enumerate(runs):
        columns["task"].append(run.task_id)
        columns["f"].append(position(functions, run.function))
        columns["w"].append(position(workers, run.worker))
        columns["c"].append(position(clients, run.client))
        columns["s"].append(_STATE_CODES[run.state])
        columns["q"].append(round(run.queued - origin, 6))
        columns["b"].append(round(run.started - origin, 6))
        columns["e"].append(None if run.ended is None else round(run.ended - origin, 6))
        if run.error:
            errors[str(i)] = run.error
    return {
        "origin": origin,
        "functions": list(functions),
        "workers": list(workers),
        "clients": list(clients),
        **columns,
        "error": errors,
    }
