"""The scaler_scheduler command line: every error is one clear line, every option says what it does and its
default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from scaler.scheduler.cli import build_parser

RUN_TIMEOUT_SECONDS = 60


def run(arguments: List[str]) -> Tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "scaler.scheduler.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    return done.returncode, done.stdout, done.stderr


def _invalid_toml(tmp_path: Path) -> str:
    path = tmp_path / "invalid.toml"
    path.write_text("[scheduler\nprotected = yes\n")
    return str(path)


@pytest.mark.parametrize(
    "config, complaint",
    [
        (lambda tmp_path: "/nonexistent/scaler.toml", "cannot read config file /nonexistent/scaler.toml"),
        (_invalid_toml, "is not valid TOML"),
    ],
    ids=["missing", "invalid"],
)
def test_a_config_file_that_cannot_be_read_is_one_error_line_without_a_traceback(tmp_path, config, complaint):
    code, out, err = run(["--config", config(tmp_path), "tcp://127.0.0.1:1"])
    assert code == 2 and out == ""
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("scaler_scheduler: error: ") and complaint in errors[0]


def test_every_option_says_what_it_does_and_shows_its_default():
    for action in build_parser()._actions:
        if action.dest in ("help", "address"):
            continue
        assert action.help, f"{action.option_strings} has no help"
        if action.default not in (None, False):
            assert "default" in action.help, f"{action.option_strings} does not show its default"


def test_the_help_of_the_failure_options_shows_their_defaults():
    code, out, _ = run(["--help"])
    text = " ".join(out.split())
    assert code == 0
    assert "instead of running again (default: 3)" in text  # --max-task-deaths
    assert "(default: 1.0)" in text  # -hi
    assert "its objects deleted (a client whose connection closes is forgotten at once) (default: 60.0)" in text
    assert "(a worker whose connection closes, at once) (default: 60.0)" in text


@pytest.mark.parametrize(
    "option, complaint",
    [
        (["--max-message-size", "12Q"], "argument --max-message-size: invalid size '12Q'"),
        (["--max-message-size", "64K"], "--max-message-size of 64.0 KiB is below the least the protocol needs"),
    ],
    ids=["not a size", "too small"],
)
def test_a_bad_message_size_limit_is_one_error_line(option, complaint):
    code, out, err = run([*option, "tcp://127.0.0.1:1"])
    assert code != 0 and "Traceback" not in err
    assert [line for line in err.splitlines() if "error:" in line] == [
        line for line in err.splitlines() if complaint in line
    ], err


def test_a_message_size_limit_from_the_config_file_is_read_as_a_size(tmp_path):
    path = tmp_path / "scaler.toml"
    path.write_text("[scheduler]\nmax-message-size = 4096\n")
    code, out, err = run(["--config", str(path), "tcp://127.0.0.1:1"])
    assert code == 1 and "--max-message-size of 4.0 KiB is below" in err
