"""The load simulator's side of ``benchmarks/run.py``: its scenarios, their figures, and the kept figures.

    python3 benchmarks/run.py --simulator            # every scenario, 3 repetitions: results/simulator.json
    python3 benchmarks/run.py --simulator --quick    # smaller sizes, 1 repetition: results/simulator-quick.json
    python3 benchmarks/run.py --simulator --keep     # ... and keep its figures at 1,000 workers as the reference

Each scenario runs ``runners/run_simulator.py`` in this project's virtualenv: a real scheduler process (and
the storage server it starts) against simulated workers and clients (``runners/sim_peers.py``). The
configurations are interleaved (each repetition in another order) and each run waits, boundedly, for the
machine to be quiet first (its load average is recorded). A full run rewrites the simulator's section of
docs/benchmarks.md (between the two markers below) and compares its figures at 1,000 workers with the kept ones
(``results/simulator-kept.json``), printing the comparison. Only the standard library is used here.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from tables import number as _format
from tables import table as _table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LOGS = HERE / "logs"
KEPT = RESULTS / "simulator-kept.json"
SECTION_START = "<!-- simulator: start (written by benchmarks/run.py --simulator) -->"
SECTION_END = "<!-- simulator: end -->"
WORKER_COUNTS = (2, 10, 100, 1000)
CLIENT_COUNTS = (1, 10, 100)
QUIET_LOAD = 1.0  # the 1-minute load average the first run waits for (600 s at most)
QUIET_WAIT_SECONDS = 600.0
# before each other run: the load of the run before it takes a minute to fade (it counts in the 1-minute average)
QUIET_LOAD_BETWEEN = 1.5
QUIET_WAIT_BETWEEN_SECONDS = 60.0
RUN_TIMEOUT_SECONDS = 1800.0
REGRESSION = 0.2  # a kept figure worse by more than this is flagged


def configurations(quick: bool) -> List[Tuple[str, List[str]]]:
    """(name, arguments of run_simulator.py) of every configuration, in order."""
    tasks = 20_000 if quick else 200_000
    configs = [
        (f"routing {workers}w {clients}c",
         ["routing", "--workers", str(workers), "--clients", str(clients), "--tasks", str(tasks)])
        for workers in WORKER_COUNTS
        for clients in CLIENT_COUNTS
    ]  # fmt: skip
    configs += [
        ("heartbeats idle", ["heartbeats", "--workers", "1000", "--interval", "0.1", "--seconds", "5"]),
        ("heartbeats holding", ["heartbeats", "--workers", "1000", "--interval", "0.1", "--held", "100",
                                "--seconds", "5"]),
        ("peer memory", ["peer_memory", "--workers", "1000", "--clients", "100"]),
        ("queue memory", ["queue_memory", "--tasks", str(1_000_000 if quick else 10_000_000)]),
        ("new worker", ["new_worker", "--workers", "1000", "--joins", "3" if quick else "5"]),
    ]  # fmt: skip
    return configs


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_for_quiet(threshold: float, limit: float, log: Callable[[str], None]) -> float:
    """Wait (``limit`` seconds at most) for the 1-minute load average to drop below ``threshold``; return it."""
    deadline = time.monotonic() + limit
    load = load_average()
    if load >= threshold:
        log(f"load average {load:.2f}: waiting up to {limit:.0f} s for it to drop below {threshold}")
    while load >= threshold and time.monotonic() < deadline:
        time.sleep(5)
        load = load_average()
    return load


def run_scenario(python: Path, runners: Path, name: str, arguments: List[str], marker_variable: str,
                 kill_leftovers: Callable[[str], int]) -> Dict[str, Any]:  # fmt: skip
    """One scenario in a subprocess of the virtualenv (its own process group, killed on the time limit)."""
    marker = uuid.uuid4().hex
    environment = dict(os.environ, PYTHONPATH=str(runners), **{marker_variable: marker})
    LOGS.mkdir(exist_ok=True)
    out = Path(tempfile.mkstemp(prefix="simulator-", suffix=".json")[1])
    log_path = LOGS / f"simulator-{name.replace(' ', '-')}.log"
    command = [str(python), str(runners / "run_simulator.py"), *arguments, "--out", str(out), "--log", str(log_path)]
    load_before = load_average()
    started = time.monotonic()
    process = subprocess.Popen(command, env=environment, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(RUN_TIMEOUT_SECONDS)
        record = json.loads(out.read_text()) if out.stat().st_size else {"status": "error", "detail": "no result"}
    except subprocess.TimeoutExpired:
        record = {"status": "timeout", "detail": f"no result within {RUN_TIMEOUT_SECONDS:g} s"}
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        kill_leftovers(marker)
        out.unlink(missing_ok=True)
    record.update(name=name, wall_seconds=round(time.monotonic() - started, 1), load_before=load_before,
                  load_after=load_average())  # fmt: skip
    return record


def run_all(python: Path, runners: Path, quick: bool, repetitions: int, marker_variable: str,
            kill_leftovers: Callable[[str], int], log: Callable[[str], None], json_path: Path,
            data: Dict[str, Any]) -> Dict[str, Any]:  # fmt: skip
    configs = configurations(quick)
    data.update(configurations=[name for name, _ in configs], runs=[], repetitions=repetitions)
    data["load_at_start"] = wait_for_quiet(QUIET_LOAD, QUIET_WAIT_SECONDS, log)
    for repetition in range(repetitions):
        shift = (repetition * 5) % len(configs)
        for name, arguments in configs[shift:] + configs[:shift]:
            if data["runs"]:
                wait_for_quiet(QUIET_LOAD_BETWEEN, QUIET_WAIT_BETWEEN_SECONDS, log)
            record = run_scenario(python, runners, name, arguments, marker_variable, kill_leftovers)
            record["repetition"] = repetition
            data["runs"].append(record)
            shown = ", ".join(f"{k}={_format(v)}" for k, v in record.get("metrics", {}).items())
            log(f"rep {repetition + 1} {name:<22} {record['status']:<7} load {record['load_before']:.2f} "
                f"{shown or record.get('detail', '')}"[:260])  # fmt: skip
            json_path.write_text(json.dumps(data, indent=1))
    data["summary"] = summarize(data["runs"])
    json_path.write_text(json.dumps(data, indent=1))
    return data


def summarize(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """name -> {status, metrics: {metric: {median, min, max}}}."""
    summary: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        entry = summary.setdefault(run["name"], {"ok": [], "details": []})
        if run["status"] == "ok":
            entry["ok"].append(run["metrics"])
        else:
            entry["details"].append(run.get("detail", run["status"]))
    for entry in summary.values():
        ok = entry.pop("ok")
        entry["status"] = "ok" if ok else "error"
        entry["runs"] = len(ok)
        entry["metrics"] = {
            metric: {"median": statistics.median(values), "min": min(values), "max": max(values)}
            for metric in sorted({key for metrics in ok for key in metrics})
            if (values := [metrics[metric] for metrics in ok if isinstance(metrics.get(metric), (int, float))])
        }
    return summary


def _median(summary: Dict[str, Any], name: str, metric: str) -> Optional[float]:
    entry = summary.get(name)
    if not entry or entry["status"] != "ok" or metric not in entry["metrics"]:
        return None
    return entry["metrics"][metric]["median"]


def _cell(summary: Dict[str, Any], name: str, metric: str, scale: float = 1.0) -> str:
    entry = summary.get(name)
    if not entry:
        return "not run"
    if entry["status"] != "ok":
        return "error"
    stats = entry["metrics"].get(metric)
    if stats is None:
        return "n/a"
    if stats["min"] == stats["max"] or entry["runs"] < 2:
        return _format(stats["median"] * scale)
    return f"{_format(stats['median'] * scale)} ({_format(stats['min'] * scale)}–{_format(stats['max'] * scale)})"


def key_figures(summary: Dict[str, Any]) -> Dict[str, Tuple[Optional[float], bool]]:
    """The figures at 1,000 workers that later runs are compared with, each with whether higher is better; the
    ratios of 1,000 workers to 10 in the same run carry across machines, the rest only on the same one."""
    figures: Dict[str, Tuple[Optional[float], bool]] = {}
    for clients in CLIENT_COUNTS:
        at_1000 = _median(summary, f"routing 1000w {clients}c", "tasks_per_s")
        at_10 = _median(summary, f"routing 10w {clients}c", "tasks_per_s")
        figures[f"tasks/s at 1,000 workers, {clients} client(s)"] = (at_1000, True)
        figures[f"1,000 workers / 10, {clients} client(s)"] = (at_1000 / at_10 if at_1000 and at_10 else None, True)
        cpu = _median(summary, f"routing 1000w {clients}c", "scheduler_cpu_us_per_task")
        figures[f"scheduler µs per task at 1,000 workers, {clients} client(s)"] = (cpu, False)
    for name, label in (("heartbeats idle", ""), ("heartbeats holding", ", holding 100 tasks each")):
        cpu = _median(summary, name, "scheduler_cpu_us_per_heartbeat")
        figures[f"scheduler µs per heartbeat of 1,000 workers{label}"] = (cpu, False)
    figures["scheduler bytes per worker"] = (_median(summary, "peer memory", "bytes_per_worker"), False)
    figures["scheduler bytes per queued task"] = (_median(summary, "queue memory", "bytes_per_task"), False)
    for case, label in (("queued", "tasks queued"), ("on_workers", "none queued")):
        seconds = _median(summary, "new worker", f"{case}_seconds")
        figures[f"seconds to a new worker's first task, {label}"] = (seconds, False)
    return figures


def compare_with_kept(data: Dict[str, Any]) -> str:
    """The kept figures against this run's, each worse by more than `REGRESSION` flagged."""
    if not KEPT.exists():
        return f"No kept figures yet ({KEPT.relative_to(HERE.parent)}): run with --keep to keep these."
    kept = json.loads(KEPT.read_text())
    rows = []
    for name, (after, higher_is_better) in key_figures(data["summary"]).items():
        before = kept["figures"].get(name)
        if before is None or after is None or before <= 0:
            rows.append([name, _format(before), _format(after), "–"])
            continue
        change = after / before
        worse = change < 1 - REGRESSION if higher_is_better else change > 1 + REGRESSION
        rows.append([name, _format(before), _format(after), f"×{change:.2f}" + (" **worse**" if worse else "")])
    return _table(rows, [f"figure (kept: {kept['commit']}, {kept['date']}, {kept['cpu_model']})", "kept", "now",
                         "now / kept"])  # fmt: skip


