#!/usr/bin/env python3
"""Run the same workloads on this project, its peers and two no-network ceilings; print and record the results.

    python3 benchmarks/run.py                 # full sizes, 3 repetitions, regenerates docs/benchmarks.md
    python3 benchmarks/run.py --quick         # sizes / 10, 1 repetition: a look in minutes (results/quick.json)
    python3 benchmarks/run.py --workloads map_noop round_trip --engines scaler dask
    python3 benchmarks/run.py --report-only   # redo table, chart and docs from results/latest.json
    python3 benchmarks/run.py --engines scaler --baseline REV --workloads map_noop --out compare  # before/after
    python3 benchmarks/run.py --simulator     # the load simulator: one scheduler, up to 1,000 workers (simulator.py)

Each engine lives in its own virtualenv under benchmarks/.envs/ (created here with
``python3 -m venv`` and pip, rebuilt when its requirements change; this project's
is rebuilt whenever its sources change). Each (workload, engine, repetition) runs in
a fresh subprocess of that virtualenv (``runners/run_<engine>.py``), which starts
the engine's local cluster with 2 workers, runs the workload and writes JSON.
Engines are interleaved (round robin per repetition, rotating the order) so that
the machine's drift hits all alike. Every run has a time limit: then its process
group is killed, and any process it left behind (found by a marker in its
environment) is killed too. Only the standard library is used here; the chart
is drawn by ``chart.py`` in a tooling virtualenv that has matplotlib.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import simulator  # noqa: E402  (the load simulator's scenarios and figures)
from tables import number as _format  # noqa: E402
from tables import table as _table  # noqa: E402

REPO = HERE.parent
ENVS = HERE / ".envs"
RUNNERS = HERE / "runners"
RESULTS = HERE / "results"
LOGS = HERE / "logs"
DOC = REPO / "docs" / "benchmarks.md"
MARKER_VARIABLE = "SCALER_BENCHMARK_RUN"
WORKERS = 2
PIP_TIMEOUT_SECONDS = 900

# scaler-monitor: scaler_ui, which watches the cluster in the monitored_map workload
OUR_PACKAGES = [
    "scaler-protocol", "scaler-client", "scaler-scheduler", "scaler-storage", "scaler-worker", "scaler-monitor",
]  # fmt: skip

# uvloop: the project's own extra, for --event-loop uvloop (the scaler-uvloop variant)
OUR_REQUIREMENTS = ["psutil", "uvloop", *[str(REPO / "packages" / name) for name in OUR_PACKAGES]]

# engine -> (virtualenv, runner script, what pip installs there)
ENGINES: Dict[str, Tuple[str, str, List[str]]] = {
    "scaler": ("scaler", "run_scaler.py", OUR_REQUIREMENTS),
    "scaler-uvloop": ("scaler", "run_scaler_uvloop.py", OUR_REQUIREMENTS),  # not run unless named in --engines
    "scaler-secure": ("scaler", "run_scaler_secure.py", OUR_REQUIREMENTS),  # CurveZMQ keys on every connection
    "opengris-scaler": ("opengris", "run_opengris.py", ["opengris-scaler", "psutil"]),
    "dask": ("dask", "run_dask.py", ["dask[distributed]", "psutil"]),
    "processpool": ("baseline", "run_processpool.py", ["psutil"]),
    "mp-pool": ("baseline", "run_mppool.py", ["psutil"]),
    "joblib": ("joblib", "run_joblib.py", ["joblib", "psutil"]),
    # this project built from another commit (--baseline REV): before and after a change, interleaved in one run
    "scaler-baseline": ("scaler-baseline", "run_scaler.py", OUR_REQUIREMENTS),
}
OURS = "scaler"
BASELINE = "scaler-baseline"
DEFAULT_ENGINES = ["scaler", "scaler-secure", "opengris-scaler", "dask", "processpool", "mp-pool", "joblib"]
SECURE = "scaler-secure"
SECURE_TARGET = 0.8  # issue 14: with keys, at least 80% of the no-op map's throughput without
TOOLING = ("tooling", ["matplotlib", "py-spy"])  # chart.py; profile.py

# workload -> (full size, quick size)
SIZES: Dict[str, Tuple[int, int]] = {
    "map_noop": (100_000, 10_000),
    "submit_gather": (10_000, 1_000),
    "round_trip": (1_000, 200),
    "sleep": (1_000, 200),
    "big_args": (100, 20),
    "shared_object": (100, 20),
    "graph": (10_000, 1_000),
    "chain": (1_000, 200),
    "graph_vs_map": (100_000, 10_000),
    "monitored_map": (40_000, 8_000),
    "queued_memory": (1_000_000, 100_000),
    "executor_map": (100_000, 10_000),
}

# (workload, metric, label, higher is better)
METRICS: List[Tuple[str, str, str, bool]] = [
    ("map_noop", "tasks_per_s", "no-op map, tasks/s", True),
    ("submit_gather", "tasks_per_s", "submit + gather, tasks/s", True),
    ("round_trip", "median_ms", "round trip median, ms", False),
    ("round_trip", "p99_ms", "round trip p99, ms", False),
    ("sleep", "seconds", "10 ms sleeps, s", False),
    ("sleep", "efficiency", "10 ms sleeps, efficiency", True),
    ("big_args", "mb_per_s", "10 MB arguments, MB/s", True),
    ("shared_object", "effective_mb_per_s", "shared 10 MB object, effective MB/s", True),
    ("graph", "nodes_per_s", "reduction graph, nodes/s", True),
    ("chain", "nodes_per_s", "chain, nodes/s", True),
    ("graph_vs_map", "tree_vs_map", "reduction tree / no-op map, nodes/s per task/s", True),
    ("graph_vs_map", "mapreduce_vs_map", "wide map-reduce / no-op map, nodes/s per task/s", True),
    ("monitored_map", "off_per_s", "no-op map, nothing watching, tasks/s", True),
    ("monitored_map", "ui_per_s", "no-op map, scaler_ui on, tasks/s", True),
    ("monitored_map", "on_per_s", "no-op map, scaler_ui and a report on, tasks/s", True),
    ("monitored_map", "ui_vs_off", "no-op map with scaler_ui / not watched, tasks/s per task/s", True),
    ("monitored_map", "on_vs_off", "no-op map with scaler_ui and a report / not watched, tasks/s per task/s", True),
    ("queued_memory", "scheduler_bytes_per_task", "queued tasks: scheduler bytes/task", False),
    ("queued_memory", "client_bytes_per_task", "queued tasks: client bytes/task", False),
    ("executor_map", "calls_per_s", "Executor.map, calls/s", True),
    ("executor_map", "chunked_calls_per_s", "Executor.map chunks of 1000, calls/s", True),
]


def _target(workload: str, metric: str, size: int) -> Optional[Tuple[str, float, bool]]:
    """Issue 3's target for this project: (text, bound, higher is better); the sleep bound scales with the size."""
    targets = {
        ("map_noop", "tasks_per_s"): ("≥ 20,000 tasks/s", 20_000, True),
        ("submit_gather", "tasks_per_s"): ("≥ 10,000 tasks/s", 10_000, True),
        ("round_trip", "median_ms"): ("≤ 1 ms", 1.0, False),
        ("round_trip", "p99_ms"): ("≤ 5 ms", 5.0, False),
        ("big_args", "mb_per_s"): ("≥ 500 MB/s", 500, True),
        ("queued_memory", "scheduler_bytes_per_task"): ("≤ 1 KB/task", 1024, False),
        ("queued_memory", "client_bytes_per_task"): ("≤ 2 KB/task", 2048, False),
        ("graph_vs_map", "tree_vs_map"): ("≥ 0.95 (issue 20)", 0.95, True),
        ("graph_vs_map", "mapreduce_vs_map"): ("≥ 0.95 (issue 20)", 0.95, True),
        ("monitored_map", "on_vs_off"): ("≥ 0.95 (issue 31)", 0.95, True),
    }
    if (workload, metric) == ("sleep", "seconds"):
        bound = 5.3 * size / 1000
        return (f"≤ {bound:g} s", bound, False)
    return targets.get((workload, metric))


