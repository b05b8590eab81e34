"""What a performance report computes and how it writes it: per-function totals, each worker's utilisation (runs
that overlap count once), and a page whose task-written text (function names, errors) is text, never markup."""

from __future__ import annotations

import json
import re

import pytest

from scaler.client.performance_report import function_totals, report_html, worker_utilisation
from scaler.protocol.messages import TaskRuns, TaskStatus
from scaler.protocol.task_runs import Arrival, TaskRun


def run(function: str, worker: str, started: float, ended: float, state: str = "success", error: str = "") -> TaskRun:
    return TaskRun("ab" * 16, function, "C|h|1|cc", worker, state, started - 1.0, started, ended, error)


RUNS = [
    run("mod.f", "W|a", 1.0, 3.0),
    run("mod.f", "W|a", 2.0, 4.0),  # overlaps the one before (a task waiting for the tasks it submitted)
    run("mod.g", "W|b", 5.0, 5.5, "failed", "ValueError: bad"),
    run("mod.g", "W|b", 6.0, 7.0),
]


def test_totals_per_function_most_time_first():
    totals = function_totals(RUNS)
    assert [(t.function, t.runs, t.seconds, t.longest, t.failures) for t in totals] == [
        ("mod.f", 2, 4.0, 2.0, 0),
        ("mod.g", 2, 1.5, 1.0, 1),
    ]


def test_utilisation_is_the_share_of_the_block_some_run_of_the_worker_went_on():
    assert worker_utilisation(RUNS, 0.0, 10.0) == [("W|a", 2, 3.0, pytest.approx(0.3)), ("W|b", 2, 1.5, 0.15)]
    assert worker_utilisation(RUNS, 2.5, 3.5)[0] == ("W|a", 2, 1.0, 1.0)  # cut to the block


def test_the_page_holds_its_runs_and_shows_what_tasks_wrote_as_text():
    error = "ValueError: </script><script>alert(1)</script>"
    arrival = Arrival(
        TaskRuns(["mod.<b>bold</b>"], [b"C|h|1|cc"], [], [b"\x07" * 16], [0], [0], [], [0.5], [1.0], [8.0], [0],
                 [TaskStatus.FAILED], [error]),
        10.0,
        b"W|a",
    )  # fmt: skip
    hostile = list(arrival.records())
    page = report_html([*RUNS, *hostile], [arrival], 0.0, 10.0, "C|h|1|cc")
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<script>alert(1)" not in page
    (data,) = re.findall(r'<script type="application/json" id=runs>(.*?)</script>', page, re.S)
    runs = json.loads(data)
    assert runs["functions"] == ["mod.<b>bold</b>"] and runs["error"] == {"0": error}
    assert "ValueError: &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page  # in the failures table
