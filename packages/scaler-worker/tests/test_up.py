"""What ``scaler_up`` starts from a cluster file (`up.plan`), without starting it."""

from __future__ import annotations

import pytest

from scaler.cluster.up import plan
from scaler.protocol.command_line import ConfigError

ADDRESS = "tcp://127.0.0.1:2345"


def test_the_programs_start_in_order_and_follow_the_schedulers_address():
    document = {
        "security": {},
        "cluster": {"num-of-workers": 2},
        "ui": {"port": 8089},
        "object_storage_server": {},
        "scheduler": {"address": ADDRESS},
        "native_worker_manager": {"address": "tcp://127.0.0.1:9999"},
    }
    components = plan(document, "c.toml")
    assert [c.name for c in components] == [
        "object storage server", "scheduler", "web monitor", "workers (scaler_cluster)", "native worker manager",
    ]  # fmt: skip
    storage, scheduler, ui, cluster, manager = components
    assert storage.arguments == ["scaler.storage", "--config", "c.toml", "tcp://127.0.0.1:2346"]
    assert scheduler.arguments == [
        "scaler.scheduler.cli", "--config", "c.toml", ADDRESS, "--object-storage-address", "tcp://127.0.0.1:2346",
        "--dashboard-link", "http://127.0.0.1:8089/",
    ]  # fmt: skip
    assert ui.arguments == ["scaler.monitor.ui", "--config", "c.toml", "tcp://127.0.0.1:2347", "--port", "8089"]
    assert ui.listens == "tcp://127.0.0.1:8089" and scheduler.listens == ADDRESS
    assert cluster.arguments == ["scaler.cluster.cluster_main", "--config", "c.toml", ADDRESS]
    assert cluster.listens is None
    assert manager.arguments[:2] == ["scaler.worker_manager.manager_cli", "native"]
    assert manager.arguments[-1] == "tcp://127.0.0.1:9999"  # its own, given


def test_what_the_sections_say_is_kept():
    document = {
        "scheduler": {"address": ADDRESS, "object-storage-address": "tcp://127.0.0.1:7000",
                      "monitor-address": "tcp://127.0.0.1:7001", "dashboard-link": "https://dash.example/"},
        "object_storage_server": {"address": "tcp://127.0.0.1:7000"},
        "ui": {},
    }  # fmt: skip
    storage, scheduler, ui = plan(document, "c.toml")
    assert storage.listens == "tcp://127.0.0.1:7000"
    assert scheduler.arguments == ["scaler.scheduler.cli", "--config", "c.toml", ADDRESS]
    assert ui.arguments[3:] == ["tcp://127.0.0.1:7001", "--port", "8081"]


@pytest.mark.parametrize(
    "document, problem",
    [
        ({}, r"\[scheduler\] with its address is required"),
        ({"scheduler": {"port": 1}}, r"\[scheduler\] with its address is required"),
        ({"scheduler": {"address": ADDRESS}, "workers": {}}, r"unknown section\(s\) \[workers\]"),
        ({"scheduler": {"address": ADDRESS}, "cluster": 3}, r"\[cluster\] must be a table"),
    ],
)
def test_a_file_that_cannot_make_a_cluster_says_why(document, problem):
    with pytest.raises(ConfigError, match=problem):
        plan(document, "c.toml")
