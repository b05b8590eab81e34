"""Seeing every task, end to end (protocol 1.8, docs/monitoring.md): a real cluster and scaler_ui in a real headless
Chromium (the task stream draws a bar per run, the task table finds a failed task by its function, the events log,
the objects view, /tasks.json), and a client's performance report, opened in the same browser with the network off.

Screenshots go to $SCALER_TEST_ARTIFACTS (else the test's temporary directory)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from cluster_processes import wait_until
from test_monitoring import _artifact_directory, _browser, _table_cells

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, default_storage_address, free_tcp_port
from scaler.protocol.ids import show

N_WORKERS = 2


def square(value: int) -> int:
    return value * value


def add(left: int, right: int) -> int:
    return left + right


def pause(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def fail(value: int) -> int:
    raise ValueError(f"failing on purpose: {value}")


def fibonacci(client: Client, n: int) -> int:
    """Nested tasks: each call submits its two smaller ones through the Client it was given."""
    if n < 2:
        return n
    smaller = client.submit(fibonacci, client, n - 1), client.submit(fibonacci, client, n - 2)
    return sum(future.result() for future in smaller)


STORAGE_MEMORY = 5 << 20  # the storage server's memory limit: past it, objects spill to disk


@pytest.fixture
def monitored(processes, address, tmp_path):
    """A storage server that spills past `STORAGE_MEMORY`, a scheduler, two workers and scaler_ui (subscribed); every
    process stopped by `processes`."""
    ui_port = free_tcp_port()
    storage = default_storage_address(address)
    spill = ("--memory-limit", str(STORAGE_MEMORY), "--spill-directory", str(tmp_path / "spill"))
    processes.storage(storage, *spill, log_path=str(tmp_path / "storage.log"))
    processes.scheduler(address, "--object-storage-address", storage, log_path=str(tmp_path / "scheduler.log"))
    processes.cluster(address, N_WORKERS, log_path=str(tmp_path / "cluster.log"))
    ui = processes.start(
        "scaler_ui", default_monitor_address(address), "--port", str(ui_port), log_path=str(tmp_path / "ui.log")
    )
    ui_url = f"http://127.0.0.1:{ui_port}"
    wait_until(lambda: _workers(ui_url) == N_WORKERS and ui.poll() is None, 60, f"{N_WORKERS} workers in scaler_ui")
    return {"address": address, "ui_url": ui_url}


def _get_json(url: str):
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def _drawn(browser, attribute: str) -> int:
    """What the task stream chart says it drew (its canvas's data attributes)."""
    script = f"return document.getElementById('task-stream').getAttribute('{attribute}')"
    return int(browser.execute_script(script) or 0)


def _drawn_functions(browser) -> set:
    return set(browser.find_element("id", "task-stream").get_attribute("data-functions").split("\n"))


# turns the mouse wheel ``arguments[1]`` times over the middle of the first bar of function ``arguments[0]``
_ZOOM_INTO_A_RUN = """
const [name, turns] = arguments;
const canvas = document.getElementById("task-stream");
for (let turn = 0; turn < turns; turn++) {
  const rect = canvas.getBoundingClientRect();
  const [, x0, x1, y] = taskChart.placed.find(([run]) => run.function === name);
  canvas.dispatchEvent(new WheelEvent("wheel", {deltaY: -100, clientX: rect.left + (x0 + x1) / 2,
                                                clientY: rect.top + y + 5, cancelable: true}));
}
"""


def _workers(ui_url: str) -> int:
    try:
        snapshot = _get_json(ui_url + "/state.json")["snapshot"]
    except OSError:
        return -1
    return len(snapshot["workers"]) if snapshot else -1


def test_the_task_stream_the_task_table_and_the_logs_show_each_task_in_a_real_browser(
    monitored, processes, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    square_name, pause_name, fail_name = (f"{__name__}.{f.__name__}" for f in (square, pause, fail))
    browser = _browser()
    try:
        browser.get(monitored["ui_url"] + "/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: len(_table_cells(b, "workers")) == N_WORKERS)
        with Client(address=monitored["address"], timeout_seconds=30) as client:
            kept = client.send_object(b"x" * 3_000_000)  # held in storage while the page shows it
            assert client.map(square, [(i,) for i in range(300)]) == [i * i for i in range(300)]
            slow = [client.submit(pause, 0.3) for _ in range(6)]
            failing = [client.submit(fail, i) for i in range(3)]
            assert [future.result(timeout=60) for future in slow] == [0.3] * 6
            for future in failing:
                with pytest.raises(ValueError, match="failing on purpose"):
                    future.result(timeout=60)
            processes.cluster(monitored["address"], 1, log_path=str(tmp_path / "another.log"))  # an event

            # a bar per run (those of the earlier tests are older than the window or fewer), the failures marked
            wait.until(lambda b: _drawn(b, "data-bars") >= 309 and _drawn(b, "data-failures") == 3)
            functions = browser.find_element(By.ID, "task-stream").get_attribute("data-functions").split("\n")
            assert {square_name, pause_name, fail_name} <= set(functions)
            # zoomable: the wheel over a bar narrows the view around it (a few bars drawn, that one among them),
            # and a double-click follows the last minutes again
            drawn = _drawn(browser, "data-bars")
            browser.execute_script(_ZOOM_INTO_A_RUN, pause_name, 20)
            wait.until(lambda b: 0 < _drawn(b, "data-bars") < 20 and _drawn_functions(b) >= {pause_name})
            browser.execute_script("document.getElementById('task-stream').dispatchEvent(new MouseEvent('dblclick'))")
            wait.until(lambda b: _drawn(b, "data-bars") >= drawn)

            # the task table finds the failed tasks by their function, each with its error
            browser.find_element(By.ID, "search-function").send_keys("fail")
            Select(browser.find_element(By.ID, "search-state")).select_by_visible_text("failed")
            wait.until(lambda b: len(_table_cells(b, "tasks")) == 3)
            for row in _table_cells(browser, "tasks"):
                assert row[0] == fail_name and row[1] == "failed" and row[3].startswith("W|")
                assert row[8].startswith("ValueError: failing on purpose")
            # and one of them by the start of its task ID alone
            browser.find_element(By.ID, "search-function").clear()
            Select(browser.find_element(By.ID, "search-state")).select_by_visible_text("any state")
            wanted = failing[1].task_id.hex()
            browser.find_element(By.ID, "search-task").send_keys(wanted[:20])
            wait.until(lambda b: [row[9] for row in _table_cells(b, "tasks")] == [wanted])
            browser.find_element(By.ID, "search-task").clear()

            wait.until(lambda b: any(row[0] == square_name and row[2] == "300" for row in _table_cells(b, "progress")))
            wait.until(lambda b: any(row[1] == "worker joined" for row in _table_cells(b, "events")))
            # past the storage server's memory limit, the least recently used object (kept) spills to disk
            newer = client.send_object(b"y" * 4_000_000)
            client_id = show(client.client_id)
            wait.until(lambda b: [client_id, "3.8 MiB", "2.9 MiB"] in _table_cells(b, "objects"))
            largest = [row[1:] for row in _table_cells(browser, "largest-objects")[:2]]
            assert largest == [[client_id, "3.8 MiB", "memory"], [client_id, "2.9 MiB", "disk"]]
            objects = _get_json(monitored["ui_url"] + "/state.json")["snapshot"]["objects"]
            assert 3_000_000 <= objects["spilled_bytes"] < 3_001_000 and objects["memory_bytes"] >= 4_000_000
            section = browser.find_element(By.ID, "objects").find_element(By.XPATH, "ancestor::section")
            assert section.screenshot(str(_artifact_directory(tmp_path) / "scaler_ui_objects.png"))

            found = _get_json(monitored["ui_url"] + f"/tasks.json?function={fail_name}&state=failed")
            assert found["matched"] == 3 and {run["function"] for run in found["tasks"]} == {fail_name}
            assert all(run["started"] <= run["ended"] and run["queued"] <= run["started"] for run in found["tasks"])
            del kept, newer

        directory = _artifact_directory(tmp_path)
        browser.find_element(By.ID, "search-function").clear()
        Select(browser.find_element(By.ID, "search-state")).select_by_visible_text("any state")
        for name, element in (("task_stream", "task-stream"), ("tasks", "tasks"), ("progress", "progress")):
            section = browser.find_element(By.ID, element).find_element(By.XPATH, "ancestor::section")
            assert section.screenshot(str(directory / f"scaler_ui_{name}.png"))
        assert browser.save_screenshot(str(directory / "scaler_ui_tasks_page.png"))
        print(f"screenshots of the web monitor's task views: {directory}")
        assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    finally:
        browser.quit()


def test_a_performance_report_opens_offline_and_shows_the_block_s_tasks_and_those_they_submitted(
    monitored, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    report = tmp_path / "report.html"
    with Client(address=monitored["address"], timeout_seconds=30) as client:
        with client.task_stream() as stream, client.performance_report(str(report)):
            assert client.map(square, [(i,) for i in range(200)]) == [i * i for i in range(200)]
            assert client.submit(fibonacci, client, 6).result(timeout=60) == 8  # 25 calls, 24 of them nested
            graph = {"a": 3, "b": (square, "a"), "c": (square, "b"), "d": (add, "b", "c"), "e": (add, "c", "d")}
            assert client.get(graph, keys=["e"]) == {"e": 171}  # a graph: 4 tasks, each needing others
            with pytest.raises(ValueError, match="failing on purpose"):
                client.submit(fail, 1).result(timeout=60)
    counts = {}
    for run in stream.records:
        counts[run.function] = counts.get(run.function, 0) + 1
    square_name, fibonacci_name, add_name = f"{__name__}.square", f"{__name__}.fibonacci", f"{__name__}.add"
    assert counts == {square_name: 202, fibonacci_name: 25, add_name: 2, f"{__name__}.fail": 1}
    assert stream.missing == 0

    page = report.read_text(encoding="utf-8")
    assert "src=" not in page and "href=" not in page  # nothing to fetch: styles, script and runs are inline
    browser = _browser()
    try:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
        )
        browser.get(report.as_uri())
        WebDriverWait(browser, 30).until(lambda b: _drawn(b, "data-bars") == 230)
        functions = {row[0]: row for row in _table_cells(browser, "functions")}
        assert functions[square_name][1] == "202" and functions[fibonacci_name][1] == "25"
        assert functions[add_name][1] == "2"
        assert functions[f"{__name__}.fail"][5] == "1"
        assert browser.find_element(By.ID, "total-failed").text == "1"
        assert len(_table_cells(browser, "workers")) == N_WORKERS
        chart_functions = browser.find_element(By.ID, "task-stream").get_attribute("data-functions").split("\n")
        assert fibonacci_name in chart_functions
        screenshot = _artifact_directory(tmp_path) / "performance_report.png"
        assert browser.save_screenshot(str(screenshot))
        print(f"screenshot of the performance report: {screenshot}")
        assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    finally:
        browser.quit()
