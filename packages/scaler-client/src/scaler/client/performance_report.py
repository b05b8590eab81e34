"""`Client.performance_report(filename)`: one HTML file, written when the block ends, that opens anywhere offline.

It holds everything it shows (styles, the chart's script, the runs as JSON): the task stream of the tasks the
block ran (`task_stream.TaskStream`: this client's, and those they submitted), per-function totals (runs, time,
failures), each worker's utilisation (the share of the block its runs covered) and the time range. Nothing in
it is fetched from anywhere, and what tasks wrote (function names, error texts) is shown as text, never as
markup.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from scaler.client.task_stream import TaskStream
from scaler.protocol.task_chart import SCRIPT, compact
from scaler.protocol.task_runs import RUNNING, Arrival, TaskRun

FAILURES_LISTED = 100
_OK = ("success", RUNNING)


class PerformanceReport:
    """``with client.performance_report("report.html"): ...``: the task stream is open while the block runs; the
    file is written as it ends, also when the block raised."""

    def __init__(self, stream: TaskStream, filename: str, client: str) -> None:
        self._stream = stream
        self.filename = filename
        self._client = client

    def __enter__(self) -> PerformanceReport:
        self._stream.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self._stream.__exit__(*exc_info)
        finally:
            stream = self._stream
            opened = stream.opened or time.time()
            closed = stream.closed or time.time()
            page = report_html(stream.records, stream.arrivals, opened, closed, self._client, stream.missing)
            with open(self.filename, "w", encoding="utf-8") as file:
                file.write(page)


@dataclass
class FunctionTotals:
    function: str
    runs: int = 0
    seconds: float = 0.0
    longest: float = 0.0
    failures: int = 0


def function_totals(runs: Sequence[TaskRun]) -> List[FunctionTotals]:
    """Per function, most time first: its runs, their total and longest time, how many did not succeed."""
    totals: Dict[str, FunctionTotals] = {}
    for run in runs:
        entry = totals.setdefault(run.function, FunctionTotals(run.function))
        seconds = (run.ended if run.ended is not None else run.started) - run.started
        entry.runs += 1
        entry.seconds += seconds
        entry.longest = max(entry.longest, seconds)
        entry.failures += run.state not in _OK
    return sorted(totals.values(), key=lambda entry: -entry.seconds)


def worker_utilisation(runs: Sequence[TaskRun], opened: float, closed: float) -> List[Tuple[str, int, float, float]]:
    """Per worker: (worker, runs, seconds some run of it went on within the block, that as a share of the block)."""
    spans: Dict[str, List[Tuple[float, float]]] = {}
    for run in runs:
        end = run.ended if run.ended is not None else closed
        spans.setdefault(run.worker, []).append((max(run.started, opened), min(end, closed)))
    block = max(closed - opened, 1e-9)
    rows = []
    for worker, intervals in sorted(spans.items()):
        busy, reach = 0.0, opened
        for start, end in sorted(intervals):  # the union of the intervals: overlapping runs count once
            if end > reach:
                busy += end - max(start, reach)
                reach = end
        rows.append((worker, len(intervals), busy, busy / block))
    return rows


def report_html(
    runs: Sequence[TaskRun], arrivals: Sequence[Arrival], opened: float, closed: float, client: str, missing: int = 0
) -> str:
    """The whole report page: ``runs`` as records, and as they arrived (for the chart)."""
    e = html.escape
    failed = [run for run in runs if run.state not in _OK]
    functions = "".join(
        f"<tr><td class=text>{e(t.function)}</td><td>{t.runs:,}</td><td>{_duration(t.seconds)}</td>"
        f"<td>{_duration(t.seconds / t.runs)}</td><td>{_duration(t.longest)}</td><td>{t.failures:,}</td></tr>"
        for t in function_totals(runs)
    )
    workers = "".join(
        f"<tr><td class=text>{e(worker)}</td><td>{count:,}</td><td>{_duration(busy)}</td><td>{share:.1%}</td></tr>"
        for worker, count, busy, share in worker_utilisation(runs, opened, closed)
    )
    failures = "".join(
        f"<tr><td class=text>{e(run.function)}</td><td class=text>{e(run.state)}</td><td class=text>"
        f"{e(run.task_id)}</td><td class=text>{e(run.worker)}</td><td class=text>{e(run.error)}</td></tr>"
        for run in failed[:FAILURES_LISTED]
    )
    more = f"<p class=muted>and {len(failed) - FAILURES_LISTED:,} more</p>" if len(failed) > FAILURES_LISTED else ""
    note = (
        f"<p class=warning>{missing:,} task(s) that succeeded during the block have no run here: their worker is "
        "older than protocol 1.8, or left before it reported them.</p>"
        if missing
        else ""
    )
    data = json.dumps(compact(arrivals, opened)).replace("<", "\\u003c")  # no markup, not even inside the script
    started, ended = _clock(opened), _clock(closed)
    return _PAGE.format(
        client=e(client),
        started=started,
        ended=ended,
        duration=_duration(closed - opened),
        runs=f"{len(runs):,}",
        tasks=f"{len({run.task_id for run in runs}):,}",
        failed=f"{len(failed):,}",
        workers_count=f"{len({run.worker for run in runs}):,}",
        note=note,
        functions=functions or _NONE.format(columns=6),
        workers=workers or _NONE.format(columns=4),
        failures=failures or _NONE.format(columns=5),
        more=more,
        data=data,
        closed=repr(closed),
        script=SCRIPT,
        style=_STYLE,
    )


def _duration(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def _clock(seconds: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "–"


_NONE = "<tr><td class=text colspan={columns}>none</td></tr>"

_STYLE = """
body { margin: 0; padding: 0 24px 24px; background: #f6f7f9; color: #1d2430;
       font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 20px; margin: 16px 0 4px; } h2 { font-size: 15px; margin: 20px 0 8px; }
