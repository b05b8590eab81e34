"""Task runs as columns (protocol 1.8): what is checked in a peer's runs, how runs of several messages are gathered,
and how a reader places them on its own clock."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.protocol import messages as m
from scaler.protocol.errors import ProtocolError
from scaler.protocol.task_runs import Arrival, RunColumns, TaskRun, check

CLIENT = b"C|host|1|aa"
WORKER = b"W|host|2|bb"


def two_runs(function: str = "module.square") -> m.TaskRuns:
    return m.TaskRuns(
        function_names=[function],
        client_ids=[CLIENT],
        task_ids=[b"\x01" * 16, b"\x02" * 16],
        functions=[0, 0],
        clients=[0, 0],
        queued_seconds=[0.5, 0.25],
        run_seconds=[2.0, 1.0],
        ended_seconds_ago=[1.0, 0.0],
        failed_runs=[1],
        failed_statuses=[m.TaskStatus.FAILED],
        error_texts=["ValueError: bad"],
    )


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"run_seconds": [1.0]}, "runSeconds has 1 entries for 2 runs"),
        ({"functions": [0, 1]}, "functions refers to entry 1 of 1"),
        ({"clients": [0, 3]}, "clients refers to entry 3 of 1"),
        ({"failed_runs": [2]}, "failedRuns refers to entry 2 of 2"),
        ({"error_texts": []}, "failedRuns, failedStatuses and errorTexts differ in length"),
    ],
)
def test_runs_that_do_not_add_up_are_refused_naming_what_is_wrong(change, problem):
    with pytest.raises(ProtocolError, match=problem):
        check(dataclasses.replace(two_runs(), **change), ended=True)


def test_a_reader_places_the_durations_from_when_the_runs_arrived():
    first, second = Arrival(two_runs(), 100.0, WORKER).records()
    assert first == TaskRun("01" * 16, "module.square", "C|host|1|aa", "W|host|2|bb", "success", 96.5, 97.0, 99.0, "")
    assert (second.state, second.error, second.ended, second.started) == ("failed", "ValueError: bad", 100.0, 99.0)


def test_gathered_runs_keep_their_end_times_and_failures_whichever_message_they_came_in():
    gathered = RunColumns()
    gathered.add(two_runs(), 10.0, WORKER)
    gathered.add(two_runs("module.cube"), 11.0, b"W|host|3|cc", only=[1])
    runs = gathered.take(12.0)
    check(runs, ended=True)
    placed = list(Arrival(runs, 50.0).records())
    assert [(r.function, r.worker, r.state, r.ended) for r in placed] == [
        ("module.square", "W|host|2|bb", "success", 47.0),
        ("module.square", "W|host|2|bb", "failed", 48.0),
        ("module.cube", "W|host|3|cc", "failed", 49.0),
    ]
    assert len(gathered) == 0  # taken: it starts anew


def test_the_chart_form_names_each_function_worker_and_client_once_and_keeps_failures_in_place():
    from scaler.protocol.task_chart import CHART_STATES, compact

    first, second = Arrival(two_runs(), 100.0, WORKER), Arrival(two_runs("module.cube"), 101.0, b"W|host|3|cc")
    chart = compact([first, second], 90.0)
    assert chart["functions"] == ["module.square", "module.cube"] and chart["workers"] == ["W|host|2|bb", "W|host|3|cc"]
    assert chart["clients"] == ["C|host|1|aa"] and chart["f"] == [0, 0, 1, 1] and chart["w"] == [0, 0, 1, 1]
    assert [CHART_STATES[code] for code in chart["s"]] == ["success", "failed", "success", "failed"]
    assert chart["error"] == {"1": "ValueError: bad", "3": "ValueError: bad"}
    assert chart["e"] == [9.0, 10.0, 10.0, 11.0] and chart["b"] == [7.0, 9.0, 8.0, 10.0] and chart["q"][0] == 6.5
    sample = compact([first, second], 90.0, limit=2)  # every second run
    assert sample["task"] == chart["task"][0::2] and sample["error"] == {} and sample["s"] == [0, 0]
    first.start = 1  # its first run dropped: the sample keeps its phase across arrivals
    sample = compact([first, second], 90.0, limit=2)
    assert sample["task"] == [chart["task"][1], chart["task"][3]] and sample["error"] == {"0": "ValueError: bad",
                                                                                        "1": "ValueError: bad"}
    going_on = compact([Arrival(two_runs(), 100.0, WORKER, ended=False)], 90.0)
    assert going_on["e"] == [None, None] and CHART_STATES[going_on["s"][0]] == "running"