# --- virtualenvs ----------------------------------------------------------------------------------------------------


def _working_tree_digest() -> str:
    digest = hashlib.sha256()
    for name in OUR_PACKAGES:
        root = REPO / "packages" / name
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and relative.parts[0] in ("src", "pyproject.toml") and "__pycache__" not in path.parts:
                digest.update(str(relative).encode() + b"\0" + path.read_bytes())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"working tree over {head.stdout.strip()} (sources {digest.hexdigest()[:12]})"


def our_source(working_tree: bool, revision: str = "HEAD") -> str:
    """What this project's virtualenv is built from: packages/ of a commit (the last one), or the working tree.

    The last commit is the default: other people edit the working tree while a benchmark runs, and a half-edited
    tree may not even import.
    """
    if working_tree:
        return _working_tree_digest()
    tree = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", f"{revision}:packages"], capture_output=True, text=True, check=True
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%h", revision, "--", "packages"], capture_output=True, text=True
    ).stdout.strip()
    return f"commit {commit} (packages tree {tree[:12]})"


def _export_committed_packages(commit: str, env_name: str) -> Path:
    """Copy packages/ of a commit (only the distributions we install) out of git."""
    target = ENVS / f"src-{env_name}"
    if target.exists():
        subprocess.run(["rm", "-rf", str(target)], check=True)
    target.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, *[f"packages/{name}" for name in OUR_PACKAGES]],
        stdout=subprocess.PIPE,
    )
    subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError("git archive failed")
    return target / "packages"


