"""The task log of scaler_ui, fed snapshots directly: runs placed on the clock of their arrival, kept bounded, searched,
counted per function as the work in flight; and the page state's task stream, events log and objects view."""

from __future__ import annotations

import pytest

from scaler.monitor.dashboard_state import DashboardState
from scaler.monitor.task_log import TaskLog, search
from scaler.protocol import messages as m

CLIENT = b"C|h|1|cc"
WORKER = b"W|h|2|ww"


def runs(*numbers: int, function: str = "mod.f", failed: int = -1, ago: float = 0.0) -> m.TaskRuns:
    count = len(numbers)
    failures = [numbers.index(failed)] if failed in numbers else []
    return m.TaskRuns(
        function_names=[function],
        client_ids=[CLIENT],
        task_ids=[n.to_bytes(16, "big") for n in numbers],
        functions=[0] * count,
        clients=[0] * count,
        queued_seconds=[1.0] * count,
        run_seconds=[2.0] * count,
        ended_seconds_ago=[ago] * count,
        failed_runs=failures,
        failed_statuses=[m.TaskStatus.FAILED] * len(failures),
        error_texts=["ValueError: bad"] * len(failures),
    )


def snapshot(ended: m.TaskRuns = m.TaskRuns(), current: m.TaskRuns = m.TaskRuns(), in_flight=()) -> m.StateSnapshot:  # noqa: B008
    beat = m.WorkerHeartbeat(ended_runs=ended, current_runs=current)
    clients = [m.ClientSnapshot(CLIENT, m.ClientHeartbeat(functions=[m.Counter(name, n) for name, n in in_flight]))]
    return m.StateSnapshot(workers=[m.WorkerSnapshot(worker_id=WORKER, heartbeat=beat)], client_snapshots=clients)


def kept(log: TaskLog):
    return [run for arrival in log.arrivals for run in arrival.records()]


def test_runs_are_placed_on_the_clock_of_their_snapshot_and_kept_bounded():
    log = TaskLog(kept_runs=3)
    log.on_snapshot(snapshot(runs(1, 2, ago=0.5)), now=100.0)
    first = kept(log)[0]
    assert (first.queued, first.started, first.ended) == (96.5, 97.5, 99.5)
    assert first.worker == "W|h|2|ww" and first.client == "C|h|1|cc" and first.state == "success"
    log.on_snapshot(snapshot(runs(3, 4)), now=101.0)
    assert [run.task_id[-2:] for run in kept(log)] == ["02", "03", "04"] and log.kept == 3 and log.ended_total == 4
    assert [run.task_id[-2:] for arrival in log.arrived for run in arrival.records()] == ["03", "04"]
    log.on_snapshot(snapshot(runs(5, 6, 7, 8)), now=102.0)
    assert [run.task_id[-2:] for run in kept(log)] == ["06", "07", "08"] and len(log.arrivals) == 1


def test_the_search_finds_runs_by_function_state_and_task_id_newest_first():
    log = TaskLog()
    log.on_snapshot(snapshot(runs(1, 2, 3, failed=2)), now=10.0)
    log.on_snapshot(snapshot(runs(4, function="mod.other"), current=runs(5, function="mod.f")), now=11.0)
    everything = log.newest_first()
    newest = search(everything)
    assert newest["matched"] == 5
    assert [run["task_id"][-2:] for run in newest["tasks"]] == ["05", "04", "03", "02", "01"]  # running first
    found = search(everything, function="MOD.F", state="failed")
    assert found["matched"] == 1 and found["tasks"][0]["error"] == "ValueError: bad"
    assert search(everything, state="running")["tasks"][0]["ended"] is None
    assert search(everything, task_id=(3).to_bytes(16, "big").hex())["matched"] == 1
    assert search(everything, function="mod", limit=2) == {"matched": 5, "tasks": newest["tasks"][:2]}
    assert search(everything, limit=2) == {"matched": 5, "tasks": newest["tasks"][:2]}
    assert search(everything, function="nothing")["matched"] == 0


def test_progress_counts_what_ended_runs_and_waits_per_function_while_its_work_lasts():
    log = TaskLog()
    current = runs(9, function="mod.f")
    log.on_snapshot(snapshot(runs(1, 2, 3, failed=3), current, in_flight=[("mod.f", 4)]), now=10.0)
    assert log.progress() == [{"function": "mod.f", "done": 3, "failed": 1, "running": 1, "waiting": 3}]
    log.on_snapshot(snapshot(in_flight=[("mod.f", 0)]), now=20.0)
    assert log.progress() == [{"function": "mod.f", "done": 3, "failed": 1, "running": 0, "waiting": 0}]
    log.on_snapshot(snapshot(), now=200.0)  # idle for long: its next work starts a new bar
    assert log.progress() == []


def test_the_window_holds_the_runs_of_the_last_minutes():
    log = TaskLog()
    log.on_snapshot(snapshot(runs(1)), now=100.0)
    log.on_snapshot(snapshot(runs(2, 3)), now=700.0)
    assert [run.task_id[-2:] for arrival in log.window(700.0, seconds=300) for run in arrival.records()] == ["02", "03"]
    assert len(log.window(700.0, seconds=1000)) == 2


def test_the_page_state_carries_the_new_runs_the_events_and_the_objects():
    state = DashboardState("tcp://127.0.0.1:2347")
    shot = snapshot(runs(1, 2), current=runs(3))
    shot.events = [m.MonitorEvent(0.5, "worker joined", WORKER, "worker W|h|2|ww joined")]
    shot.client_snapshots[0].stored_bytes = 3 << 20
    shot.client_snapshots[0].spilled_bytes = 2 << 20
    shot.object_summary = m.ObjectSummary([b"\x01" * 16], [CLIENT], [2 << 20], [True], 1 << 20, 2 << 20)
    state.on_snapshot(shot, now=50.0)
    page = state.page()["snapshot"]
    assert page["stream"]["origin"] == 50.0 and len(page["stream"]["task"]) == 2
    assert page["running"]["e"] == [None]
    assert page["events"] == [{"time": 49.5, "kind": "worker joined", "subject": "W|h|2|ww",
                               "text": "worker W|h|2|ww joined"}]  # fmt: skip
    owner = {"owner": "C|h|1|cc", "bytes": 3 << 20, "memory_bytes": 1 << 20, "spilled_bytes": 2 << 20}
    assert page["objects"]["owners"] == [owner]
    largest = {"object": "01" * 16, "owner": "C|h|1|cc", "bytes": 2 << 20, "spilled": True}
    assert page["objects"]["largest"] == [largest]
    assert (page["objects"]["memory_bytes"], page["objects"]["spilled_bytes"]) == (1 << 20, 2 << 20)
    window = state.stream_window()
    assert window["b"] == [pytest.approx(-2.0)] * 2 and window["functions"] == ["mod.f"]
    assert window["w"] == [0, 0] and window["workers"] == ["W|h|2|ww"] and window["s"] == [0, 0]
