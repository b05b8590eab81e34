"""scaler_symphony_cluster, run as the installed program: its options, and what it says when it cannot work."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import soamapi_fake

SCRIPT = Path(sys.executable).parent / "scaler_symphony_cluster"


def _run(*args: str, pythonpath: str = "", **environment: str) -> subprocess.CompletedProcess:
    """The program, with nothing on PYTHONPATH but ``pythonpath``: soamapi comes only from there (Symphony delivers
    it through PYTHONPATH, never into site-packages)."""
    assert SCRIPT.exists(), f"console script scaler_symphony_cluster is not installed beside {sys.executable}"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", soamapi_fake.CONFIG_VARIABLE)}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(environment)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env)


def _refusing_symphony(reason: str) -> dict:
    """The fake Symphony, refusing every connection."""
    config = {"applications": [{"name": "ScalerApp", "service": "unused:Service"}], "refuse_connect": reason}
    return {soamapi_fake.CONFIG_VARIABLE: json.dumps(config)}


def test_help_lists_every_worker_option_and_symphony_s():
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    assert "usage: scaler_symphony_cluster" in result.stdout
    for option in (
        "SERVICE",
        "--base-concurrency",
        "--capabilities",  # the options of every worker (scaler.worker.add_worker_arguments)
        "--per-worker-queue-size",
        "--heartbeat-interval-seconds",
        "--worker-timeout-seconds",
        "--session-type",
        "--symphony-user",
        "--config",
        "--event-loop",
        "--logging-level",
    ):
        assert option in result.stdout


def test_missing_soamapi_is_explained():
    result = _run("tcp://127.0.0.1:2345", "ScalerApp", "--base-concurrency", "4")
    assert result.returncode == 1
    assert "IBM Spectrum Symphony" in result.stderr
    assert "No module named 'soamapi'" in result.stderr


def test_a_soamapi_that_fails_to_load_is_explained(tmp_path):
    (tmp_path / "soamapi.py").write_text("raise ImportError('libsoam.so: cannot open shared object file')\n")
    result = _run("tcp://127.0.0.1:2345", "ScalerApp", pythonpath=str(tmp_path))
    assert result.returncode == 1
    assert "libsoam.so: cannot open shared object file" in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "four"])
def test_base_concurrency_must_be_a_positive_integer(value):
    result = _run("tcp://127.0.0.1:2345", "ScalerApp", "--base-concurrency", value)
    assert result.returncode == 2
    assert "--base-concurrency" in result.stderr


def test_a_symphony_that_refuses_the_connection_stops_the_worker_saying_so():
    result = _run(
        "tcp://127.0.0.1:2345", "ScalerApp", pythonpath=soamapi_fake.shim_path(), **_refusing_symphony("bad password")
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot open a session of Symphony application 'ScalerApp'" in result.stdout
    assert "bad password" in result.stdout


def test_arguments_from_a_config_file(tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text(
        '[symphony_cluster]\naddress = "tcp://127.0.0.1:2345"\nservice_name = "ScalerApp"\n'
        'base_concurrency = 3\nsession_type = "UnrecoverableNoHistoricalData"\nsymphony_user = "Admin"\n'
    )
    result = _run("--config", str(config), pythonpath=soamapi_fake.shim_path(), **_refusing_symphony("refused"))
    assert result.returncode == 1, result.stdout + result.stderr  # it got as far as connecting to Symphony
    assert (
        "Symphony application 'ScalerApp' as Admin, session type UnrecoverableNoHistoricalData, base concurrency 3"
        in result.stdout
    )


def test_an_unknown_option_in_the_config_file_is_refused(tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text('[symphony_cluster]\naddress = "tcp://127.0.0.1:2345"\nservice = "ScalerApp"\n')
    result = _run("--config", str(config))
    assert result.returncode == 2
    assert "unknown option 'service'" in result.stderr


def test_missing_service_name():
    result = _run("tcp://127.0.0.1:2345")
    assert result.returncode == 2
    assert "required" in result.stderr