def ensure_env(name: str, requirements: List[str], rebuild: bool, log, source: str = "") -> Path:
    """Create (or re-create) ``.envs/NAME`` with ``requirements``; return its python.

    ``source`` (this project's virtualenv only) says which sources to install; see `our_source`.
    """
    env = ENVS / name
    python = env / "bin" / "python"
    stamp_text = json.dumps({"python": platform.python_version(), "requirements": requirements, "source": source})
    stamp = env / ".benchmark-stamp"
    if not rebuild and python.exists() and stamp.exists() and stamp.read_text() == stamp_text:
        return python
    if source.startswith("commit"):
        exported = _export_committed_packages(source.split()[1], name)
        requirements = [
            str(exported / Path(requirement).name) if requirement.startswith(str(REPO / "packages")) else requirement
            for requirement in requirements
        ]
    log(f"building virtualenv {env.relative_to(REPO)} ({', '.join(Path(r).name for r in requirements)}) {source}")
    if env.exists():
        subprocess.run(["rm", "-rf", str(env)], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=PIP_TIMEOUT_SECONDS)
    LOGS.mkdir(exist_ok=True)
    with open(LOGS / f"pip-{name}.log", "w") as pip_log:
        subprocess.run(
            [str(python), "-m", "pip", "install", *requirements],
            check=True,
            timeout=PIP_TIMEOUT_SECONDS,
            stdout=pip_log,
            stderr=subprocess.STDOUT,
        )
    if source:  # a tree caught between two commits may not even import: say so now, not in every run
        check = subprocess.run(
            [str(python), "-c", "import scaler.client.client, scaler.scheduler.server, scaler.worker.worker_agent, "
             "scaler.cluster.combo"],
            capture_output=True, text=True,
        )  # fmt: skip
        if check.returncode != 0:
            raise SystemExit(
                f"{OURS} built from {source} does not import:\n{check.stderr.strip()[-1500:]}\n"
                "try --commit REV (an earlier commit) or --working-tree"
            )
    stamp.write_text(stamp_text)
    return python


# --- one run ------------------------------------------------------------------------------------------------------


def _processes_with_marker(marker: str) -> List[int]:
    found = []
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                if needle in file.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _kill_leftovers(marker: str) -> int:
    """SIGKILL every process that carries this run's marker (children that left the process group)."""
    killed = 0
    for _ in range(5):  # a dying supervisor may still start one more child
        pids = [pid for pid in _processes_with_marker(marker) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.2)
    return killed


def _load_average() -> Optional[float]:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def run_one(engine: str, workload: str, size: int, timeout: float) -> Dict[str, Any]:
    env_name, runner, _ = ENGINES[engine]
    python = ENVS / env_name / "bin" / "python"
    marker = uuid.uuid4().hex
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(RUNNERS)
    environment[MARKER_VARIABLE] = marker
    environment.pop("PYTHONSTARTUP", None)
    LOGS.mkdir(exist_ok=True)
    out_file = Path(tempfile.mkstemp(prefix="benchmark-", suffix=".json")[1])
    log_path = LOGS / f"{engine}-{workload}.log"
    record: Dict[str, Any]
    load_before = _load_average()
    started = time.monotonic()
    worker_option = ["--workers", str(WORKERS)]
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(
            [str(python), str(RUNNERS / runner), workload, str(size), "--out", str(out_file), *worker_option],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as a whole on timeout
        )
        timed_out = False
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
            leftovers = _kill_leftovers(marker)
    wall = time.monotonic() - started
    try:
        record = json.loads(out_file.read_text()) if out_file.stat().st_size else {}
    except (OSError, ValueError):
        record = {}
    finally:
        out_file.unlink(missing_ok=True)
    if timed_out:
        record = {"status": "timeout", "detail": f"no result within {timeout:g} s (process group killed)"}
    elif not record:
        record = {"status": "error", "detail": f"runner exited with code {process.returncode} and no result"}
    record.update(
        engine=engine,
        workload=workload,
        size=size,
        wall_seconds=round(wall, 3),
        load_before=load_before,
        load_after=_load_average(),
    )
    if leftovers:
        record["leftover_processes_killed"] = leftovers
    return record


# --- aggregation and report ---------------------------------------------------------------------------------------


