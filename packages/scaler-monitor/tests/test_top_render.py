from scaler.monitor.top import SORT_COLUMNS, TopView, render, show_bytes, waiting_screen
from scaler.protocol import messages as m
from scaler.protocol.messages import Capability, Counter, StateSnapshot, WorkerHeartbeat, WorkerSnapshot


def _snapshot() -> StateSnapshot:
    return StateSnapshot(
        scheduler_cpu=12.5,
        scheduler_rss_bytes=37 * 1024 * 1024,
        task_states=[Counter("queued", 12), Counter("running", 4), Counter("success", 200_000)],
        messages_sent=[Counter("TaskBatch", 2_000)],
        messages_received=[Counter("TaskResultBatch", 1_999), Counter("WorkerHeartbeat", 183_109)],
        workers=[
            WorkerSnapshot(
                worker_id=b"W|busy|1|aa",
                heartbeat=WorkerHeartbeat(
                    agent_cpu=1.5,
                    agent_rss_bytes=30 * 1024 * 1024,
                    processor_cpu=99.0,
                    processor_rss_bytes=20 * 1024 * 1024,
                    memory_limit_bytes=12 << 30,
                    memory_kills=2,
                    queued_tasks=3,
                    running_tasks=1,
                    suspended_tasks=2,
                ),
                slots=1,
                assigned_tasks=6,
                capabilities=[Capability("gpu", 1)],
                last_seen_seconds_ago=0.25,
            ),
            WorkerSnapshot(worker_id=b"W|idle|2|bb", slots=4),
        ],
        clients=3,
        objects=7,
    )


def _rows(screen: str) -> dict:
    """The worker table as {first cell: whole line}."""
    lines = screen.splitlines()
    start = lines.index("Total 2 worker(s)") + 2
    return {line.split()[0]: line for line in lines[start:]}


def test_scheduler_and_counters_are_shown():
    screen = render(_snapshot())
    head = screen.split("---")[0]
    for text in ("12.5%", "37.0 MiB", "clients", "queued", "200,000", "TaskBatch", "2,000", "183,109"):
        assert text in head
    assert "Total 2 worker(s)" in screen


def test_the_largest_share_of_a_client_is_shown_beside_each_quota():
    snapshot = _snapshot()
    snapshot.client_snapshots = [
        m.ClientSnapshot(b"C|a|1|aa", tasks=1_500, stored_bytes=3 << 20),
        m.ClientSnapshot(b"C|b|2|bb", tasks=20, stored_bytes=5 << 20),
    ]
    snapshot.client_task_quota, snapshot.client_memory_quota = 100_000, 2 << 30
    head = render(snapshot, width=80).split("---")[0]
    assert "a client at most: 1,500 tasks (quota 100,000 queued), 5.0 MiB stored of 2.0 GiB" in head


def test_counter_columns_are_aligned_side_by_side():
    lines = render(_snapshot()).splitlines()
    assert lines[0].split(" | ") == ["scheduler".ljust(len(lines[0].split(" | ")[0])), *lines[0].split(" | ")[1:]]
    bars = {tuple(index for index, char in enumerate(line) if char == "|") for line in lines[:3]}
    assert len(bars) == 1, "the column separators of the first lines are not aligned"


def test_worker_rows():
    rows = _rows(render(_snapshot()))
    assert set(rows) == {"W|busy|1|aa", "W|idle|2|bb"}
    busy = rows["W|busy|1|aa"].split()
    assert busy == [
        "W|busy|1|aa", "1.5%", "30.0m", "99.0%", "20.0m", "2", "1", "6", "3", "1", "2", "0.2s", "gpu=1"
    ]  # fmt: skip


def test_workers_sorted_by_id_by_default_and_by_a_number_largest_first():
    by_id = list(_rows(render(_snapshot())))
    assert by_id == ["W|busy|1|aa", "W|idle|2|bb"]
    by_slots = list(_rows(render(_snapshot(), sort_by="slots")))
    assert by_slots == ["W|idle|2|bb", "W|busy|1|aa"]
    for column in SORT_COLUMNS:
        render(_snapshot(), sort_by=column)


def test_long_worker_ids_are_cut_with_a_mark():
    snapshot = StateSnapshot(workers=[WorkerSnapshot(worker_id=b"W|" + b"h" * 60 + b"|1|cafe")])
    line = render(snapshot).splitlines()[-1]
    name = line.split()[0]
    assert name.endswith("+") and len(name) == 30


def test_empty_snapshot_renders():
    screen = render(StateSnapshot())
    assert "Total 0 worker(s)" in screen
    assert screen.splitlines()[-1].split()[0] == "[worker]"


