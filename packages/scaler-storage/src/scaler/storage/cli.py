"""The ``scaler_object_storage_server`` command line."""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Optional, Sequence

from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.command_line import add_common_arguments, byte_size, parse_arguments, parse_size
from scaler.protocol.errors import ScalerError
from scaler.protocol.message_limits import show_size
from scaler.protocol.process_control import die_with_parent_from_environment, stop_on_signals
from scaler.protocol.security import add_security_arguments, security_from_arguments
from scaler.storage.object_store import DEFAULT_MAX_OBJECT_SIZE
from scaler.storage.server import default_max_memory, run_object_storage_server

CONFIG_SECTION = "object_storage_server"
_OPTION_NAMES = {"max_memory": "memory-limit", "max_disk": "spill-disk-limit"}  # dest -> its option, where they differ


def _address_argument(text: str) -> str:
    try:
        return check_address(text)
    except AddressError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_object_storage_server",
        description="Scaler object storage server: holds task data (functions, large arguments, results) for "
        "clients, workers and the scheduler.",
    )
    parser.add_argument(
        "address",
        type=_address_argument,
        help="address to bind, tcp://HOST:PORT or ipc://PATH (or `address` in the --config section)",
    )
    parser.add_argument(
        "--max-object-size",
        "-mos",
        type=byte_size,
        default=DEFAULT_MAX_OBJECT_SIZE,
        metavar="SIZE",
        help=f"largest object accepted, in bytes; suffixes K, M, G, T (default: {show_size(DEFAULT_MAX_OBJECT_SIZE)})",
    )
    parser.add_argument(
        "--memory-limit",
        "--max-memory",
        "-mm",
        dest="max_memory",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="payload bytes held in memory: past it the least recently used objects are spilled to "
        "--spill-directory, or puts refused without one; suffixes K, M, G, T "
        f"(default: half of this host's memory, here {show_size(default_max_memory())})",
    )
    parser.add_argument(
        "--spill-directory",
        default=tempfile.gettempdir(),
        metavar="DIR",
        help="where objects go past --memory-limit (in a directory of their own made there, removed at exit), "
        "or none: puts past it are refused (default: %(default)s)",
    )
    parser.add_argument(
        "--spill-disk-limit",
        dest="max_disk",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="bytes spilled to disk at most: past both limits puts are refused (default: half the free space of "
        "--spill-directory at the start)",
    )
    parser.add_argument(
        "--object-directory",
        default=None,
        metavar="DIR",
        help="keep every object in a file there too (made if missing, kept at exit): a server started again with "
        "it serves the objects it finds there, so they survive a restart; past --memory-limit objects are only "
        "dropped from memory, and --spill-disk-limit bounds the files (--spill-directory is then not used)",
    )
    parser.add_argument(
        "--max-client-memory",
        "-mcm",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="the payload bytes the objects of one client (their owner) may take, so that no client fills the "
        "server for everybody; suffixes K, M, G, T (default: half of --memory-limit and --spill-disk-limit together)",
    )
    add_security_arguments(parser, serves=True, connects=False)
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    stop_on_signals()  # until the event loop takes the signals over: a stop during the start is clean too
    die_with_parent_from_environment()
    parser = build_parser()
    args = parse_arguments(parser, CONFIG_SECTION, argv)
    for option in ("max_object_size", "max_memory", "max_disk", "max_client_memory"):  # from --config: unconverted
        value = getattr(args, option)
        if value is not None:
            try:
                setattr(args, option, parse_size(value))
            except ValueError as error:
                name = _OPTION_NAMES.get(option, option.replace("_", "-"))
                parser.error(f"argument --{name}: {error}")
    try:
        run_object_storage_server(
            args.address,
            max_object_size=args.max_object_size,
            max_memory=args.max_memory,
            spill_directory=None if args.spill_directory == "none" else args.spill_directory,
            max_disk=args.max_disk,
            object_directory=args.object_directory,
            max_client_memory=args.max_client_memory,
            event_loop=args.event_loop,
            logging_level=args.logging_level,
            logging_paths=args.logging_paths,
            logging_config_file=args.logging_config_file,
            security=security_from_arguments(args),
        )
    except (ScalerError, ValueError, OSError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except KeyboardInterrupt:  # SIGINT before the event loop took over the signal
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
