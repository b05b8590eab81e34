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
    """The runs of ``arrivals`` (the last ``limit`` of them, if given) as plain JSON values for `decodeTaskRuns`,
    their times in seconds from ``origin`` (to the microsecond)."""
    functions: Dict[Hashable, int] = {}
    workers: Dict[Hashable, int] = {}
    clients: Dict[Hashable, int] = {}
    columns: Dict[str, List[Any]] = {name: [] for name in ("task", "f", "w", "c", "s", "q", "b", "e")}
    errors: Dict[str, str] = {}
    skip = max(0, sum(len(arrival) for arrival in arrivals) - limit) if limit is not None else 0
    for arrival in arrivals:
        runs = arrival.runs
        first = arrival.start + skip
        skip = max(0, first - len(runs.task_ids))
        picked = range(first, len(runs.task_ids))
        if not picked:
            continue
        offset = len(columns["task"]) - first  # a run's position in the columns, less its position in ``runs``
        names = [position(functions, name) for name in runs.function_names]
        owners = [position(clients, show(client)) for client in runs.client_ids]
        if runs.workers:
            places = [position(workers, show(each)) for each in runs.worker_ids]
            columns["w"].extend(places[runs.workers[i]] for i in picked)
        else:
            columns["w"].extend([position(workers, arrival.worker)] * len(picked))
        ends = arrival.ends()
        columns["task"].extend(runs.task_ids[i].hex() for i in picked)
        columns["f"].extend(names[runs.functions[i]] for i in picked)
        columns["c"].extend(owners[runs.clients[i]] for i in picked)
        columns["s"].extend([_SUCCESS if arrival.ended else _RUNNING] * len(picked))
        columns["b"].extend(round(ends[i] - runs.run_seconds[i] - origin, 6) for i in picked)
        columns["q"].extend(round(ends[i] - runs.run_seconds[i] - runs.queued_seconds[i] - origin, 6) for i in picked)
        columns["e"].extend((round(ends[i] - origin, 6) if arrival.ended else None) for i in picked)
        for i, (_, error) in arrival.failures.items():
            if i >= first:
                columns["s"][offset + i] = _STATE_CODES[arrival.state(i)]
                if error:
                    errors[str(offset + i)] = error
    return {
        "origin": origin,
        "functions": list(functions),
        "workers": list(workers),
        "clients": list(clients),
        **columns,
        "error": errors,
    }