def aggregate(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """workload -> engine -> {status, runs, metrics: {name: {median, min, max}}, cpu: {role: median µs/task}}."""
    summary: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for run in runs:
        entry = summary.setdefault(run["workload"], {}).setdefault(
            run["engine"], {"statuses": [], "ok": [], "size": run["size"], "details": []}
        )
        entry["statuses"].append(run["status"])
        if run["status"] == "ok":
            entry["ok"].append(run)
        elif run.get("detail"):
            entry["details"].append(run["detail"])
    for engines in summary.values():
        for entry in engines.values():
            ok = entry.pop("ok")
            statuses = entry["statuses"]
            entry["status"] = "ok" if ok else (statuses[0] if statuses else "not run")
            entry["details"] = sorted(set(entry["details"]))[:3]
            metrics: Dict[str, Dict[str, float]] = {}
            for name in sorted({key for run in ok for key in run["metrics"]}):
                values = [run["metrics"][name] for run in ok if isinstance(run["metrics"].get(name), (int, float))]
                if values:
                    metrics[name] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            entry["metrics"] = metrics
            cpu: Dict[str, Dict[str, float]] = {}
            for role in sorted({role for run in ok for role in run.get("cpu", {})}):
                per_task = [run["cpu"][role]["cpu_us_per_task"] for run in ok if role in run.get("cpu", {})]
                seconds = [run["cpu"][role]["cpu_seconds"] for run in ok if role in run.get("cpu", {})]
                fresh = [run["cpu"][role].get("fresh_kib_per_task") for run in ok if role in run.get("cpu", {})]
                fresh = [value for value in fresh if value is not None]
                cpu[role] = {
                    "us_per_task": statistics.median(per_task) if per_task else None,
                    "seconds": statistics.median(seconds),
                    "processes": max(run["cpu"][role]["processes"] for run in ok if role in run.get("cpu", {})),
                    "fresh_kib_per_task": statistics.median(fresh) if fresh else None,
                }
            entry["cpu"] = cpu
    return summary


def _timeout_bound(entry: Optional[Dict[str, Any]], metric: str, timeout: float) -> Optional[float]:
    """For an engine that timed out: the throughput it stayed below (size / time limit)."""
    if entry is None or entry["status"] != "timeout" or not metric.endswith("_per_s") or "mb_" in metric:
        return None
    return entry["size"] / timeout


def _cell(entry: Optional[Dict[str, Any]], metric: str, timeout: float = 0) -> str:
    if entry is None:
        return "not run"
    bound = _timeout_bound(entry, metric, timeout) if timeout else None
    if bound is not None:
        return f"timeout (< {_format(bound)})"
    if entry["status"] != "ok":
        return entry["status"]
    stats = entry["metrics"].get(metric)
    if stats is None:
        return "n/a"
    if stats["min"] == stats["max"]:
        return _format(stats["median"])
    return f"{_format(stats['median'])} ({_format(stats['min'])}–{_format(stats['max'])})"


def _median(entry: Optional[Dict[str, Any]], metric: str) -> Optional[float]:
    if entry is None or entry["status"] != "ok" or metric not in entry["metrics"]:
        return None
    return entry["metrics"][metric]["median"]


def _ratio(ours: Optional[float], peer: Optional[float], higher_better: bool) -> str:
    """How many times better this project is (> 1: better)."""
    if ours is None or peer is None or ours <= 0 or peer <= 0:
        return "–"
    ratio = ours / peer if higher_better else peer / ours
    if ratio < 0.1:
        return f"×{ratio:.2g}"
    return f"×{ratio:.2f}" if ratio < 10 else f"×{ratio:.0f}"


def results_table(data: Dict[str, Any]) -> str:
    summary = data["summary"]
    engines = [engine for engine in data["engines"]]
    peers = [engine for engine in engines if engine != OURS]
    header = ["workload (size)", *engines, *[f"{OURS} vs {peer}" for peer in peers], f"issue 3 target ({OURS})"]
    rows = []
    for workload, metric, label, higher in METRICS:
        if workload not in summary:
            continue
        entries = summary[workload]
        size = next(iter(entries.values()))["size"]
        ours = _median(entries.get(OURS), metric)
        row = [f"{label} ({size:,})"]
        timeout = data.get("timeout_seconds", 0)
        row += [_cell(entries.get(engine), metric, timeout) for engine in engines]
        for peer in peers:
            bound = _timeout_bound(entries.get(peer), metric, timeout)
            if bound is not None and ours is not None:
                row.append("> " + _ratio(ours, bound, higher))
            else:
                row.append(_ratio(ours, _median(entries.get(peer), metric), higher))
        target = _target(workload, metric, size)
        if target is None:
            row.append("")
        elif ours is None:
            row.append(f"{target[0]}: not measured")
        else:
            met = ours >= target[1] if target[2] else ours <= target[1]
            row.append(f"{target[0]}: {'met' if met else 'not met'}")
        rows.append(row)
    return _table(rows, header)


def security_cost(data: Dict[str, Any]) -> str:
    """The no-op map with CurveZMQ keys on every connection, as a share of its throughput without."""
    entries = data["summary"].get("map_noop", {})
    plain, secure = _median(entries.get(OURS), "tasks_per_s"), _median(entries.get(SECURE), "tasks_per_s")
    if plain is None or secure is None:
        return f"Not measured in this run (run `{OURS}` and `{SECURE}` on `map_noop`)."
    share = secure / plain
    met = "met" if share >= SECURE_TARGET else "not met"
    return (
        f"The no-op map runs at {_format(secure)} tasks/s with keys and {_format(plain)} without: "
        f"**{share:.0%}** of the throughput (issue 14 asks at least {SECURE_TARGET:.0%}: {met})."
    )


MONITORING_JSON = RESULTS / "monitoring.json"  # the monitored_map runs the page's monitoring section shows
MONITORING_TARGET = 0.95  # issue 31: with scaler_ui and a report on, at least 95% of the throughput without
_MONITORING_MODES = (("off", "nothing watching"), ("ui", "`scaler_ui`"), ("on", "`scaler_ui` and a report"))


def monitoring_cost() -> str:
    """The monitored map of `MONITORING_JSON` (its own run: `--workloads monitored_map --out monitoring`): each
    mode's throughput and CPU per task, the watched ones' as a share of nothing watching (each round's, and the
    median of all rounds), with the machine's load."""
    if not MONITORING_JSON.exists():
        return "Not measured (run `--engines scaler --workloads monitored_map --out monitoring --no-docs`)."
    data = json.loads(MONITORING_JSON.read_text())
    runs = [run for run in data["runs"] if run["workload"] == "monitored_map" and run["status"] == "ok"]
    if not runs or "ui_vs_off_round1" not in runs[0]["metrics"]:
        return f"Not measured in rounds (`{MONITORING_JSON.relative_to(REPO)}` is of an older workload)."
    machine = data["machine"]
    watched = _MONITORING_MODES[1:]

    def median(key: str) -> float:
        return statistics.median(run["metrics"][key] for run in runs)

    rounds = {name: [value for run in runs for key, value in sorted(run["metrics"].items())
                     if key.startswith(f"{name}_vs_off_round")] for name, _ in watched}  # fmt: skip
    shares = {name: statistics.median(values) for name, values in rounds.items()}
    cpu_shares = {name: median("off_total_us_per_task") / median(f"{name}_total_us_per_task") for name, _ in watched}
    rows = [
        ["tasks/s (median of the repetitions)"] + [_format(median(f"{name}_per_s")) for name, _ in _MONITORING_MODES],
        ["throughput / nothing watching's, median of the rounds", "1"]
        + [f"**{shares[name]:.3f}**" for name, _ in watched],
        ["the same, each round (lowest to highest)", "–"]
        + [", ".join(f"{value:.2f}" for value in sorted(rounds[name])) for name, _ in watched],
        ["CPU µs/task, all processes (median of the repetitions)"]
        + [_format(median(f"{name}_total_us_per_task")) for name, _ in _MONITORING_MODES],
        ["nothing watching's CPU per task / this one's", "1"] + [f"**{cpu_shares[name]:.3f}**" for name, _ in watched],
    ]
    met = {name: "met" if value >= MONITORING_TARGET else "not met" for name, value in shares.items()}
    cpu_met = "met" if cpu_shares["on"] >= MONITORING_TARGET else "not met"
    source = machine.get("scaler_source", machine["commit"])
    return (
        f"From `{MONITORING_JSON.relative_to(REPO)}`: {machine['date']}, {OURS} built from {source}, "
        f"{len(runs)} repetition(s) of `monitored_map` (below: {sum(map(len, rounds.values())) // 2} rounds in all, "
        f"maps of {data['sizes']['monitored_map'] // 2:,} tasks); load average {machine['load_average_at_start']} "
        f"at the start{_load_range(data)}, on {machine['cores']} cores.\n\n"
        + _table(rows, ["no-op map", *[text for _, text in _MONITORING_MODES]])
        + f"\n\nWith `scaler_ui` and a report on, issue 31 asks at least {MONITORING_TARGET:.0%} of the "
        f"throughput: by the median of the rounds {shares['on']:.1%} ({met['on']}), by the CPU per task "
        f"{cpu_shares['on']:.1%} ({cpu_met}). On a quiet machine the map is bound by the CPU (its processes keep "
        "both cores busy), so there the CPU ratio is the throughput ratio; on a loaded one a round's share moves "
        "with the other work of the machine by more than monitoring costs, in both directions."
    )


def cpu_table(data: Dict[str, Any], engine: str, key: str = "us_per_task", unit: str = "µs/task") -> str:
    """Per workload and process role, the median of ``key`` (CPU µs per task, or fresh KiB per task)."""
    summary = data["summary"]
    roles_order = ["client", "scheduler", "storage", "agent", "processor", "cluster supervisor", "monitor",
                   "worker manager", "nanny", "worker", "other"]  # fmt: skip
    roles = []
    for workload in summary:
        for role in summary[workload].get(engine, {}).get("cpu", {}):
            if role not in roles:
                roles.append(role)
    roles.sort(key=lambda role: roles_order.index(role) if role in roles_order else len(roles_order))
    rows = []
    for workload in summary:
        entry = summary[workload].get(engine)
        if not entry or entry["status"] != "ok":
            continue
        cells = []
        total = 0.0
        for role in roles:
            value = entry["cpu"].get(role, {}).get(key)
            cells.append(_format(value))
            total += value or 0.0
        wall = entry["metrics"].get("seconds", {}).get("median")
        rows.append([f"{workload} ({entry['size']:,})", *cells, _format(total), _format(wall)])
    return _table(rows, ["workload (tasks)", *[f"{role} {unit}" for role in roles], f"total {unit}", "wall s"])


def machine_description(source: str = "") -> Dict[str, Any]:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "memory_gib": memory_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit.stdout.strip(),
        "scaler_source": source,
        "load_average_at_start": _load_average(),
    }