def keep(data: Dict[str, Any]) -> None:
    """Keep this run's figures at 1,000 workers: the next runs are compared with them."""
    machine = data["machine"]
    figures = {name: value for name, (value, _) in key_figures(data["summary"]).items()}
    kept = {"commit": machine["commit"], "date": machine["date"], "cpu_model": machine["cpu_model"], "figures": figures}
    KEPT.write_text(json.dumps(kept, indent=1) + "\n")


def section(data: Dict[str, Any]) -> str:
    """The simulator's section of docs/benchmarks.md, from a results file of a full run."""
    summary = data["summary"]
    machine = data["machine"]
    routing_rows = []
    for workers in WORKER_COUNTS:
        row = [f"{workers:,}"]
        for clients in CLIENT_COUNTS:
            name = f"routing {workers}w {clients}c"
            row.append(f"{_cell(summary, name, 'tasks_per_s')}; {_cell(summary, name, 'scheduler_cpu_us_per_task')} µs")
        routing_rows.append(row)
    flat = []
    for clients in CLIENT_COUNTS:
        at_1000 = _median(summary, f"routing 1000w {clients}c", "tasks_per_s")
        at_10 = _median(summary, f"routing 10w {clients}c", "tasks_per_s")
        if at_1000 and at_10:
            flat.append(f"{_clients(clients)}: {at_1000 / at_10:.0%}")
    loads = [run["load_before"] for run in data["runs"]]
    queue = summary.get("queue memory", {}).get("metrics", {})
    queued = int(queue["tasks"]["median"]) if "tasks" in queue else 0
    beats = _median(summary, "heartbeats idle", "heartbeats_per_s")
    figure_rows = [
        [f"scheduler CPU per worker heartbeat (1,000 workers, {_format(beats)} heartbeats/s)",
         f"{_cell(summary, 'heartbeats idle', 'scheduler_cpu_us_per_heartbeat')} µs"],
        ["... while each worker holds 100 tasks",
         f"{_cell(summary, 'heartbeats holding', 'scheduler_cpu_us_per_heartbeat')} µs"],
        ["scheduler memory per connected worker (1,000)", f"{_cell(summary, 'peer memory', 'bytes_per_worker')} B"],
        ["scheduler memory per connected client (100)", f"{_cell(summary, 'peer memory', 'bytes_per_client')} B"],
        [f"scheduler memory per queued task ({queued:,} queued)",
         f"{_cell(summary, 'queue memory', 'bytes_per_task')} B"],
        ["scheduler CPU per queued task (taking them in)",
         f"{_cell(summary, 'queue memory', 'scheduler_cpu_us_per_queued_task')} µs"],
        ["a new worker's first task among 1,000 busy ones, tasks waiting in the scheduler",
         _first_task(summary, "queued")],
        ["... no task waiting in the scheduler (balancing moves them)", _first_task(summary, "on_workers")],
    ]  # fmt: skip
    return f"""{SECTION_START}
## One scheduler, many workers and clients (the load simulator)

`python3 benchmarks/run.py --simulator` drives one real scheduler process (and its storage server) with
simulated workers and clients: DEALER sockets in one process that speak the real protocol (Hello, heartbeats
that say what each worker holds, task batches, results, balancing), answering each task at once, so that the
scheduler alone is measured ([benchmarks/README.md](../benchmarks/README.md#the-load-simulator)).

- Raw numbers: `benchmarks/results/{Path(data["json"]).name}`; {machine["cpu_model"]}, {machine["cores"]} cores.
- This project built from {machine.get("scaler_source", machine["commit"])}; {machine["date"]}.
- {data["repetitions"]} repetitions, medians with min–max in parentheses; load average
  {min(loads):.2f}–{max(loads):.2f} before the runs: every figure carries the noise of the other work on this
  machine's 2 cores.

**Routing capacity**: tasks/s through the scheduler with workers that answer at once (clients submit
{int(_median(summary, 'routing 10w 1c', 'tasks') or 0):,} tasks in all, in batches of 1,000, at most 20,000
unanswered), and the scheduler's CPU per task (its process, all threads). The simulator takes the other core,
so the scheduler's CPU per task is the steadier figure.

{_table(routing_rows, ["workers", *[f"{_clients(c)}: tasks/s; scheduler CPU/task" for c in CLIENT_COUNTS]])}

At 1,000 workers, as a share of the throughput at 10: {", ".join(flat) or "not measured"}.

{_table(figure_rows, ["figure", "value"])}
{SECTION_END}
"""




