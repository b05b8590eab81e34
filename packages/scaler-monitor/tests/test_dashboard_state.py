from scaler.monitor.dashboard_state import DashboardState
from scaler.protocol.messages import ClientHeartbeat, ClientSnapshot, Counter, StateSnapshot


def _snapshot(success: int, failed: int = 0, queued: int = 0) -> StateSnapshot:
    return StateSnapshot(
        task_states=[Counter("queued", queued), Counter("success", success), Counter("failed", failed)]
    )


def test_rates_come_from_the_totals_of_consecutive_snapshots():
    state = DashboardState("tcp://127.0.0.1:2347")
    first = state.on_snapshot(_snapshot(100, queued=5), now=10.0)
    assert first["succeeded_per_second"] == 0.0  # nothing to compare with yet
    point = state.on_snapshot(_snapshot(300, failed=4, queued=1), now=12.0)
    assert point["succeeded_per_second"] == 100.0
    assert point["failed_per_second"] == 2.0
    assert point["received_per_second"] == (300 + 4 + 1 - 105) / 2
    assert point["queued"] == 1


def test_a_restarted_scheduler_gives_no_negative_rate():
    state = DashboardState("tcp://127.0.0.1:2347")
    state.on_snapshot(_snapshot(1_000), now=1.0)
    point = state.on_snapshot(_snapshot(3), now=2.0)
    assert point["succeeded_per_second"] == 0.0
    assert state.on_snapshot(_snapshot(13), now=3.0)["succeeded_per_second"] == 10.0


def test_history_keeps_the_last_points_only():
    state = DashboardState("tcp://127.0.0.1:2347", history_points=3)
    for second in range(5):
        state.on_snapshot(_snapshot(second), now=float(second))
    assert [point["time"] for point in state.history] == [2.0, 3.0, 4.0]


def test_page_state_before_and_after_a_snapshot():
    state = DashboardState("tcp://127.0.0.1:2347")
    assert state.page() == {"address": "tcp://127.0.0.1:2347", "snapshot": None}
    assert state.metrics_source is None
    snapshot = _snapshot(7)
    snapshot.client_snapshots = [ClientSnapshot(b"C|h|1|aa", ClientHeartbeat(cpu=0.5, pending_tasks=3), 2, 0.5, 64)]
    snapshot.client_task_quota, snapshot.client_memory_quota = 100, 1 << 20
    state.on_snapshot(snapshot, now=1.0)
    page = state.page()["snapshot"]
    assert page["tasks_received"] == 7
    assert page["clients"] == [
        {
            "client": "C|h|1|aa", "tasks": 2, "stored_bytes": 64, "pending": 3, "cpu": 50.0, "rss_bytes": 0,
            "last_seen_seconds": 0.5,
        }
    ]  # fmt: skip
    assert (page["scheduler"]["client_task_quota"], page["scheduler"]["client_memory_quota"]) == (100, 1 << 20)
    assert '"tasks_received": 7' in state.page_json


def test_page_state_shows_worker_managers_and_their_groups():
    from scaler.protocol import messages as m

    state = DashboardState("tcp://127.0.0.1:2347")
    snapshot = _snapshot(1)
    snapshot.workers = [m.WorkerSnapshot(worker_id=b"W|h|1|aa", assigned_tasks=3, group_id=b"native-1")]
    heartbeat = m.WorkerManagerHeartbeat(
        max_groups=4, workers_per_group=1, kind="webhook",
        groups=[m.WorkerGroup(b"native-1", m.WorkerGroupState.RUNNING, 1, "webhook")],
    )  # fmt: skip
    snapshot.managers = [m.ManagerSnapshot(b"M|webhook|http://h:1/", heartbeat, 1, [], 0.0)]
    state.on_snapshot(snapshot, now=1.0)
    page = state.page()["snapshot"]
    assert page["managers"] == [
        {"manager": "M|webhook|http://h:1/", "kind": "webhook", "groups": 1, "target": 1, "max_groups": 4,
         "workers_per_group": 1, "capabilities": "", "last_seen_seconds": 0.0}
    ]  # fmt: skip
    assert page["groups"] == [
        {"group": "native-1", "manager": "M|webhook|http://h:1/", "state": "running", "workers": 1,
         "expected_workers": 1, "tasks": 3, "detail": "webhook"}
    ]  # fmt: skip
