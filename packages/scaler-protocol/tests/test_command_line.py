import argparse
import asyncio
import importlib.util
import logging
import re
import sys

import pytest

from scaler.protocol.command_line import (
    ConfigError,
    add_common_arguments,
    load_config_section,
    parse_arguments,
    parse_size,
    run_event_loop,
    setup_logging,
)
from scaler.protocol.process_control import reuse_payload_memory


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaler_thing")
    parser.add_argument("address")
    parser.add_argument("--workers", "-n", type=int, default=1)
    parser.add_argument("--name", default="default-name")
    add_common_arguments(parser)
    return parser


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "scaler.toml"
    path.write_text(text)
    return str(path)


def test_common_arguments_defaults():
    args = parse_arguments(_parser(), "thing", ["tcp://127.0.0.1:2345"])
    assert args.address == "tcp://127.0.0.1:2345"
    assert (args.config, args.event_loop, args.logging_level, args.logging_paths) == (
        None,
        "auto",
        "INFO",
        ["/dev/stdout"],
    )


def test_config_section_fills_what_the_command_line_leaves_unset(tmp_path):
    config = _config(
        tmp_path,
        '[thing]\nworkers = 8\nname = "from-file"\nlogging-level = "DEBUG"\n\n[other]\nworkers = 99\n',
    )
    args = parse_arguments(_parser(), "thing", ["--config", config, "--name", "from-cli", "tcp://127.0.0.1:1"])
    assert args.workers == 8
    assert args.name == "from-cli"  # the command line wins
    assert args.logging_level == "DEBUG"  # dashes in keys as on the command line


def test_positional_from_the_config_file(tmp_path):
    config = _config(tmp_path, '[thing]\naddress = "tcp://127.0.0.1:9999"\n')
    args = parse_arguments(_parser(), "thing", ["-c", config])
    assert args.address == "tcp://127.0.0.1:9999"
    args = parse_arguments(_parser(), "thing", ["-c", config, "tcp://127.0.0.1:1111"])
    assert args.address == "tcp://127.0.0.1:1111"


def test_missing_section_changes_nothing(tmp_path):
    config = _config(tmp_path, "[other]\nworkers = 3\n")
    args = parse_arguments(_parser(), "thing", ["--config", config, "tcp://127.0.0.1:1"])
    assert args.workers == 1


def test_unknown_key_is_an_error_naming_it(tmp_path, capsys):
    config = _config(tmp_path, "[thing]\nwrokers = 3\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_arguments(_parser(), "thing", ["--config", config, "tcp://127.0.0.1:1"])
    assert exit_info.value.code == 2
    assert "[thing] has unknown option 'wrokers'" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["config", "help"])
def test_config_cannot_set_config_or_help(tmp_path, key):
    config = _config(tmp_path, f'[thing]\n{key} = "x"\n')
    with pytest.raises(SystemExit):
        parse_arguments(_parser(), "thing", ["--config", config, "tcp://127.0.0.1:1"])


def test_unreadable_or_invalid_config_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_section(str(tmp_path / "missing.toml"), "thing")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config_section(_config(tmp_path, "[thing\n"), "thing")
    with pytest.raises(ConfigError, match="must be a table"):
        load_config_section(_config(tmp_path, "thing = 3\n"), "thing")


def test_log_lines_have_the_project_format(tmp_path):
    log = tmp_path / "scaler.log"
    try:
        setup_logging("INFO", [str(log)])
        logging.info("Scheduler: listen to scheduler address tcp://127.0.0.1:2345")
        logging.debug("not shown at INFO")
    finally:
        for handler in logging.getLogger().handlers:
            handler.close()
        logging.basicConfig(force=True)
    lines = log.read_text().splitlines()
    assert len(lines) == 2  # "logging to ..." and ours
    pattern = r"\[INFO\]\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4}: Scheduler: listen to scheduler address tcp://\S+"
    assert re.fullmatch(pattern, lines[1]), lines[1]


def test_a_logging_config_file_replaces_level_and_paths(tmp_path):
    log, config = tmp_path / "file.log", tmp_path / "logging.conf"
    config.write_text(
        "[loggers]\nkeys=root\n[handlers]\nkeys=file\n[formatters]\nkeys=plain\n[logger_root]\nlevel=DEBUG\n"
        f"handlers=file\n[handler_file]\nclass=FileHandler\nformatter=plain\nargs=({str(log)!r},)\n"
        "[formatter_plain]\nformat=CONFIGURED %(levelname)s %(message)s\n"
    )
    try:
        setup_logging("ERROR", [str(tmp_path / "unused.log")], str(config))
        logging.debug("shown at DEBUG")
    finally:
        for handler in logging.getLogger().handlers:
            handler.close()
        logging.basicConfig(force=True)
    assert "CONFIGURED DEBUG shown at DEBUG" in log.read_text() and not (tmp_path / "unused.log").exists()
    for bad in (tmp_path / "missing.conf", tmp_path / "log.toml"):
        if bad.name == "log.toml":
            bad.write_text("[section]\nkey = 1\n")
        with pytest.raises(ConfigError, match=f"cannot use logging config file {bad}"):
            setup_logging("INFO", ["/dev/stdout"], str(bad))


def test_run_event_loop_builtin():
    async def main():
        await asyncio.sleep(0)
        return 42

    assert run_event_loop(main, "builtin") == 42


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.fixture
def without_uvloop(monkeypatch):
    """uvloop cannot be found or imported, as where it is not installed (the tests run where it is)."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "uvloop" else find_spec(name, *rest)
    )
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError


def test_run_event_loop_auto_uses_uvloop_when_installed(caplog):
    with caplog.at_level(logging.INFO):
        assert run_event_loop(_loop_module, "auto").startswith("uvloop")
    assert "use event loop: uvloop" in caplog.text


def test_run_event_loop_auto_uses_the_builtin_loop_without_uvloop(without_uvloop, caplog):
    with caplog.at_level(logging.INFO):
        assert run_event_loop(_loop_module, "auto").startswith("asyncio")
    assert "use event loop: builtin" in caplog.text


def test_run_event_loop_unknown():
    async def main():
        return None

    with pytest.raises(ConfigError, match="unknown event loop"):
        run_event_loop(main, "trio")


def test_run_event_loop_uvloop():
    assert run_event_loop(_loop_module, "uvloop").startswith("uvloop")


def test_run_event_loop_uvloop_without_uvloop_says_how_to_install_it(without_uvloop):
    with pytest.raises(ConfigError, match="pip install uvloop"):
        run_event_loop(_loop_module, "uvloop")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_payload_memory_reuse_is_set_on_linux():
    # both mallopt calls must take (a wrong parameter number or value makes glibc refuse it)
    assert reuse_payload_memory() is True


@pytest.mark.parametrize(
    "text, size",
    [
        ("1", 1),
        ("1024", 1024),
        ("512K", 512 << 10),
        ("512k", 512 << 10),
        ("64M", 64 << 20),
        ("64MB", 64 << 20),
        ("64MiB", 64 << 20),
        ("1G", 1 << 30),
        ("1.5G", 3 << 29),
        ("2T", 2 << 40),
        ("100B", 100),
        (" 8 M ", 8 << 20),
        (4096, 4096),
    ],
)
def test_parse_size(text, size: int):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "-1", "0", "0K", "12Q", "1.2.3M", "1e6", "ten", True, -5])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)