def _first_task(summary: Dict[str, Any], case: str) -> str:
    """How soon new workers got their first task, in ms, and how many got none in time."""
    unserved = _median(summary, "new worker", f"{case}_unserved")
    seconds = summary.get("new worker", {}).get("metrics", {}).get(f"{case}_seconds")
    text = f"{_cell(summary, 'new worker', f'{case}_seconds', 1000)} ms" if seconds else ""
    if unserved:
        never = f"{unserved:g} of each run's newcomers got no task within 30 s"
        text = f"{text}; {never}" if text else never
    return text or _cell(summary, "new worker", f"{case}_seconds")


def _clients(count: int) -> str:
    return f"{count} client{'s' if count > 1 else ''}"


def replace_section(doc: Path, text: str) -> None:
    """Put ``text`` in place of the simulator's section of ``doc`` (appended if it has none)."""
    current = doc.read_text() if doc.exists() else ""
    if SECTION_START in current and SECTION_END in current:
        head, rest = current.split(SECTION_START, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        current = head + text + ("\n" + tail if tail else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    doc.write_text(current)


def kept_section(doc: Path) -> str:
    """The simulator's section as the page has it now (kept when run.py rewrites the rest of the page)."""
    current = doc.read_text() if doc.exists() else ""
    if SECTION_START not in current or SECTION_END not in current:
        return ""
    return SECTION_START + current.split(SECTION_START, 1)[1].split(SECTION_END, 1)[0] + SECTION_END + "\n"