def print_report(data: Dict[str, Any]) -> None:
    machine = data["machine"]
    print()
    print(
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB, Python {machine['python']}, "
        f"{machine['date']}, {OURS} from {machine.get('scaler_source', machine['commit'])}, mode {data['mode']}, "
        f"{data['repetitions']} repetitions"
    )
    if data.get("baseline_source"):
        print(f"{BASELINE} from {data['baseline_source']}")
    print("medians (min–max); 'scaler vs X' is how many times better this project is (> 1: better)\n")
    print(results_table(data))
    print(f"\nWith keys ({SECURE}): {security_cost(data)}")
    print(f"\nCPU per task of {OURS}, by process (median of the repetitions):\n")
    print(cpu_table(data, OURS))
    print(f"\nFresh memory per task of {OURS}, by process (median of the repetitions):\n")
    print(cpu_table(data, OURS, "fresh_kib_per_task", "KiB/task"))
    print()


def write_chart(data: Dict[str, Any], png_path: Path, rebuild: bool, log) -> bool:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:  # the data with its summary
        json.dump(data, file)
        file.flush()
        try:
            python = ensure_env(TOOLING[0], TOOLING[1], rebuild, log)
            subprocess.run([str(python), str(HERE / "chart.py"), file.name, str(png_path)], check=True, timeout=300)
            return True
        except (subprocess.SubprocessError, OSError) as error:
            log(f"no chart: {error}")
            return False


