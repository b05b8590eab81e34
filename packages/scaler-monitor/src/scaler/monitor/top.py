"""``scaler_top``: a scheduler's state snapshots as a text screen, refreshed on each snapshot."""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.command_line import ConfigError, add_common_arguments, parse_arguments, setup_logging
from scaler.protocol.ids import show
from scaler.protocol.messages import Counter, StateSnapshot, WorkerSnapshot

CONFIG_SECTION = "top"

_CLEAR_SCREEN = "\x1b[H\x1b[2J"
_WORKER_ID_WIDTH = 30


def show_bytes(size: int) -> str:
    """``37.1 MiB``: a byte count for people."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _short_bytes(size: int) -> str:
    """``32.7m``: a byte count in a narrow table column."""
    value = float(size)
    for unit in ("b", "k", "m", "g", "t"):
        if value < 1024 or unit == "t":
            return f"{value:.0f}{unit}" if unit == "b" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _worker_name(worker_id: bytes) -> str:
    name = show(worker_id)
    return name if len(name) <= _WORKER_ID_WIDTH else name[: _WORKER_ID_WIDTH - 1] + "+"


def _block(title: str, rows: Sequence[Tuple[str, str]]) -> List[str]:
    """One titled column of right-aligned ``label value`` rows, every line of the same width."""
    label_width = max((len(label) for label, _ in rows), default=0)
    value_width = max((len(value) for _, value in rows), default=0)
    lines = [f"{label:>{label_width}} {value:>{value_width}}" for label, value in rows]
    width = max([len(title), *map(len, lines)])
    return [title.ljust(width)] + [line.rjust(width) for line in lines]


def _counters(counters: Sequence[Counter]) -> List[Tuple[str, str]]:
    return [(counter.name, f"{counter.value:,}") for counter in counters]


# The worker table: column title, how to show a worker, how to sort by that column (largest first
# for numbers), in display order. `--sort-by` takes a title.
_WORKER_COLUMNS: Dict[str, Tuple[Callable[[WorkerSnapshot], str], Callable[[WorkerSnapshot], Any]]] = {
    "worker": (lambda w: _worker_name(w.worker_id), lambda w: show(w.worker_id)),
    "agt_cpu": (lambda w: f"{w.heartbeat.agent_cpu:.1f}%", lambda w: -w.heartbeat.agent_cpu),
    "agt_rss": (lambda w: _short_bytes(w.heartbeat.agent_rss_bytes), lambda w: -w.heartbeat.agent_rss_bytes),
    "cpu": (lambda w: f"{w.heartbeat.processor_cpu:.1f}%", lambda w: -w.heartbeat.processor_cpu),
    "rss": (lambda w: _short_bytes(w.heartbeat.processor_rss_bytes), lambda w: -w.heartbeat.processor_rss_bytes),
    "slots": (lambda w: str(w.slots), lambda w: -w.slots),
    "assigned": (lambda w: f"{w.assigned_tasks:,}", lambda w: -w.assigned_tasks),
    "running": (lambda w: f"{w.heartbeat.running_tasks:,}", lambda w: -w.heartbeat.running_tasks),
    "queued": (lambda w: f"{w.heartbeat.queued_tasks:,}", lambda w: -w.heartbeat.queued_tasks),
    "suspended": (lambda w: f"{w.heartbeat.suspended_tasks:,}", lambda w: -w.heartbeat.suspended_tasks),
    "seen": (lambda w: f"{w.last_seen_seconds_ago:.1f}s", lambda w: w.last_seen_seconds_ago),
    "capabilities": (
        lambda w: ",".join(f"{c.name}={c.value}" for c in w.capabilities),
        lambda w: [(c.name, c.value) for c in w.capabilities],
    ),
}
SORT_COLUMNS = tuple(_WORKER_COLUMNS)


def _worker_table(workers: Sequence[WorkerSnapshot], sort_by: str) -> List[str]:
    _, sort_key = _WORKER_COLUMNS[sort_by]
    ordered = sorted(workers, key=lambda w: (sort_key(w), show(w.worker_id)))
    titles = list(_WORKER_COLUMNS)
    rows = [[cell(worker) for cell, _ in _WORKER_COLUMNS.values()] for worker in ordered]
    widths = [max([len(title), *(len(row[index]) for row in rows)]) for index, title in enumerate(titles)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        numbers = " ".join(cell.rjust(width) for cell, width in zip(rest[:-1], widths[1:-1], strict=True))
        return f"{first.ljust(widths[0])} {numbers} {rest[-1]}".rstrip()

    return [line(titles)] + [line(row) for row in rows]


def render(snapshot: StateSnapshot, sort_by: str = "worker") -> str:
    """The whole screen for one snapshot: scheduler, task and message counters, then the workers."""
    blocks = [
        _block(
            "scheduler",
            [
                ("cpu", f"{snapshot.scheduler_cpu:.1f}%"),
                ("rss", show_bytes(snapshot.scheduler_rss_bytes)),
                ("clients", f"{snapshot.clients:,}"),
                ("objects", f"{snapshot.objects:,}"),
            ],
        ),
        _block("task states", _counters(snapshot.task_states)),
        _block("scheduler sent", _counters(snapshot.messages_sent)),
        _block("scheduler received", _counters(snapshot.messages_received)),
    ]
    widths = [len(block[0]) for block in blocks]
    head = [
        " | ".join(line.ljust(width) for line, width in zip(lines, widths, strict=True)).rstrip()
        for lines in itertools.zip_longest(*blocks, fillvalue="")
    ]
    rule = "-" * max(len(line) for line in head)
    total = f"Total {len(snapshot.workers)} worker(s)"
    return "\n".join([*head, rule, total, *_worker_table(snapshot.workers, sort_by)]) + "\n"


def address_argument(text: str) -> str:
    """argparse type of a monitor address: tcp://HOST:PORT or ipc://PATH."""
    try:
        return check_address(text)
    except AddressError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaler_top",
        description="Show a Scaler scheduler's state (scheduler, tasks, messages, workers), refreshed on every "
        "snapshot the scheduler publishes.",
    )
    parser.add_argument(
        "address", type=address_argument, help="the scheduler's monitor address (by default its port + 2)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit when no snapshot arrives for this long (default: wait forever)",
    )
    parser.add_argument("--sort-by", choices=SORT_COLUMNS, default="worker", help="order of the worker table")
    add_common_arguments(parser, event_loop=False)
    parser.set_defaults(logging_level="WARNING", logging_paths=["/dev/stderr"])  # stdout holds the screen
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit status: 0 after Ctrl-C or a --timeout that followed at least one snapshot, 1 if none came."""
    parser = build_parser()
    try:
        args = parse_arguments(parser, CONFIG_SECTION, argv)
    except ConfigError as error:
        parser.error(str(error))
    setup_logging(args.logging_level, args.logging_paths)

    from scaler.monitor.subscription import SnapshotSubscription  # pyzmq only when running

    clear = sys.stdout.isatty()
    shown = 0
    try:
        with SnapshotSubscription(args.address) as subscription:
            while True:
                snapshot = subscription.receive(args.timeout)
                if snapshot is None:
                    print(f"scaler_top: no snapshot from {args.address} for {args.timeout} seconds", file=sys.stderr)
                    return 0 if shown else 1
                screen = render(snapshot, args.sort_by)
                sys.stdout.write(_CLEAR_SCREEN + screen if clear else screen + "\n")
                sys.stdout.flush()
                shown += 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
