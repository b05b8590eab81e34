"""scaler_symphony_cluster, run as the installed program."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "scaler_symphony_cluster"


def _run(*args: str, pythonpath: str = "") -> subprocess.CompletedProcess:
    assert SCRIPT.exists(), f"console script scaler_symphony_cluster is not installed beside {sys.executable}"
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if pythonpath:
        environ["PYTHONPATH"] = pythonpath
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=environ)


def test_help():
    result = _run("-h")
    assert result.returncode == 0, result.stderr
    assert "usage: scaler_symphony_cluster" in result.stdout
    for option in ("--base-concurrency", "--config", "--event-loop", "SERVICE"):
        assert option in result.stdout


def test_missing_soamapi_is_explained():
    if importlib.util.find_spec("soamapi") is not None:
        pytest.skip("this environment has a real soamapi")
    result = _run("tcp://127.0.0.1:2345", "ScalerService", "--base-concurrency", "4")
    assert result.returncode == 1
    assert "IBM Spectrum Symphony" in result.stderr
    assert "soamapi" in result.stderr
    assert "No module named 'soamapi'" in result.stderr


def test_a_soamapi_that_fails_to_load_is_explained(tmp_path):
    (tmp_path / "soamapi.py").write_text("raise ImportError('libsoam.so: cannot open shared object file')\n")
    result = _run("tcp://127.0.0.1:2345", "ScalerService", pythonpath=str(tmp_path))
    assert result.returncode == 1
    assert "libsoam.so: cannot open shared object file" in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "four"])
def test_base_concurrency_must_be_a_positive_integer(value):
    result = _run("tcp://127.0.0.1:2345", "ScalerService", "--base-concurrency", value)
    assert result.returncode == 2
    assert "--base-concurrency" in result.stderr


def test_arguments_from_a_config_file(tmp_path):
    config = tmp_path / "scaler.toml"
    config.write_text('[symphony_cluster]\naddress = "tcp://127.0.0.1:2345"\nservice_name = "ScalerService"\n')
    (tmp_path / "soamapi.py").write_text("")
    result = _run("--config", str(config), pythonpath=str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "not implemented yet" in result.stderr


def test_missing_service_name():
    result = _run("tcp://127.0.0.1:2345")
    assert result.returncode == 2
    assert "required" in result.stderr