def write_doc(data: Dict[str, Any], png_path: Path) -> None:
    machine = data["machine"]
    versions = ", ".join(f"{engine} {version}" for engine, version in data["versions"].items())
    image = os.path.relpath(png_path, DOC.parent)
    source = machine.get("scaler_source", machine["commit"])
    load_at_start = machine["load_average_at_start"]
    text = f"""# Benchmarks

<!-- Generated by benchmarks/run.py from benchmarks/results/{Path(data["json"]).name}: do not edit by hand. -->

This page is written by `python3 benchmarks/run.py` (full sizes); the raw numbers are in
`benchmarks/results/{Path(data["json"]).name}`. Where the time goes inside this project, and what it would take to
reach the targets of issue 3, is in [performance.md](performance.md).

## Machine

- {machine["cpu_model"]}, {machine["cores"]} cores, {machine["memory_gib"]} GiB of memory, {machine["os"]}
- Python {machine["python"]}; {versions}
- {machine["date"]}; {OURS} built from {source}; mode `{data["mode"]}`, {data["repetitions"]} repetitions,
  run time limit {data["timeout_seconds"]:g} s; load average {load_at_start} at the start{_load_range(data)}.
- The 2 cores are shared with other people's work, so every number carries their noise; the engines are
  interleaved (round robin, order rotated each repetition) so that noise hits all of them alike: compare
  engines within this page (the ratios), not with a page from a quieter run.

## Results

Medians over the repetitions, with min–max in parentheses. "{OURS} vs X" says how many times better this
project is than X on that line (above ×1: better; for times, latencies and bytes it is X / {OURS}).
`timeout` means the engine did not finish within the run time limit (its throughput is below size / limit);
`unsupported` means the engine has no such feature or refuses it; `error` is in the JSON's `details`.

{results_table(data)}

![benchmark chart]({image})

## The cost of security

`{SECURE}` is this project with CurveZMQ on every connection (`SchedulerClusterCombo(security=True)`: keys
authenticated by ZAP, every message encrypted; docs/security.md). {security_cost(data)}

## CPU per task of {OURS}, by process

CPU seconds (user + system, from psutil) that each process used during the workload, divided by the number
of tasks, median of the repetitions. "client" is the benchmark's own process (user thread and client agent
thread); "agent" and "processor" are summed over the 2 workers. The wall time is on the right: with 2 cores,
a total above 2 × wall / tasks would mean the processes competed for the CPU.

{cpu_table(data, OURS)}

## Fresh memory per task of {OURS}, by process

Memory each process touched for the first time during the workload (minor page faults × page size, from
/proc), divided by the number of tasks, median of the repetitions: pages the kernel had to fault in and zero,
which on a virtual machine can cost more than the copy into them. It shows where large payloads are written
into new memory rather than into memory a process reuses.

{cpu_table(data, OURS, "fresh_kib_per_task", "KiB/task")}

## The cost of monitoring

{monitoring_cost()}

{_peer_cpu_sections(data)}
## The workloads

Every engine gets 2 workers (1 process, 1 thread each); each run starts a fresh local cluster, waits until
both workers have run a task, and measures only the workload.

{_workloads_table()}

Run it yourself: `python3 benchmarks/run.py --quick` (a few minutes), `python3 benchmarks/run.py` (full,
rewrites this page), `--workloads`, `--engines`, `--repetitions`, `--timeout`; `--report-only` redraws the
table, chart and page from the JSON. Logs of the last run of each engine and workload are in
`benchmarks/logs/`. No test asserts a timing.
"""
    kept = simulator.kept_section(DOC)  # written by --simulator, kept as it is
    DOC.write_text(text + ("\n" + kept if kept else ""))


def _load_range(data: Dict[str, Any]) -> str:
    """The load averages read before and after each run, as words for the page ("" if none were read)."""
    loads = sorted(
        load for run in data["runs"] for load in (run.get("load_before"), run.get("load_after")) if load is not None
    )
    if not loads:
        return ""
    return f", {loads[0]:g}–{loads[-1]:g} around the runs (median {statistics.median(loads):g})"


