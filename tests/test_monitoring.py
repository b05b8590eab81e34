"""Monitoring end to end: a real cluster, scaler_ui in a real headless Chromium, /metrics scraped and parsed with
prometheus_client, and a stuck monitor that must not slow the scheduler."""

from __future__ import annotations

import os
import shutil
import signal
import urllib.request
from pathlib import Path
from typing import Dict, Tuple

import pytest
from cluster_processes import wait_until
from prometheus_client.parser import text_string_to_metric_families

from scaler import Client
from scaler.protocol.addresses import default_monitor_address, free_tcp_port

N_WORKERS = 2


def square(value: int) -> int:
    return value * value


def fail(value: int) -> int:
    raise ValueError(f"failing on purpose: {value}")


@pytest.fixture
def cluster(processes, address, tmp_path):
    """Scheduler (its own metrics on a port), two workers and scaler_ui; every process stopped by `processes`."""
    metrics_port, ui_port = free_tcp_port(), free_tcp_port()
    processes.scheduler(address, "--metrics-port", str(metrics_port), log_path=str(tmp_path / "scheduler.log"))
    processes.cluster(address, N_WORKERS, log_path=str(tmp_path / "cluster.log"))
    ui = processes.start(
        "scaler_ui", default_monitor_address(address), "--port", str(ui_port), log_path=str(tmp_path / "ui.log")
    )
    ui_url = f"http://127.0.0.1:{ui_port}"
    wait_until(lambda: _answers(ui_url + "/favicon.svg") and ui.poll() is None, 30, "scaler_ui to answer")
    wait_until(lambda: _metric(ui_url, "scaler_workers") == N_WORKERS, 60, f"{N_WORKERS} workers in scaler_ui")
    return {"address": address, "ui": ui, "ui_url": ui_url, "scheduler_metrics": f"http://127.0.0.1:{metrics_port}"}


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def _metrics(base: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _metric(base: str, name: str, **labels: str) -> float:
    try:
        return _metrics(base).get((name, tuple(sorted(labels.items()))), -1.0)
    except OSError:
        return -1.0


def _run_workload(address: str, successes: int, failures: int) -> None:
    with Client(address=address, timeout_seconds=30) as client:
        assert client.map(square, [(i,) for i in range(successes)]) == [i * i for i in range(successes)]
        for future in [client.submit(fail, i) for i in range(failures)]:
            with pytest.raises(ValueError, match="failing on purpose"):
                future.result(timeout=60)


def test_metrics_count_a_known_workload_on_scaler_ui_and_on_the_scheduler(cluster):
    successes, failures = 300, 7
    _run_workload(cluster["address"], successes, failures)
    square_name, fail_name = f"{__name__}.square", f"{__name__}.fail"
    for base in (cluster["ui_url"], cluster["scheduler_metrics"]):
        # the scheduler's totals at once; the workers' per-function totals with their next heartbeat
        wait_until(
            lambda base=base: (
                _metric(base, "scaler_function_runs_total", function=fail_name, outcome="failed") == failures
            ),
            30,
            f"the failed runs in {base}/metrics",
        )
        wait_until(
            lambda base=base: (
                _metric(base, "scaler_function_runs_total", function=square_name, outcome="succeeded") == successes
            ),
            30,
            f"the successful runs in {base}/metrics",
        )
        metrics = _metrics(base)
        assert metrics[("scaler_tasks_finished_total", (("state", "success"),))] == successes
        assert metrics[("scaler_tasks_finished_total", (("state", "failed"),))] == failures
        assert metrics[("scaler_tasks_received_total", ())] == successes + failures
        assert metrics[("scaler_tasks", (("state", "queued"),))] == 0
        assert metrics[("scaler_workers", ())] == N_WORKERS
        assert metrics[("scaler_function_runs_total", (("function", square_name), ("outcome", "failed")))] == 0
        assert metrics[("scaler_function_run_seconds_total", (("function", square_name),))] > 0
        assert metrics[("scaler_messages_received_total", (("type", "TaskBatch"),))] >= 1
        workers = [labels for name, labels in metrics if name == "scaler_worker_agent_resident_memory_bytes"]
        assert len(workers) == N_WORKERS
        assert all(metrics[("scaler_worker_agent_resident_memory_bytes", labels)] > 0 for labels in workers)
        assert sum(metrics[("scaler_worker_assigned_tasks", labels)] for labels in workers) == 0
    assert "process_cpu_seconds_total" in {name for name, _ in _metrics(cluster["scheduler_metrics"])}
    assert "process_cpu_seconds_total" not in {name for name, _ in _metrics(cluster["ui_url"])}


def test_a_stuck_monitor_does_not_slow_the_scheduler(cluster):
    ui = cluster["ui"]
    os.kill(ui.pid, signal.SIGSTOP)  # reads nothing any more: its feed fills up
    try:
        _run_workload(cluster["address"], 2_000, 0)  # would hang if the scheduler waited for its monitor
    finally:
        os.kill(ui.pid, signal.SIGCONT)
    wait_until(
        lambda: _metric(cluster["ui_url"], "scaler_tasks_finished_total", state="success") == 2_000,
        30,
        "scaler_ui to catch up with the scheduler",
    )


def _browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail(
            "the web monitor's browser test needs Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; dev.py test installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # no network calls of Chromium's own (updates, sync, ...): this machine only reaches its own loopback
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1300",
    ):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def _artifact_directory(tmp_path: Path) -> Path:
    directory = Path(os.environ.get("SCALER_TEST_ARTIFACTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _table_cells(browser, table_id: str) -> list[list[str]]:
    """The text of each cell of a table's rows, read in one script call: the page rebuilds its tables on
    every update, so element handles kept across calls can go stale."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(`#${arguments[0]} tbody tr`),"
        " (row) => Array.from(row.cells, (cell) => cell.innerText));",
        table_id,
    )


def test_the_page_shows_workers_tasks_charts_and_managers_in_a_real_browser(cluster, processes, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _browser()
    try:
        browser.get(cluster["ui_url"] + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: len(_table_cells(b, "workers")) == N_WORKERS)
        assert all(row[0].startswith("W|") for row in _table_cells(browser, "workers"))
        before = int(browser.find_element(By.ID, "tasks-received").text.replace(",", ""))

        _run_workload(cluster["address"], 500, 3)
        wait.until(lambda b: int(b.find_element(By.ID, "tasks-received").text.replace(",", "")) >= before + 503)
        wait.until(lambda b: b.find_element(By.ID, "tasks-failed").text == "3")
        wait.until(lambda b: int(b.find_element(By.ID, "chart-rates").get_attribute("data-points") or 0) >= 3)
        wait.until(
            lambda b: f"{__name__}.square" in b.find_element(By.ID, "functions").text
        )  # per-function counts come with the workers' next heartbeats

        # a worker manager that keeps one group of one worker: the manager, the target and the group show
        processes.start("scaler_worker_manager", "native", cluster["address"], "--max-workers", "1", "--min-groups",
                        "1", log_path=str(tmp_path / "manager.log"))  # fmt: skip
        wait.until(lambda b: "running" in b.find_element(By.ID, "groups").text)
        manager = _table_cells(browser, "managers")[0]
        assert manager[0].startswith("M|") and manager[1:5] == ["native", "1", "1", "1"]
        group = _table_cells(browser, "groups")[0]
        assert group[0].startswith(manager[0] + "/") and group[1] == "running" and group[5].startswith("pid ")

        header = browser.find_element(By.CSS_SELECTOR, '#workers th[data-key="rss_bytes"]')
        header.click()
        assert "sorted" in header.get_attribute("class")
        assert browser.find_element(By.ID, "status").text.startswith("live")

        screenshot = _artifact_directory(tmp_path) / "scaler_ui.png"
        assert browser.save_screenshot(str(screenshot)), "the browser took no screenshot"
        print(f"screenshot of the web monitor: {screenshot}")
        assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    finally:
        browser.quit()
