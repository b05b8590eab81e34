"""A worker's settings, and the command-line options that set them (shared by scaler_worker and scaler_cluster)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.command_line import non_negative_int, positive_float, positive_int
from scaler.protocol.messages import Capability
from scaler.protocol.security import NO_SECURITY, SecurityConfig, add_security_arguments, security_from_arguments
from scaler.worker.memory_limit import DEFAULT_MEMORY_LIMIT, NO_MEMORY_LIMIT, memory_limit_bytes
from scaler.worker.worker_setup import preload_problem

DEFAULT_QUEUE_CAPACITY = 1000
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 1.0
DEFAULT_WORKER_TIMEOUT_SECONDS = 60.0  # also how long a storage request may go unanswered
DEFAULT_INLINE_THRESHOLD_BYTES = 64 * 1024


CapabilitiesSpec = Union[str, Mapping[str, int], Iterable[Capability], None]


class CapabilityError(ValueError):
    pass


def parse_capabilities(spec: CapabilitiesSpec) -> List[Capability]:
    """``"gpu,linux"`` -> [Capability("gpu", -1), Capability("linux", -1)]; ``"gpu=2"`` gives the value 2.

    Also takes a mapping ``{"gpu": -1}`` or capabilities as they are.
    """
    if spec is None:
        return []
    if isinstance(spec, str):
        pairs: List[Tuple[str, int]] = []
        for item in spec.split(","):
            item = item.strip()
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip()
            if not name:
                raise CapabilityError(f"invalid capability {item!r}: empty name")
            if not sep:
                pairs.append((name, -1))
                continue
            try:
                pairs.append((name, int(value.strip())))
            except ValueError:
                raise CapabilityError(f"invalid capability {item!r}: the value must be an integer") from None
    elif isinstance(spec, Mapping):
        pairs = [(str(name), int(value)) for name, value in spec.items()]
    else:
        pairs = [(capability.name, capability.value) for capability in spec]
    seen = set()
    for name, _ in pairs:
        if name in seen:
            raise CapabilityError(f"capability {name!r} given twice")
        seen.add(name)
    return [Capability(name, value) for name, value in pairs]


def format_capabilities(capabilities: Sequence[Capability]) -> str:
    """The inverse of `parse_capabilities` for a string spec."""
    return ",".join(f"{c.name}={c.value}" for c in capabilities)


@dataclass
class WorkerConfig:
    scheduler_address: str
    capabilities: List[Capability] = field(default_factory=list)
    queue_capacity: int = DEFAULT_QUEUE_CAPACITY
    heartbeat_interval_seconds: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    worker_timeout_seconds: float = DEFAULT_WORKER_TIMEOUT_SECONDS
    task_inline_threshold: int = DEFAULT_INLINE_THRESHOLD_BYTES
    event_loop: str = "auto"
    logging_level: str = "INFO"
    logging_paths: Tuple[str, ...] = ("/dev/stdout",)
    logging_config_file: Optional[str] = None  # Python's fileConfig format: replaces level and paths
    security: SecurityConfig = NO_SECURITY  # its key pair, the server's public key, its tasks' client key
    group_id: str = ""  # the worker group a worker manager started it in (docs/scaling.md)
    # as --memory-limit says it: "auto", "none", a share of the host's memory ("80%"), or a size (bytes, "2GiB");
    # the command that runs the workers divides a share among them (`memory_limit.memory_limit_bytes`)
    memory_limit: Union[str, int] = DEFAULT_MEMORY_LIMIT
    preload: str = ""  # a module name or a script's path, run in each processor as it starts (--preload)

    def __post_init__(self) -> None:
        check_address(self.scheduler_address)
        memory_limit_bytes(self.memory_limit)  # ValueError now, naming what is wrong
        if self.queue_capacity < 1:
            raise ValueError(f"queue capacity must be at least 1, not {self.queue_capacity}")
        if self.heartbeat_interval_seconds <= 0:
            raise ValueError(f"heartbeat interval must be positive, not {self.heartbeat_interval_seconds}")
        if self.worker_timeout_seconds <= 0:
            raise ValueError(f"worker timeout must be positive, not {self.worker_timeout_seconds}")
        if self.task_inline_threshold < 0:
            raise ValueError(f"task inline threshold must not be negative, not {self.task_inline_threshold}")
        problem = preload_problem(self.preload) if self.preload else None
        if problem is not None:
            raise ValueError(problem)

    @classmethod
    def from_arguments(cls, args: Any) -> WorkerConfig:
        """From options added by `add_worker_arguments` (and command_line.add_common_arguments)."""
        return cls(
            scheduler_address=args.address,
            capabilities=parse_capabilities(args.per_worker_capabilities),
            queue_capacity=args.per_worker_queue_size,
            heartbeat_interval_seconds=args.heartbeat_interval_seconds,
            worker_timeout_seconds=args.worker_timeout_seconds,
            task_inline_threshold=args.task_inline_threshold,
            event_loop=args.event_loop,
            logging_level=args.logging_level,
            logging_paths=tuple(args.logging_paths),
            logging_config_file=args.logging_config_file,
            security=security_from_arguments(args),
            group_id=args.worker_group_id,
            memory_limit=getattr(args, "memory_limit", NO_MEMORY_LIMIT),  # (not an option where tasks run elsewhere)
            preload=getattr(args, "preload", ""),
        )

    def memory_limit_bytes(self, workers: int = 1) -> int:
        """Each worker's memory limit in bytes (0: none) when one command runs ``workers`` of them."""
        return memory_limit_bytes(self.memory_limit, workers)

    def to_arguments(self) -> List[str]:
        """Command-line arguments of scaler_worker that give back this configuration."""
        return [
            self.scheduler_address,
            "--per-worker-capabilities",
            format_capabilities(self.capabilities),
            "--per-worker-queue-size",
            str(self.queue_capacity),
            "--heartbeat-interval-seconds",
            repr(float(self.heartbeat_interval_seconds)),
            "--worker-timeout-seconds",
            repr(float(self.worker_timeout_seconds)),
            "--task-inline-threshold",
            str(self.task_inline_threshold),
            "--memory-limit",
            str(self.memory_limit),
            "--event-loop",
            self.event_loop,
            "--logging-level",
            self.logging_level,
            *self.security.to_arguments(),  # paths of key files, never a key
            "--logging-paths",
            *self.logging_paths,
            *(["--logging-config-file", self.logging_config_file] if self.logging_config_file else []),
            *(["--worker-group-id", self.group_id] if self.group_id else []),
            *(["--preload", self.preload] if self.preload else []),
        ]