WORKLOAD_DESCRIPTIONS = {
    "map_noop": "the engine's batch call over N no-op tasks: `client.map(fn, [(i,) ...])` here, `client.map` + "
    "`gather` in dask, `client.map(fn, range(N))` in opengris-scaler, one `ProcessPoolExecutor.submit` per item, "
    "`multiprocessing.Pool.map` (default chunks)",
    "submit_gather": "N individual `submit` calls, then every result",
    "round_trip": "N sequential `submit(fn, i).result()`: median and p99 latency",
    "sleep": "N tasks of `time.sleep(0.01)` through the batch call: efficiency = (N × 10 ms / 2) / wall time",
    "big_args": "N tasks each given its own distinct 10 MB `bytes` (no engine can deduplicate): MB/s of arguments",
    "shared_object": "one 10 MB object sent once (`send_object`, dask `scatter`) and passed to N tasks; "
    '"effective MB/s" counts 10 MB per task, so far above `big_args` means the object did not travel once per '
    "task (the pools have no such feature)",
    "graph": "`client.get` of a reduction graph of about N nodes (N/2 leaves, pairwise sums to one root)",
    "chain": "`client.get` of a chain of N `inc` nodes",
    "graph_vs_map": "in one cluster, a no-op map of N tasks, then `client.get` of a reduction tree of about N nodes "
    "(as `graph`) and of a wide map-reduce of about N nodes (maps of one data node, a sum of each 100 maps, one "
    "total): each graph's nodes/s as a share of the map's tasks/s, and the scheduler's CPU per node",
    "monitored_map": "in one cluster, 4 rounds of no-op maps of N/2 tasks: with nothing watching, with `scaler_ui` "
    "subscribed (a viewer reading its page's event stream), and with `scaler_ui` and `client.performance_report` "
    "open, in turn then in the reverse order; each round gives each one's throughput (its N tasks) and the two "
    "watched as a share of nothing watching: the medians of the rounds (scaler only)",
    "queued_memory": "both workers held by a blocking task, then N tasks submitted through the batch call; peak RSS "
    "growth of the scheduler process and of the client process divided by N, once the scheduler's RSS stayed flat "
    "for 2 s. dask's LocalCluster runs its scheduler inside the client process, so both its numbers are that one "
    "process; the pools keep their queue in the client",
    "executor_map": "the standard library's interface: `list(executor.map(fn, range(N)))` with `client.executor()` "
    "here and `ProcessPoolExecutor(2)` (default `chunksize=1`), and joblib's default backend (loky) "
    "`Parallel(n_jobs=2)(delayed(fn)(i) for i in range(N))` with its automatic batching; then the same with "
    "`chunksize=1000` (joblib: `batch_size=1000`)",
}


def _workloads_table() -> str:
    rows = [[f"`{name}`", text] for name, text in WORKLOAD_DESCRIPTIONS.items()]
    return _table(rows, ["workload", "what is measured"])


def _peer_cpu_sections(data: Dict[str, Any]) -> str:
    sections = []
    for engine in data["engines"]:
        if engine == OURS:
            continue
        table = cpu_table(data, engine)
        if table.count("\n") > 1:
            sections.append(f"### CPU per task of {engine}, by process\n\n{table}\n")
    if not sections:
        return ""
    return "## CPU per task of the peers\n\n" + "\n".join(sections) + "\n"


