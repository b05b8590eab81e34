"""What every command-line program shares: common options, the TOML config file, logging, the event loop."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import logging.config
import re
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from scaler.protocol.errors import ScalerError

SECURITY_SECTION = "security"

EVENT_LOOPS = ("auto", "builtin", "uvloop")  # auto: uvloop when it is installed, else builtin
LOG_FORMAT = "[%(levelname)s]%(asctime)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S%z"


class ConfigError(ScalerError):
    """A configuration file that cannot be read or names an unknown option."""


def add_common_arguments(parser: argparse.ArgumentParser, event_loop: bool = True) -> None:
    parser.add_argument("--config", "-c", metavar="FILE.toml", help="read options from this TOML file's section")
    if event_loop:
        parser.add_argument(
            "--event-loop",
            "-el",
            choices=EVENT_LOOPS,
            default="auto",
            help="asyncio event loop; auto: uvloop when it is installed, else builtin (default: %(default)s)",
        )
    parser.add_argument(
        "--logging-level", "-ll", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        help="the least severe messages logged (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--logging-paths", "-lp", nargs="+", default=["/dev/stdout"], metavar="PATH",
        help="where logs go: files, /dev/stdout or /dev/stderr (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--logging-config-file",
        "-lcf",
        default=None,
        metavar="FILE",
        help="a logging configuration in Python's fileConfig format; it replaces --logging-level and --logging-paths",
    )


# argparse types of numbers, for every program's options


def _read_number(text: str, kind: Callable[[str], Any], what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive_int(text: str) -> int:
    value = _read_number(text, int, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    value = _read_number(text, int, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def positive_float(text: str) -> float:
    value = _read_number(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def non_negative_float(text: str) -> float:
    value = _read_number(text, float, "a number")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


_SIZE = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?:(?P<unit>[kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: Union[str, int]) -> int:
    """Bytes from ``1048576``, ``512K``, ``64M``, ``1.5G``, ``2TiB``... (K, M, G, T are powers of 1024)."""
    if isinstance(text, bool):
        raise ValueError(f"invalid size {text!r}")
    if isinstance(text, int):
        size = text
    else:
        match = _SIZE.fullmatch(str(text).strip())
        if match is None:
            raise ValueError(f"invalid size {text!r}: expected a number of bytes with an optional K, M, G or T suffix")
        size = int(float(match["number"]) * _UNITS[(match["unit"] or "").lower()])
    if size <= 0:
        raise ValueError(f"invalid size {text!r}: must be at least 1 byte")
    return size


def byte_size(text: str) -> int:
    """A size option (`parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_arguments(parser: argparse.ArgumentParser, section: str, argv: Optional[Sequence[str]] = None) -> Any:
    """Parse ``argv``; options from ``[section]`` of ``--config`` fill what the command line leaves unset, and
    before them those of its ``[security]`` section that the program has (see `security.add_security_arguments`).
    A config file that cannot be read, or holds no valid TOML, ends the program with one ``error:`` line (the
    program's usage, then why), as any other wrong argument does."""
    # --config is looked for first: a positional given only in the file must not fail the first parse
    config_parser = argparse.ArgumentParser(add_help=False)
    config_parser.add_argument("--config", "-c")
    config = config_parser.parse_known_args(argv)[0].config
    if not config:
        return parser.parse_args(argv)
    from scaler.protocol.security import SECURITY_OPTIONS  # pyzmq: not before a program runs

    try:
        values = load_config_section(config, section)
    except ConfigError as error:
        parser.error(str(error))
    known = {action.dest: action for action in parser._actions}
    defaults: Dict[str, Any] = {}
    if any(dest in SECURITY_OPTIONS for dest in known):  # one [security] section serves every program
        for key, value in load_config_section(config, SECURITY_SECTION).items():
            dest = key.replace("-", "_")
            if dest not in SECURITY_OPTIONS:
                parser.error(f"{config}: [{SECURITY_SECTION}] has unknown option {key!r}")
            if dest in known:  # the options of other programs (a daemon's authorized keys) are theirs
                defaults[dest] = value
    for key, value in values.items():
        dest = key.replace("-", "_")
        if dest not in known or dest in ("help", "config"):
            parser.error(f"{config}: [{section}] has unknown option {key!r}")
        defaults[dest] = value
    for action in parser._actions:  # positionals given in the file are no longer required
        if action.dest in defaults and not action.option_strings:
            action.nargs = "?"
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def load_config_section(path: str, section: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None
    content = document.get(section, {})
    if not isinstance(content, dict):
        raise ConfigError(f"config file {path}: [{section}] must be a table")
    return content


def setup_logging(
    level: str = "INFO", paths: Sequence[str] = ("/dev/stdout",), config_file: Optional[str] = None
) -> None:
    """Log at ``level`` to ``paths``; or, given ``config_file`` (`logging.config.fileConfig`'s format), as it says."""
    if config_file:
        try:
            logging.config.fileConfig(config_file, disable_existing_loggers=False)
        except Exception as error:  # fileConfig raises many kinds (missing file, bad section, unknown class)
            raise ConfigError(f"cannot use logging config file {config_file}: {error}") from None
        logging.info(f"logging configured by {config_file}")
        return
    handlers: List[logging.Handler] = []
    for path in paths:
        if path in ("/dev/stdout", "-"):
            handlers.append(logging.StreamHandler(sys.stdout))
        elif path == "/dev/stderr":
            handlers.append(logging.StreamHandler(sys.stderr))
        else:
            handlers.append(logging.FileHandler(path))
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT, handlers=handlers, force=True)
    logging.info(f"logging to {tuple(paths)}")


def run_event_loop(main: Callable[[], Awaitable[Any]], event_loop: str = "auto") -> Any:
    """Run ``main()`` to completion on the chosen event loop."""
    if event_loop == "auto":
        event_loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "builtin"
    if event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise ConfigError("event loop 'uvloop' requested but uvloop is not installed: pip install uvloop") from None
        logging.info("use event loop: uvloop")
        return uvloop.run(main())
    if event_loop != "builtin":
        raise ConfigError(f"unknown event loop {event_loop!r}: choose one of {', '.join(EVENT_LOOPS)}")
    logging.info("use event loop: builtin")
    return asyncio.run(main())
