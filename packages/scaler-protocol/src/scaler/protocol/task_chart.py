"""The task stream chart that scaler_ui's page and the client's performance reports share.

`task_chart.js` (beside this module) draws runs on a canvas; `compact` writes runs as they arrived
(`task_runs.Arrival`, columns) in the form it reads (`decodeTaskRuns`): names once each, times as seconds from an
origin, so that many runs take little room in a page update or a report file, and cost little to write. `SCRIPT`
is the chart's code, which the monitor serves and a report inlines.
"""

from __future__ import annotations

import importlib.resources
from typing import Any, Dict, Hashable, List, Optional, Sequence

from scaler.protocol.ids import show
from scaler.protocol.task_runs import RUNNING, STATES, Arrival, position

CHART_STATES = [*STATES.values(), RUNNING]  # the order of TASK_CHART_STATES in task_chart.js
_STATE_CODES = {state: code for code, state in enumerate(CHART_STATES)}
_SUCCESS, _RUNNING = _STATE_CODES["success"], _STATE_CODES[RUNNING]

SCRIPT = (importlib.resources.files("scaler.protocol") / "task_chart.js").read_text(encoding="utf-8")


def compact(arrivals: Sequence[Arrival], origin: float, limit: Optional[int] = None) -> Dict[str, Any]:
    """The runs of ``arrivals`` as plain JSON values for `decodeTaskRuns`, their times in seconds from ``origin``
    (to the microsecond); past ``limit`` runs, an even sample of them (every second one, every third...)."""
    functions: Dict[Hashable, int] = {}
    workers: Dict[Hashable, int] = {}
    clients: Dict[Hashable, int] = {}
    columns: Dict[str, List[Any]] = {name: [] for name in ("task", "f", "w", "c", "s", "q", "b", "e")}
    errors: Dict[str, str] = {}
    total = sum(len(arrival) for arrival in arrivals)
    step = -(-total // limit) if limit and total > limit else 1
    seen = 0  # runs before this arrival, for the sample's phase
    for arrival in arrivals:
        runs = arrival.runs
        first = arrival.start + (-seen) % step
        seen += len(arrival)
        picked = range(first, len(runs.task_ids), step)
        if not picked:
            continue
        offset = len(columns["task"])  # of the first picked run in the columns
        names = [position(functions, name) for name in runs.function_names]
        owners = [position(clients, show(client)) for client in runs.client_ids]
        if runs.workers:
            places = [position(workers, show(each)) for each in runs.worker_ids]
            columns["w"] += [places[runs.workers[i]] for i in picked]
        else:
            columns["w"] += [position(workers, arrival.worker)] * len(picked)
        ends, durations, queued = arrival.ends(), runs.run_seconds, runs.queued_seconds
        starts = [ends[i] - durations[i] - origin for i in picked]
        columns["task"] += [runs.task_ids[i].hex() for i in picked]
        columns["f"] += [names[runs.functions[i]] for i in picked]
        columns["c"] += [owners[runs.clients[i]] for i in picked]
        columns["s"] += [_SUCCESS if arrival.ended else _RUNNING] * len(picked)
        columns["b"] += [round(start, 6) for start in starts]
        columns["q"] += [round(start - queued[i], 6) for start, i in zip(starts, picked, strict=True)]
        columns["e"] += [round(ends[i] - origin, 6) for i in picked] if arrival.ended else [None] * len(picked)
        for i, (_, error) in arrival.failures.items():
            if i >= first and (i - first) % step == 0:
                at = offset + (i - first) // step
                columns["s"][at] = _STATE_CODES[arrival.state(i)]
                if error:
                    errors[str(at)] = error
    return {
        "origin": origin,
        "functions": list(functions),
        "workers": list(workers),
        "clients": list(clients),
        **columns,
        "error": errors,
    }