# --- main ---------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes / 10 (results/quick.json, docs untouched)")
    parser.add_argument("--workloads", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--engines", nargs="+", choices=list(ENGINES), default=DEFAULT_ENGINES)
    parser.add_argument("--repetitions", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (default 300, quick 120)")
    parser.add_argument("--scale", type=float, default=None, help="multiply every size by this (after --quick)")
    parser.add_argument("--out", default=None, help="results name (default: latest, quick: quick)")
    parser.add_argument("--docs", action="store_true", help="regenerate docs/benchmarks.md even for a partial run")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    parser.add_argument("--rebuild-envs", action="store_true", help="re-create every virtualenv (newest peers)")
    parser.add_argument("--working-tree", action="store_true",
                        help=f"build {OURS} from the working tree instead of the last commit")  # fmt: skip
    parser.add_argument("--commit", default="HEAD", help=f"build {OURS} from this commit (default: HEAD)")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help=f"build {BASELINE} from this commit and run it too, interleaved (before and after)")
    parser.add_argument("--report-only", nargs="?", const="", default=None, metavar="JSON",
                        help="redo table, chart and docs from a results file (default: latest)")  # fmt: skip
    parser.add_argument("--simulator", action="store_true",
                        help="run the load simulator instead of the workloads (results/simulator.json)")  # fmt: skip
    parser.add_argument("--keep", action="store_true",
                        help="with --simulator: keep the figures at 1,000 workers for the next runs")  # fmt: skip
    args = parser.parse_args()

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    RESULTS.mkdir(exist_ok=True)
    if args.simulator:
        return run_simulator(args, log)
    if args.report_only is not None:
        json_path = Path(args.report_only) if args.report_only else RESULTS / "latest.json"
        data = json.loads(json_path.read_text())
        data["summary"] = aggregate(data["runs"])
        png_path = json_path.with_suffix(".png")
        print_report(data)
        write_chart(data, png_path, False, log)
        if not args.no_docs and data.get("mode") == "full":  # the page describes full runs only
            write_doc(data, png_path)
        return 0

    mode = "quick" if args.quick else "full"
    if args.repetitions is None:
        args.repetitions = 1 if args.quick else 3
    timeout = args.timeout or (120.0 if args.quick else 300.0)
    name = args.out or ("quick" if args.quick else "latest")
    sizes = {}
    for workload in args.workloads:
        size = SIZES[workload][1 if args.quick else 0]
        if args.scale:
            size = max(1, int(size * args.scale))
        sizes[workload] = size
    if args.scale:
        mode += f" ×{args.scale:g}"

    if (args.baseline is None) != (BASELINE not in args.engines):
        if args.baseline is None:
            parser.error(f"engine {BASELINE} needs --baseline REV")
        args.engines.append(BASELINE)
    source = our_source(args.working_tree, args.commit)
    sources = {ENGINES[OURS][0]: source}
    if args.baseline is not None:
        sources[ENGINES[BASELINE][0]] = our_source(False, args.baseline)
    for engine in args.engines:
        env_name, _, requirements = ENGINES[engine]
        ensure_env(env_name, requirements, args.rebuild_envs, log, sources.get(env_name, ""))

    data: Dict[str, Any] = {
        "mode": mode,
        "repetitions": args.repetitions,
        "timeout_seconds": timeout,
        "workers": WORKERS,
        "engines": list(args.engines),
        "sizes": sizes,
        "machine": machine_description(source),
        "baseline_source": sources.get(ENGINES[BASELINE][0]),
        "versions": {},
        "runs": [],
        "json": f"{name}.json",
    }
    json_path = RESULTS / f"{name}.json"
    skip: Dict[Tuple[str, str], str] = {}  # (engine, workload) -> why later repetitions are skipped
    started = time.monotonic()
    for repetition in range(args.repetitions):
        for workload in args.workloads:
            shift = repetition % len(args.engines)
            order = args.engines[shift:] + args.engines[:shift]
            for engine in order:
                if (engine, workload) in skip:
                    continue
                record = run_one(engine, workload, sizes[workload], timeout)
                record["repetition"] = repetition
                data["runs"].append(record)
                if record.get("version"):
                    data["versions"][engine] = record["version"]
                status = record["status"]
                shown = ""
                if status == "ok":
                    shown = ", ".join(f"{key}={_format(value)}" for key, value in record["metrics"].items())
                else:
                    shown = record.get("detail", "")
                log(f"rep {repetition + 1} {workload:<14} {engine:<16} {status:<11} {shown[:150]}")
                if status in ("timeout", "unsupported"):
                    skip[(engine, workload)] = status  # deterministic or too slow: not worth another try
                # save as we go, so an interrupted run keeps what it measured
                json_path.write_text(json.dumps(data, indent=1))
    data["total_seconds"] = round(time.monotonic() - started, 1)
    data["machine"]["load_average_at_end"] = _load_average()
    data["summary"] = aggregate(data["runs"])
    json_path.write_text(json.dumps(data, indent=1))
    print_report(data)
    png_path = json_path.with_suffix(".png")
    write_chart(data, png_path, args.rebuild_envs, log)
    full_selection = set(args.workloads) == set(SIZES) and set(args.engines) == set(DEFAULT_ENGINES)
    if not args.no_docs and (args.docs or (mode == "full" and full_selection)):
        write_doc(data, png_path)
        log(f"wrote {DOC.relative_to(REPO)}")
    log(f"wrote {json_path.relative_to(REPO)} in {data['total_seconds']:.0f} s")
    return 0


def run_simulator(args: argparse.Namespace, log) -> int:
    """``--simulator``: every scenario of the load simulator (simulator.py), the comparison with the kept figures,
    and, for a full run, the simulator's section of docs/benchmarks.md (or, with --report-only, just that)."""
    if args.report_only is not None:
        json_path = Path(args.report_only) if args.report_only else RESULTS / "simulator.json"
        data = json.loads(json_path.read_text())
    else:
        source = our_source(args.working_tree, args.commit)
        env_name, _, requirements = ENGINES[OURS]
        python = ensure_env(env_name, requirements, args.rebuild_envs, log, source)
        name = args.out or ("simulator-quick" if args.quick else "simulator")
        json_path = RESULTS / f"{name}.json"
        data = {"mode": "quick" if args.quick else "full", "machine": machine_description(source),
                "json": json_path.name}  # fmt: skip
        repetitions = args.repetitions or (1 if args.quick else 3)
        simulator.run_all(python, RUNNERS, args.quick, repetitions, MARKER_VARIABLE, _kill_leftovers, log, json_path,
                          data)  # fmt: skip
        log(f"wrote {json_path.relative_to(REPO)}")
    print()
    print(simulator.section(data))
    print(simulator.compare_with_kept(data))
    if args.keep:
        simulator.keep(data)
        log(f"kept the figures at 1,000 workers in {simulator.KEPT.relative_to(REPO)}")
    if not args.no_docs and data["mode"] == "full":
        simulator.replace_section(DOC, simulator.section(data))
        log(f"wrote the simulator's section of {DOC.relative_to(REPO)}")
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # so the current run's process group is killed on the way out


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
