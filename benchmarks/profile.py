#!/usr/bin/env python3
"""Profile this project's processes during one workload and say where each task's CPU goes.

    python3 benchmarks/profile.py                      # map_noop of 50,000 tasks
    python3 benchmarks/profile.py round_trip 2000 --rate 500

Runs ``runners/run_scaler.py WORKLOAD SIZE`` under py-spy (``record --subprocesses
--threads --format raw``, from the tooling virtualenv), so the client, the scheduler,
the storage server, the worker agents and the processors are all sampled, without
any change to the package code. Then it groups the samples by process role and by
thread, drops start-up samples (imports), and prints, per role, the CPU per task
and the functions that take it (self time, and inclusive time of this project's
own functions), in microseconds per task. The raw samples stay in
benchmarks/logs/profile-WORKLOAD.raw; the summary is written to
benchmarks/results/profile-WORKLOAD.txt.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402  (virtualenvs and paths)

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def role_of(process_label: str) -> str:
    if "scaler.scheduler" in process_label:
        return "scheduler"
    if "scaler.storage" in process_label:
        return "storage"
    if "scaler.cluster" in process_label:
        return "cluster supervisor"
    if "worker_main" in process_label:
        return "agent"
    if "multiprocessing" in process_label or "spawn_main" in process_label:
        return "processor"
    if "run_scaler.py" in process_label or process_label.endswith(':""'):  # the root's command line may be unread
        return "client"
    return "other"


def frame_name(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "lib/python3.12/", "lib/python3.10/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('function')}"


# Leaf frames where a thread waits rather than works. py-spy's idle detection does not see these waits in
# every process it follows, so they are dropped here; what is left is scaled to the CPU time psutil measured.
_WAITS = {
    "selectors.py:EpollSelector.select",
    "selectors.py:PollSelector.select",
    "zmq/sugar/poll.py:Poller.poll",
    "zmq/sugar/poll.py:select",
    "multiprocessing/connection.py:Connection._recv",
    "multiprocessing/connection.py:wait",
    "threading.py:Condition.wait",
    "threading.py:Event.wait",
    "threading.py:Thread.join",
    "threading.py:Thread._wait_for_tstate_lock",
    "zmq/utils/garbage.py:GarbageCollectorThread.run",
    "concurrent/futures/_base.py:Future.result",
    "concurrent/futures/_base.py:wait",
}


def analyse(raw_path: Path, rate: int, tasks: int, top: int, measured: Dict[str, float]) -> str:
    """``measured``: role -> CPU µs per task from psutil in the same run (the totals the samples are scaled to)."""
    self_time: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    inclusive: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    threads: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    waits: collections.Counter = collections.Counter()
    processes: Dict[str, set] = collections.defaultdict(set)
    skipped = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        process_label, thread, names = "", "", []
        for frame in stack_text.split(";"):
            if frame.startswith("process "):
                process_label, names = frame, []  # a child's stack follows its ancestors' labels
            elif frame.startswith("thread ("):
                thread = frame.split(":", 1)[1].strip() if ":" in frame else "thread"
            else:
                names.append(frame_name(frame))
        role = role_of(process_label)
        processes[role].add(process_label.split(":", 1)[0])
        if not names or any(name.endswith((":_find_and_load", ":wait_ready", ":whoami")) for name in names):
            skipped += count
            continue
        if names[-1] in _WAITS:
            waits[role] += count
            continue
        totals[role] += count
        threads[role][f"{thread}: {_thread_name(names)}"] += count
        self_time[role][names[-1]] += count
        for name in set(names):
            inclusive[role][name] += count

    def sampled(samples: int) -> float:
        return samples / rate / tasks * 1e6

    lines = [
        f"{tasks:,} tasks, py-spy at {rate} Hz; {sum(totals.values()):,} working samples, "
        f"{sum(waits.values()):,} waiting samples dropped, {skipped:,} start-up samples dropped.",
        "Per role, the working samples are scaled to the CPU time psutil measured for that role in the same run",
        "(user + system); 'sampled' is what the working samples alone would say.",
        "",
        f"  {'role':<20} {'psutil µs/task':>15} {'sampled µs/task':>16}",
    ]
    order = ["client", "scheduler", "storage", "agent", "processor", "cluster supervisor", "other"]
    roles = sorted(set(totals) | set(measured), key=lambda r: order.index(r) if r in order else 99)
    for role in roles:
        lines.append(f"  {role:<20} {measured.get(role, 0.0):15.1f} {sampled(totals[role]):16.1f}")
    lines.append(f"  {'total':<20} {sum(measured.values()):15.1f} {sampled(sum(totals.values())):16.1f}")
    for role in sorted(totals, key=lambda r: -measured.get(r, 0.0)):
        scale = measured.get(role, 0.0) / totals[role] if totals[role] else 0.0

        def per_task(samples: int) -> float:
            return samples * scale  # noqa: B023

        lines += ["", f"== {role}: {measured.get(role, 0.0):.1f} µs/task (psutil) =="]
        lines.append("  by thread (thread name: outermost frame of this project):")
        for name, count in threads[role].most_common(6):
            lines.append(f"    {per_task(count):8.1f}  {name}")
        lines.append("  self time (where the CPU is spent):")
        for name, count in self_time[role].most_common(top):
            lines.append(f"    {per_task(count):8.1f}  {name}")
        lines.append("  inclusive time of this project's functions:")
        own = [(name, count) for name, count in inclusive[role].items() if "scaler/" in name]
        for name, count in sorted(own, key=lambda item: -item[1])[:top]:
            lines.append(f"    {per_task(count):8.1f}  {name}")
    return "\n".join(lines) + "\n"


def _thread_name(names: List[str]) -> str:
    for name in names:
        if "scaler/" in name:
            return name
    return names[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", nargs="?", default="map_noop", choices=list(run.SIZES))
    parser.add_argument("size", nargs="?", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=250, help="samples per second per process")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--working-tree", action="store_true", help="profile the working tree, not the last commit")
    parser.add_argument("--commit", default="HEAD", help="profile this commit (default: HEAD)")
    parser.add_argument("--report-only", action="store_true", help="summarise the last raw samples again")
    args = parser.parse_args()
    if args.report_only:
        return report(args.workload, args.size, args.rate, args.top)

    def log(message: str) -> None:
        print(message, flush=True)

    source = run.our_source(args.working_tree, args.commit)
    python = run.ensure_env(*run.ENGINES["scaler"][::2], False, log, source)
    tooling = run.ensure_env(*run.TOOLING, rebuild=False, log=log)
    py_spy = tooling.parent / "py-spy"
    run.LOGS.mkdir(exist_ok=True)
    raw_path = run.LOGS / f"profile-{args.workload}.raw"
    result_path = run.LOGS / f"profile-{args.workload}.json"
    environment = dict(os.environ, PYTHONPATH=str(run.RUNNERS))
    command = [
        str(py_spy), "record", "--subprocesses", "--threads", "--format", "raw", "--rate", str(args.rate),
        "--output", str(raw_path), "--",
        str(python), str(run.RUNNERS / "run_scaler.py"), args.workload, str(args.size), "--out", str(result_path),
    ]  # fmt: skip
    process = subprocess.Popen(command, env=environment, start_new_session=True)
    try:
        process.wait(args.timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    return report(args.workload, args.size, args.rate, args.top, source)


def report(workload: str, size: int, rate: int, top: int, source: str = "") -> int:
    """Summarise the raw samples and the runner's result of the last profile of ``workload``."""
    raw_path = run.LOGS / f"profile-{workload}.raw"
    result_path = run.LOGS / f"profile-{workload}.json"
    result = json.loads(result_path.read_text())
    measured = {role: entry["cpu_us_per_task"] for role, entry in result.get("cpu", {}).items()}
    summary = analyse(raw_path, rate, size, top, measured)
    header = (
        f"profile of {workload} ({size:,} tasks) under py-spy{', ' + run.OURS + ' from ' + source if source else ''}: "
        f"{json.dumps(result.get('metrics'))}\n"
        f"(sampling slows every process; the benchmark's own numbers are in results/latest.json)\n\n"
    )
    out = run.RESULTS / f"profile-{workload}.txt"
    out.write_text(header + summary)
    print(header + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