def _address(text: str) -> str:
    try:
        return check_address(text)
    except AddressError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _memory_limit(text: str) -> str:
    try:
        memory_limit_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _capabilities(text: str) -> str:
    try:
        parse_capabilities(text)
    except CapabilityError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_worker_arguments(parser: argparse.ArgumentParser, local_tasks: bool = True) -> None:
    """The options of every program that runs workers (scaler_worker, scaler_cluster, scaler_symphony_cluster):
    an option every worker takes is added here, once; those of workers whose tasks run on this host
    (``--memory-limit``) only with ``local_tasks``."""
    parser.add_argument("address", type=_address, help="scheduler address, tcp://HOST:PORT or ipc://PATH")
    parser.add_argument(
        "--per-worker-capabilities",
        "-pwc",
        "--capabilities",
        type=_capabilities,
        default="",
        metavar="CAPABILITIES",
        help='capabilities every worker advertises, comma-separated names or NAME=VALUE: "gpu,linux" (default: none)',
    )
    parser.add_argument(
        "--per-worker-queue-size",
        "-wqs",
        type=positive_int,
        default=DEFAULT_QUEUE_CAPACITY,
        metavar="N",
        help=f"tasks a worker accepts to queue (default: {DEFAULT_QUEUE_CAPACITY})",
    )
    parser.add_argument(
        "--heartbeat-interval-seconds",
        "-hi",
        type=positive_float,
        default=DEFAULT_HEARTBEAT_INTERVAL_SECONDS,
        metavar="SECONDS",
        help=f"seconds between heartbeats to the scheduler (default: {DEFAULT_HEARTBEAT_INTERVAL_SECONDS:g})",
    )
    parser.add_argument(
        "--worker-timeout-seconds",
        "-wt",
        type=positive_float,
        default=DEFAULT_WORKER_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="a worker that hears nothing from the scheduler (or the storage server) for this long exits; one "
        "whose connection to the scheduler closes waits this long for it to come back (a healed partition, a "
        "scheduler restarted on its address), then exits (default: "
        f"{DEFAULT_WORKER_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--task-inline-threshold",
        type=non_negative_int,
        default=DEFAULT_INLINE_THRESHOLD_BYTES,
        metavar="BYTES",
        help="results larger than this go through object storage instead of travelling inline "
        f"(default: {DEFAULT_INLINE_THRESHOLD_BYTES})",
    )
    if local_tasks:
        _add_memory_limit_argument(parser)
        parser.add_argument(
            "--preload",
            default="",
            metavar="MODULE_OR_SCRIPT",
            help="a module to import (a name: my_setup) or a Python script to run (a path ending in .py) in each "
            "processor as it starts, before its first task: a worker whose preload fails exits, naming the error, "
            "and is not replaced (docs/interfaces.md, \"Coming from Dask\"; default: none)",
        )
    parser.add_argument(
        "--worker-group-id",
        default="",
        metavar="ID",
        help="the worker group these workers belong to: set by the worker manager that starts them (docs/scaling.md)",
    )
    add_security_arguments(parser, worker=True)


def _add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-limit",
        type=_memory_limit,
        default=DEFAULT_MEMORY_LIMIT,
        metavar="LIMIT",
        help="the memory each worker's tasks may use (their processor and the processes it starts): a size in bytes "
        "(suffixes K, M, G, T: 2GiB), a share of this host's memory for all the workers of this command (80%%), "
        "auto (all of it: the host's memory divided among the workers) or none; a task past it fails with "
        "MemoryLimitError and the worker goes on (docs/memory.md; default: %(default)s)",
    )
