"""Rules for every pytest run in this repository (pytest loads this file for packages/*/tests and tests/).

1. Every test has a time limit (pytest-timeout), generous enough for two busy cores: a hung test fails alone,
   with the stack of every thread, and the run goes on. `--timeout N` (or PYTEST_TIMEOUT) sets another limit
   for every test of a run.
2. A test that does not run proves nothing. A skip is tolerated only when it is listed in ALLOWED_SKIPS with
   why it may skip and where it runs instead; any other skip fails, as does a skip of a listed test inside a
   tox environment (SCALER_TEST_NO_SKIPS=1, set by tox.ini): CI installs what every one of its tests needs.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

# Seconds per test (setup, call and teardown), by where the test lives.
UNIT_TEST_TIMEOUT = 120  # packages/*/tests: the slowest take a few seconds
INTEGRATION_TEST_TIMEOUT = 300  # tests/: real processes; the slowest take tens of seconds on a loaded machine

# The only skips tolerated outside tox, as nodeid patterns (fnmatch), each with why it skips and where it runs.
ALLOWED_SKIPS = {
    "packages/scaler-scheduler/tests/test_graph_tasks.py::*graphblas*": (
        "python-graphblas (the scheduler's graphblas extra) is not installed; every tox environment of the "
        "scheduler and the integration suite install it"
    ),
    "tests/test_graphs.py::*graphblas*": "the same: python-graphblas is not installed",
    "tests/client_alone/test_client_alone.py::test_a_task_runs_on_a_cluster_started_from_another_environment": (
        "needs SCALER_CLUSTER_BIN (a cluster from another environment); the client-alone tox environment sets it"
    ),
    "packages/scaler-protocol/tests/test_command_line.py::test_payload_memory_reuse_is_set_on_linux": (
        "glibc's mallopt exists on Linux only; CI runs on Linux"
    ),
    "packages/scaler-protocol/tests/test_connection_liveness.py::*": (
        "reads TCP_USER_TIMEOUT and TCP_KEEPIDLE, which are Linux's; CI runs on Linux"
    ),
    "packages/scaler-storage/tests/test_server.py::test_queued_get_replies_share_the_stored_payload": (
        "reads the server's memory in Linux's /proc; CI runs on Linux"
    ),
    "packages/scaler-storage/tests/test_server.py::test_small_objects_do_not_pin_receive_buffers": (
        "reads the server's memory in Linux's /proc; CI runs on Linux"
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("timeout", None) is not None or os.environ.get("PYTEST_TIMEOUT"):
        return  # one limit for every test, chosen for this run
    integration = ROOT / "tests"
    for item in items:
        if item.get_closest_marker("timeout") is None:
            seconds = INTEGRATION_TEST_TIMEOUT if integration in item.path.parents else UNIT_TEST_TIMEOUT
            item.add_marker(pytest.mark.timeout(seconds))


def _skip_problem(nodeid: str) -> str | None:
    if not any(fnmatch.fnmatchcase(nodeid, pattern) for pattern in ALLOWED_SKIPS):
        return "skipped, and not listed in the root conftest.py's ALLOWED_SKIPS"
    if os.environ.get("SCALER_TEST_NO_SKIPS") == "1":
        return "skipped inside tox, where every test must run (see the root conftest.py)"
    return None


def _fail_unlisted_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    problem = _skip_problem(report.nodeid)
    if problem is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{problem}: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    _fail_unlisted_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport:
    report = yield
    _fail_unlisted_skip(report)  # a whole module skipped (pytest.importorskip at import time)
    return report
