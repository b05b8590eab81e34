"""``scaler_top``: a scheduler's state snapshots as a text screen, redrawn on each snapshot, driven with keys."""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from scaler.monitor.managers_view import group_rows, manager_rows
from scaler.protocol.addresses import AddressError, check_address
from scaler.protocol.command_line import add_common_arguments, parse_arguments, setup_logging
from scaler.protocol.ids import show
from scaler.protocol.messages import Counter, StateSnapshot, WorkerSnapshot

CONFIG_SECTION = "top"

DEFAULT_WIDTH = 80
_MIN_WORKER_WIDTH = 12
_MAX_WORKER_WIDTH = 30
_KEY_POLL_SECONDS = 0.05  # how often the screen looks for a key while it waits for a snapshot
_TELL_WAITING_SECONDS = 2.0  # not on a terminal: how long before saying that no snapshot came yet
_MESSAGE_ROWS = 7  # message types on an interactive screen (as many rows as the task states): room for workers


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


def _cut(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "+"


def _block(title: str, rows: Sequence[Tuple[str, str]]) -> List[str]:
    """One titled column of right-aligned ``label value`` rows, every line of the same width."""
    label_width = max((len(label) for label, _ in rows), default=0)
    value_width = max((len(value) for _, value in rows), default=0)
    lines = [f"{label:>{label_width}} {value:>{value_width}}" for label, value in rows]
    width = max([len(title), *map(len, lines)])
    return [title.ljust(width)] + [line.rjust(width) for line in lines]


def _counters(counters: Sequence[Counter]) -> List[Tuple[str, str]]:
    return [(counter.name, f"{counter.value:,}") for counter in counters]


def _client_shares(snapshot: StateSnapshot) -> str:
    """One line: the largest share a client takes of the scheduler and of storage, beside each quota (1.8)."""
    clients = snapshot.client_snapshots
    most_tasks = max((client.tasks for client in clients), default=0)
    most_stored = max((client.stored_bytes for client in clients), default=0)
    tasks_quota = f" (quota {snapshot.client_task_quota:,} queued)" if snapshot.client_task_quota else ""
    stored_quota = f" of {show_bytes(snapshot.client_memory_quota)}" if snapshot.client_memory_quota else ""
    return f"a client at most: {most_tasks:,} tasks{tasks_quota}, {show_bytes(most_stored)} stored{stored_quota}"


def _messages(snapshot: StateSnapshot, limit: Optional[int]) -> List[str]:
    """The messages block: per type, how many the scheduler sent and received; the busiest ``limit`` types."""
    sent = {counter.name: counter.value for counter in snapshot.messages_sent}
    received = {counter.name: counter.value for counter in snapshot.messages_received}
    names = sorted(sent.keys() | received.keys(), key=lambda name: (-sent.get(name, 0) - received.get(name, 0), name))
    shown = names if limit is None else names[:limit]
    rows = [(name, f"{sent.get(name, 0):,}", f"{received.get(name, 0):,}") for name in shown]
    title = "messages" if len(shown) == len(names) else f"messages ({len(shown)} of {len(names)})"
    name_width = max([len(title), *(len(name) for name, _, _ in rows)])
    sent_width = max([4, *(len(value) for _, value, _ in rows)])
    received_width = max([8, *(len(value) for _, _, value in rows)])
    lines = [f"{title:<{name_width}} {'sent':>{sent_width}} {'received':>{received_width}}"]
    lines += [f"{n:>{name_width}} {s:>{sent_width}} {r:>{received_width}}" for n, s, r in rows]
    return lines


def _side_by_side(blocks: List[List[str]], width: int) -> List[str]:
    """Blocks joined by `` | `` in rows of as many as fit in ``width``."""
    lines: List[str] = []
    row: List[List[str]] = []
    for block in blocks:
        if row and sum(len(b[0]) + 3 for b in row) + len(block[0]) > width:
            lines.extend(_join(row))
            row = []
        row.append(block)
    return lines + _join(row)


def _join(row: List[List[str]]) -> List[str]:
    widths = [len(block[0]) for block in row]
    return [
        " | ".join(line.ljust(w) for line, w in zip(lines, widths, strict=True)).rstrip()
        for lines in itertools.zip_longest(*row, fillvalue="")
    ]


class Column(NamedTuple):
    key: str  # the key that sorts by this column
    cell: Callable[[WorkerSnapshot], str]
    sort_key: Callable[[WorkerSnapshot], Any]  # ascending order; the screen shows numbers largest first


# The worker table in display order: title -> column. `--sort-by` takes a title.
COLUMNS: Dict[str, Column] = {
    "worker": Column("n", lambda w: show(w.worker_id), lambda w: show(w.worker_id)),
    "agt_cpu": Column("a", lambda w: f"{w.heartbeat.agent_cpu:.1f}%", lambda w: w.heartbeat.agent_cpu),
    "agt_rss": Column("g", lambda w: _short_bytes(w.heartbeat.agent_rss_bytes), lambda w: w.heartbeat.agent_rss_bytes),
    "cpu": Column("c", lambda w: f"{w.heartbeat.processor_cpu:.1f}%", lambda w: w.heartbeat.processor_cpu),
    "rss": Column(
        "m", lambda w: _short_bytes(w.heartbeat.processor_rss_bytes), lambda w: w.heartbeat.processor_rss_bytes
    ),
    "kills": Column("k", lambda w: f"{w.heartbeat.memory_kills:,}", lambda w: w.heartbeat.memory_kills),
    "slots": Column("s", lambda w: str(w.slots), lambda w: w.slots),
    "sent": Column("t", lambda w: f"{w.assigned_tasks:,}", lambda w: w.assigned_tasks),
    "queued": Column("u", lambda w: f"{w.heartbeat.queued_tasks:,}", lambda w: w.heartbeat.queued_tasks),
    "run": Column("r", lambda w: f"{w.heartbeat.running_tasks:,}", lambda w: w.heartbeat.running_tasks),
    "susp": Column("p", lambda w: f"{w.heartbeat.suspended_tasks:,}", lambda w: w.heartbeat.suspended_tasks),
    "seen": Column("l", lambda w: f"{w.last_seen_seconds_ago:.1f}s", lambda w: w.last_seen_seconds_ago),
    "capabilities": Column(
        "b",
        lambda w: ",".join(f"{c.name}={c.value}" for c in w.capabilities),
        lambda w: [(c.name, c.value) for c in w.capabilities],
    ),
}
SORT_COLUMNS = tuple(COLUMNS)
_TEXT_COLUMNS = ("worker", "capabilities")  # sorted A to Z by default; the others largest first
_COLUMN_BY_KEY = {column.key: title for title, column in COLUMNS.items()}

HELP_LINE = "h help  q quit  < > sort column  R reverse order"
HELP_TEXT = [
    "Keys:",
    "  q        quit (Ctrl-C too)",
    "  h        show or hide this help",
    "  < >      sort by the column left or right of the sorted one",
    "  R        reverse the order",
    "  " + "  ".join(f"{column.key} {title}" for title, column in list(COLUMNS.items())[:6]),
    "  " + "  ".join(f"{column.key} {title}" for title, column in list(COLUMNS.items())[6:]),
    "Columns: agt_* the worker's agent; cpu, rss its processor, which runs the tasks;",
    "  kills: tasks stopped for going over its memory limit (docs/memory.md);",
    "  sent: tasks the scheduler assigned it; queued, run: tasks queued and running",
    "  there; susp: tasks waiting for the tasks they submitted; seen: last heartbeat",
]


def _worker_table(workers: Sequence[WorkerSnapshot], sort_by: str, descending: bool, width: int) -> List[str]:
    _, _, sort_key = COLUMNS[sort_by]
    ordered = sorted(workers, key=lambda w: show(w.worker_id))  # ties in worker order
    ordered.sort(key=sort_key, reverse=descending)
    titles = [f"[{title}]" if title == sort_by else title for title in COLUMNS]
    rows = [[column.cell(worker) for column in COLUMNS.values()] for worker in ordered]
    widths = [max([len(title), *(len(row[index]) for row in rows)]) for index, title in enumerate(titles)]
    rest = sum(w + 1 for w in widths[1:-1])  # the numbers, each after a space
    widths[0] = max(len(titles[0]), min(widths[0], _MAX_WORKER_WIDTH, max(_MIN_WORKER_WIDTH, width - rest - 1)))

    def line(cells: Sequence[str]) -> str:
        first, *numbers, last = cells
        middle = " ".join(cell.rjust(w) for cell, w in zip(numbers, widths[1:-1], strict=True))
        return f"{_cut(first, widths[0]).ljust(widths[0])} {middle} {last}".rstrip()

    return [line(titles)] + [line(row) for row in rows]


class TopView:
    """What the screen shows besides the snapshot: the sort column and order, and whether help is open.

    `on_key` takes one key; it returns False when the key asks to quit."""

    def __init__(self, sort_by: str = "worker", descending: Optional[bool] = None) -> None:
        self.sort_by = sort_by
        self.descending = sort_by not in _TEXT_COLUMNS if descending is None else descending
        self.help = False

    def _sort(self, title: str) -> None:
        if title == self.sort_by:
            self.descending = not self.descending
        else:
            self.sort_by = title
            self.descending = title not in _TEXT_COLUMNS

    def on_key(self, key: str) -> bool:
        if key in ("q", "\x03"):
            return False
        titles = list(COLUMNS)
        if key == "h" or key == "?":
            self.help = not self.help
        elif key == "R":
            self.descending = not self.descending
        elif key in ("<", ">"):
            step = -1 if key == "<" else 1
            self._sort(titles[(titles.index(self.sort_by) + step) % len(titles)])
        elif key in _COLUMN_BY_KEY:
            self._sort(_COLUMN_BY_KEY[key])
        return True

    def status_line(self) -> str:
        order = "largest first" if self.descending else "smallest first"
        if self.sort_by in _TEXT_COLUMNS:
            order = "Z to A" if self.descending else "A to Z"
        return f"{HELP_LINE}   sorted by {self.sort_by}, {order}"


def render(
    snapshot: StateSnapshot,
    sort_by: str = "worker",
    width: int = 1000,
    view: Optional[TopView] = None,
    message_rows: Optional[int] = None,
) -> str:
    """The whole screen for one snapshot: scheduler, task and message counters, then the workers. No line is
    longer than ``width``; at most ``message_rows`` message types are shown (None: all)."""
    view = view or TopView(sort_by)
    blocks = [
        _block(
            "scheduler",
            [
                ("cpu", f"{snapshot.scheduler_cpu:.1f}%"),
                ("rss", show_bytes(snapshot.scheduler_rss_bytes)),
                ("clients", f"{snapshot.clients:,}"),
                ("workers", f"{len(snapshot.workers):,}"),
            ],
        ),
        _block("task states", _counters(snapshot.task_states)),
        _messages(snapshot, message_rows),
    ]
    head = [*_side_by_side(blocks, width), _client_shares(snapshot)]
    rule = "-" * min(width, max(len(line) for line in head))
    lines = [*head, rule, view.status_line()]
    if view.help:
        lines += HELP_TEXT
    lines += _managers(snapshot)
    lines += ["", f"Total {len(snapshot.workers)} worker(s)"]
    lines += _worker_table(snapshot.workers, view.sort_by, view.descending, width)
    return "\n".join(line[:width] for line in lines) + "\n"


def _managers(snapshot: StateSnapshot) -> List[str]:
    """The worker managers (none: nothing), each with the scheduler's target, and each group under its manager."""
    if not snapshot.managers:
        return []
    lines = ["", f"Total {len(snapshot.managers)} worker manager(s)"]
    groups = group_rows(snapshot)
    for row in manager_rows(snapshot):
        lines.append(
            f"{row['manager']} {row['kind'] or '?'}: {row['groups']} group(s), target {row['target']}, at most "
            f"{row['max_groups']} of {row['workers_per_group']} worker(s), "
            f"capabilities {row['capabilities'] or 'none'}, "
            f"seen {row['last_seen_seconds']:.1f}s ago"
        )
        for group in (g for g in groups if g["manager"] == row["manager"]):
            lines.append(
                f"  {group['group']} {group['state']}: {group['workers']}/{group['expected_workers']} worker(s), "
                f"{group['tasks']:,} task(s) {group['detail']}".rstrip()
            )
    return lines


def waiting_lines(address: str, problem: str = "") -> List[str]:
    """What scaler_top says before the first snapshot: that none came yet, and what is wrong if it is known."""
    return [f"scaler_top: no snapshot from {address} yet", *([f"scaler_top: {problem}"] if problem else [])]


def waiting_screen(address: str, view: TopView, width: int, problem: str = "") -> str:
    lines = [*waiting_lines(address, problem), "", HELP_LINE, *(HELP_TEXT if view.help else [])]
    return "\n".join(line[:width] for line in lines) + "\n"


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
        f"snapshot the scheduler publishes. Keys: {HELP_LINE}; a column's letter sorts by it (h lists them).",
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
    parser.add_argument(
        "--sort-by", choices=SORT_COLUMNS, default="worker", help="order of the worker table (default: %(default)s)"
    )
    from scaler.protocol.security import add_security_arguments  # pyzmq only when running

    add_security_arguments(parser)  # a monitor key, when the cluster runs with keys
    add_common_arguments(parser, event_loop=False)
    parser.set_defaults(logging_level="WARNING", logging_paths=["/dev/stderr"])  # stdout holds the screen
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit status: 0 after q, Ctrl-C or a --timeout that followed at least one snapshot, 1 if none came."""
    parser = build_parser()
    args = parse_arguments(parser, CONFIG_SECTION, argv)
    setup_logging(args.logging_level, args.logging_paths, args.logging_config_file)

    from scaler.monitor.subscription import SnapshotSubscription  # pyzmq only when running
    from scaler.protocol.errors import ScalerError
    from scaler.protocol.security import security_from_arguments

    view = TopView(args.sort_by)
    try:
        with SnapshotSubscription(args.address, security_from_arguments(args)) as subscription:
            if sys.stdout.isatty() and sys.stdin.isatty():
                return _interactive(subscription, view, args.timeout)
            return _printed(subscription, view, args.timeout)
    except ScalerError as error:  # refused by the scheduler, or keys it cannot use
        print(f"scaler_top: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


def _no_snapshot(address: str, timeout: Optional[float], shown: int) -> int:
    print(f"scaler_top: no snapshot from {address} for {timeout} seconds", file=sys.stderr)
    return 0 if shown else 1


def _printed(subscription: Any, view: TopView, timeout: Optional[float]) -> int:
    """Not on a terminal: every screen printed after the one before, no keys. Until the first snapshot, stderr
    says that none came yet (after a moment), and why if the address is known to be wrong."""
    shown = 0
    told: List[str] = []
    start = time.monotonic()
    while True:
        wait = timeout
        if not shown:  # wake now and then to say why nothing shows
            left = math.inf if timeout is None else timeout - (time.monotonic() - start)
            wait = max(0.0, min(left, _TELL_WAITING_SECONDS))
        snapshot = subscription.receive(wait)
        if snapshot is not None:
            sys.stdout.write(render(snapshot, view=view) + "\n")
            sys.stdout.flush()
            shown += 1
            continue
        if shown or (timeout is not None and time.monotonic() - start >= timeout):
            return _no_snapshot(subscription.address, timeout, shown)
        waiting = waiting_lines(subscription.address, subscription.not_a_monitor)
        if waiting != told:
            told = waiting
            print("\n".join(waiting), file=sys.stderr, flush=True)


def _interactive(subscription: Any, view: TopView, timeout: Optional[float]) -> int:
    from scaler.monitor.terminal import Terminal

    shown = 0
    snapshot: Optional[StateSnapshot] = None
    last_snapshot_at = time.monotonic()
    problem = ""
    with Terminal() as terminal:
        redraw = True
        while True:
            if redraw:
                width = terminal.width()
                screen = render(snapshot, width=width, view=view, message_rows=_MESSAGE_ROWS) if snapshot else None
                problem = subscription.not_a_monitor
                terminal.draw(screen or waiting_screen(subscription.address, view, width, problem))
                redraw = False
            key = terminal.read_key(_KEY_POLL_SECONDS)
            if key is not None:
                if not view.on_key(key):
                    return 0
                redraw = True
            received = subscription.receive(_KEY_POLL_SECONDS)
            if received is not None:
                snapshot, last_snapshot_at, redraw = received, time.monotonic(), True
                shown += 1
            elif timeout is not None and time.monotonic() - last_snapshot_at >= timeout:
                break
            redraw = redraw or terminal.resized() or (snapshot is None and subscription.not_a_monitor != problem)
    return _no_snapshot(subscription.address, timeout, shown)


if __name__ == "__main__":
    sys.exit(main())