def test_show_bytes():
    assert show_bytes(0) == "0 B"
    assert show_bytes(1023) == "1023 B"
    assert show_bytes(1536) == "1.5 KiB"
    assert show_bytes(37 * 1024**2) == "37.0 MiB"
    assert show_bytes(5 * 1024**5) == "5120.0 TiB"


def _order(view: TopView) -> list:
    screen = render(_snapshot(), view=view)
    return list(_rows(screen))


def test_keys_sort_by_a_column_and_reverse_the_order():
    view = TopView()
    assert _order(view) == ["W|busy|1|aa", "W|idle|2|bb"]
    assert view.on_key("s") and view.sort_by == "slots" and view.descending
    assert _order(view) == ["W|idle|2|bb", "W|busy|1|aa"]
    assert "[slots]" in render(_snapshot(), view=view)
    assert view.on_key("R") and not view.descending
    assert _order(view) == ["W|busy|1|aa", "W|idle|2|bb"]
    assert view.on_key("s") and view.descending  # the sorted column's key again reverses too
    assert view.on_key("c") and view.sort_by == "cpu"
    assert _order(view) == ["W|busy|1|aa", "W|idle|2|bb"]
    assert "sorted by cpu, largest first" in render(_snapshot(), view=view)


def test_angle_brackets_move_the_sort_column_and_wrap_around():
    view = TopView()
    view.on_key("<")
    assert view.sort_by == SORT_COLUMNS[-1]
    view.on_key(">")
    view.on_key(">")
    assert view.sort_by == SORT_COLUMNS[1]


def test_q_and_ctrl_c_quit_and_other_keys_are_ignored():
    view = TopView()
    assert view.on_key("x") and view.on_key("\x1b") and view.sort_by == "worker"
    assert not view.on_key("q")
    assert not view.on_key("\x03")


def test_help_lists_every_column_key():
    view = TopView()
    assert "h help" in render(_snapshot(), view=view)
    view.on_key("h")
    screen = render(_snapshot(), view=view)
    for title in SORT_COLUMNS:
        assert f" {title}" in screen
    assert view.on_key("h") and "Keys:" not in render(_snapshot(), view=view)


def test_every_line_fits_an_80_column_terminal():
    snapshot = _snapshot()
    snapshot.workers[0].worker_id = b"W|" + b"a-very-long-host-name.example.com" + b"|123456|0123456789ab"
    snapshot.messages_sent += [Counter(f"SomeLongMessageName{i}", 10**i) for i in range(10)]
    view = TopView()
    view.on_key("h")
    screen = render(snapshot, width=80, view=view, message_rows=7)
    assert max(len(line) for line in screen.splitlines()) <= 80
    assert "messages (7 of " in screen
    assert "W|a-very-lon" in screen  # the worker column shrinks, its start stays readable


def test_waiting_screen_names_the_address():
    screen = waiting_screen("tcp://127.0.0.1:2347", TopView(), 80)
    assert screen.startswith("scaler_top: no snapshot from tcp://127.0.0.1:2347 yet")


def test_worker_managers_their_groups_and_the_target_are_shown():
    snapshot = _snapshot()
    snapshot.workers[0].group_id = b"M|h|9|aa/1"
    heartbeat = m.WorkerManagerHeartbeat(
        max_workers=4, workers_per_group=2, max_groups=2, kind="slurm", capabilities=[Capability("gpu", 1)],
        groups=[
            m.WorkerGroup(b"M|h|9|aa/1", m.WorkerGroupState.RUNNING, 2, "slurm job 17"),
            m.WorkerGroup(b"M|h|9|aa/2", m.WorkerGroupState.STARTING, 2, "slurm job 18"),
        ],
    )  # fmt: skip
    snapshot.managers = [m.ManagerSnapshot(b"M|h|9|aa", heartbeat, 2, [b"M|h|9|aa/1"], 0.5)]
    screen = render(snapshot)
    assert "Total 1 worker manager(s)" in screen
    assert "M|h|9|aa slurm: 2 group(s), target 2, at most 2 of 2 worker(s), capabilities gpu=1" in screen
    assert "  M|h|9|aa/1 running, draining: 1/2 worker(s), 6 task(s) slurm job 17" in screen
    assert "  M|h|9|aa/2 starting: 0/2 worker(s), 0 task(s) slurm job 18" in screen
    assert set(_rows(screen)) == {"W|busy|1|aa", "W|idle|2|bb"}  # the worker table is still last
    assert "worker manager" not in render(_snapshot())