.muted { color: #6b7484; } .warning { color: #991b1b; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin-top: 8px; }
.card { background: #fff; border: 1px solid #e2e5ea; border-radius: 8px; padding: 8px 12px; min-width: 110px; }
.card .label { color: #6b7484; font-size: 12px; } .card .value { font-size: 18px; }
figure { margin: 0; background: #fff; border: 1px solid #e2e5ea; border-radius: 8px; padding: 8px 12px; }
canvas { width: 100%; display: block; }
table { border-collapse: collapse; background: #fff; border: 1px solid #e2e5ea; }
th, td { padding: 4px 8px; text-align: right; border-bottom: 1px solid #e2e5ea; font-variant-numeric: tabular-nums; }
th { background: #eef0f4; font-size: 12px; } td.text, th.text { text-align: left; }
.columns { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 16px; }
.tooltip { position: absolute; display: none; background: #1d2430; color: #fff; padding: 6px 8px;
           border-radius: 6px; font-size: 12px; max-width: 480px; pointer-events: none; }
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Scaler performance report</title>
<style>{style}</style>
</head>
<body>
<h1>Scaler performance report</h1>
<div class=muted>client {client} · from {started} to {ended} ({duration})</div>
<div class=cards>
  <div class=card><div class=label>task runs</div><div class=value id=total-runs>{runs}</div></div>
  <div class=card><div class=label>tasks</div><div class=value>{tasks}</div></div>
  <div class=card><div class=label>failed runs</div><div class=value id=total-failed>{failed}</div></div>
  <div class=card><div class=label>workers</div><div class=value>{workers_count}</div></div>
  <div class=card><div class=label>time range</div><div class=value>{duration}</div></div>
</div>
{note}
<h2>Task stream <span class=muted>(wheel: zoom, drag: move, double-click: all)</span></h2>
<figure><canvas id=task-stream></canvas></figure>
<div class=columns>
<div><h2>Functions</h2><table id=functions><thead><tr><th class=text>function</th><th>runs</th><th>total time</th>
<th>mean</th><th>longest</th><th>failed</th></tr></thead><tbody>{functions}</tbody></table></div>
<div><h2>Worker utilisation</h2><table id=workers><thead><tr><th class=text>worker</th><th>runs</th>
<th>busy</th><th>of the time range</th></tr></thead><tbody>{workers}</tbody></table></div>
</div>
<h2>Failures</h2>
<table id=failures><thead><tr><th class=text>function</th><th class=text>state</th><th class=text>task</th>
<th class=text>worker</th><th class=text>error</th></tr></thead><tbody>{failures}</tbody></table>{more}
<div class=tooltip id=tooltip></div>
<script type="application/json" id=runs>{data}</script>
<script>
{script}
const chart = new TaskChart(document.getElementById("task-stream"), {{tooltip: document.getElementById("tooltip")}});
chart.setRuns(decodeTaskRuns(JSON.parse(document.getElementById("runs").textContent)), {closed});
window.addEventListener("resize", () => chart.draw());
</script>
</body>
</html>
"""
