"""The mutation check: deliberate faults in a copy of the sources, each of which the tests must catch.

Each fault of FAULTS edits a copy of the sources so that the engine breaks one of its promises, then runs the
tests meant to catch it against that copy and reports which of them failed. A fault that no test catches
fails the check, and so does a fault whose tests fail for another reason (pytest must report failed tests, not
a collection error). Each test that caught a fault then runs again against the unchanged copy and must pass,
so that every failure counted is the fault's doing (the rest of CI runs every test on the same sources).

    python3 dev.py test mutants                 # the tox environment `mutants` runs this file:
    python tests/mutants.py WORKDIR [--report FILE] [--every-test]   # only inside tox
    python3 dev.py test mutants -- --every-test  # every test that catches each fault, for docs/testing.md

WORKDIR receives the copy (every file git knows of, with uncommitted changes) and the reports; the copy's
distributions are installed editable into the running interpreter's environment, with every extra. Each edit
names the exact text it replaces: when the sources change so that the text is no longer there exactly once,
the check stops and names the fault to update.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dev  # noqa: E402  (the list of distributions)

# Per test of a mutant run: a fault that makes a test hang is caught when this runs out. The selected tests
# take well under half of it unchanged, on a loaded machine.
TIMEOUT_SECONDS = 60

PROTOCOL = "packages/scaler-protocol/src/scaler/protocol"
SCHEDULER = "packages/scaler-scheduler/src/scaler/scheduler"
CLIENT = "packages/scaler-client/src/scaler/client"
SYMPHONY = "packages/scaler-symphony/src/scaler/symphony"
STORAGE = "packages/scaler-storage/src/scaler/storage"
WORKER = "packages/scaler-worker/src/scaler/worker"


@dataclass
class Fault:
    name: str
    edits: List[Tuple[str, str, str]]  # (file, exact text, its replacement)
    tests: List[str]  # pytest node ids or files, relative to the repository


FAULTS = [
    Fault(
        "the scheduler takes a large message whole, and keeps everyone else waiting meanwhile",
        [(f"{SCHEDULER}/message_slices.py", "        stop = min(start + SLICE, count)\n", "        stop = count\n")],
        ["packages/scaler-scheduler/tests/test_message_slices.py"],
    ),
    Fault(
        "the object storage server never forgets a peer that left",
        [
            (
                f"{STORAGE}/peer_lifecycle.py",
                "        (S.GREETED, E.LEFT): T(S.STRANGER, (A.FORGET,)),\n",
                "        (S.GREETED, E.LEFT): T(S.GREETED),\n",
            )
        ],
        ["packages/scaler-storage/tests/test_object_store.py"],
    ),
    Fault(
        "the scheduler ignores every cancel",
        [
            (
                f"{SCHEDULER}/scheduler_core.py",
                "            m.TaskCancel: self._graph_routes.on_cancel_request,\n",
                "            m.TaskCancel: lambda source, message, now, out: None,\n",
            )
        ],
        [
            "packages/scaler-scheduler/tests/test_scheduler_core.py",
            "tests/test_cancel.py",
        ],
    ),
    Fault(
        "the scheduler never queues again the tasks of a worker that died",
        [
            (
                f"{SCHEDULER}/task_lifecycle.py",
                "        (S.ASSIGNED, E.WORKER_GONE): T(S.QUEUED, (A.REQUEUE,)),\n",
                "        (S.ASSIGNED, E.WORKER_GONE): T(S.QUEUED),\n",
            )
        ],
        [
            "packages/scaler-scheduler/tests/test_scheduler_core.py",
            "tests/test_faults.py::test_killing_a_worker_mid_run_loses_no_task",
        ],
    ),
    Fault(
        "the scheduler does not notice a closed connection, nor a task its worker lost",
        [
            (
                f"{SCHEDULER}/scheduler_core.py",
                "            ConnectionClosed: self._on_connection_closed,\n",
                "            ConnectionClosed: lambda event, now, out: None,\n",
            ),
            (
                f"{SCHEDULER}/scheduler_core.py",
                "        ask = worker.reconciles and self._routing.reconcile(worker, message, out)\n",
                "        ask = False\n",
            ),
        ],
        [
            "packages/scaler-scheduler/tests/test_scheduler_failures.py",
            "tests/test_bad_tasks.py::test_a_task_a_worker_does_not_hold_is_queued_again_from_its_heartbeat",
        ],
    ),
    Fault(
        "a daemon names a connection by its file descriptor, which the next connection reuses",
        [
            (
                f"{PROTOCOL}/connection_events.py",
                "            self._ids[descriptor] = next(self._next_id)\n            return\n",
                "            self._ids[descriptor] = descriptor\n            return\n",
            ),
        ],
        ["packages/scaler-scheduler/tests/test_server.py"],
    ),
    Fault(
        "the client drops one result in a thousand",
        [
            (
                f"{CLIENT}/tasks_in_flight.py",
                "        for result in message.results:\n"
                "            task_id = result.task_id\n",
                "        for result in message.results:\n"
                "            task_id = result.task_id\n"
                "            _RECEIVED[0] += 1\n"
                "            if _RECEIVED[0] % 1000 == 0:\n"
                "                continue\n",
            ),
            (
                f"{CLIENT}/tasks_in_flight.py",
                "\nlogger = logging.getLogger(__name__)\n",
                "\nlogger = logging.getLogger(__name__)\n_RECEIVED = [0]\n",
            ),
        ],
        [
            "packages/scaler-client/tests/test_client.py::test_map_of_ten_thousand_tasks_sends_few_batches",
            "tests/test_end_to_end.py::test_ten_thousand_tasks_through_map_and_through_submit",
        ],
    ),
    Fault(
        "a graph node runs before its inputs",
        [
            (
                f"{SCHEDULER}/graph_tasks.py",
                "        for i in ready:\n",
                "        for i in range(base, base + count):\n",
            ),
            (
                f"{SCHEDULER}/graph_tasks.py",
                "            needed = results[positions[needed_id]]\n",
                "            needed = results.get(positions[needed_id])\n"
                "            if needed is None:\n"
                "                continue\n",
            ),
        ],
        [
            "packages/scaler-scheduler/tests/test_graph_tasks.py",
            "tests/test_graphs.py::test_the_readme_example",
            "tests/test_graph_conformance.py",
        ],
    ),
    Fault(
        "the Symphony worker holds nested tasks back under its base concurrency",
        [
            (
                f"{SYMPHONY}/symphony_runner.py",
                "        return parent is not None and parent in self._parents\n",
                "        return False\n",
            )
        ],
        [
            "packages/scaler-symphony/tests/test_symphony_runner.py",
            "tests/test_symphony.py::test_nested_fibonacci_runs_past_the_base_concurrency[1]",
        ],
    ),
    Fault(
        "a task waiting for its children keeps its room at the scheduler",
        [
            (
                f"{SCHEDULER}/peers.py",
                "        return len(self.tasks) - len(self.waiting)\n",
                "        return len(self.tasks)\n",
            )
        ],
        [
            "packages/scaler-scheduler/tests/test_scheduler_core.py",
            "tests/test_nested_cores.py",
            "tests/test_nested_tasks.py::test_fibonacci_on_one_worker_with_a_queue_of_one_or_two[1-18]",
        ],
    ),
    Fault(
        "a key says Hello as any role",
        [
            (
                f"{SCHEDULER}/hello_checks.py",
                "    if role not in credential.roles:\n",
                "    if False:\n",
            )
        ],
        [
            "packages/scaler-scheduler/tests/test_scheduler_credentials.py",
            "tests/test_security.py::test_a_worker_key_or_a_monitor_key_cannot_submit",
        ],
    ),
    Fault(
        "a client reaches every owner's objects",
        [
            (
                f"{STORAGE}/peer_access.py",
                "    if role is PeerRole.CLIENT:\n        return peer_id\n",
                "    if role is PeerRole.CLIENT:\n        return None\n",
            )
        ],
        [
            "packages/scaler-storage/tests/test_object_store_access.py",
            "tests/test_security.py::test_a_client_touches_no_other_clients_objects_with_or_without_keys",
        ],
    ),
    Fault(
        "a worker group is stopped while its workers still hold tasks",
        [
            (
                f"{SCHEDULER}/worker_managers.py",
                "                busy = any(self._workers[w].tasks for w in self._members.get(group.group_id, ()))\n",
                "                busy = False\n",
            )
        ],
        ["packages/scaler-scheduler/tests/test_worker_managers.py"],
    ),
    Fault(
        "the workers of a manager that is gone are never sent away (a killed Slurm manager's jobs run on)",
        [
            (
                f"{SCHEDULER}/worker_managers.py",
                "            self._leave(self._workers[worker_id], why, out)\n",
                "            pass\n",
            )
        ],
        ["packages/scaler-scheduler/tests/test_worker_managers.py"],
    ),
    Fault(
        "a processor loses a wake that comes as it reads its wake pipe",
        [
            (
                f"{WORKER}/processor.py",
                "        if self._wake_pending or read:\n            try:\n",
                "        if self._wake_pending or read:\n            self._wake_pending = False\n            try:\n",
            ),
            (
                f"{WORKER}/processor.py",
                "            self._wake_pending = False\n        woken = self._woken\n",
                "        woken = self._woken\n",
            ),
        ],
        [
            "packages/scaler-worker/tests/test_processor.py::"
            "test_a_wake_that_comes_while_the_hub_reads_the_wake_pipe_is_not_lost"
        ],
    ),
    Fault(
        "a worker reads the objects of every client, whatever task it reads for",
        [
            (
                f"{STORAGE}/peer_access.py",
                "        if peer.role is PeerRole.WORKER and peer.isolating and self.kept:\n",
                "        if False:\n",
            ),
        ],
        [
            "packages/scaler-storage/tests/test_object_store_access.py",
            "tests/test_object_isolation.py::"
            "test_a_task_naming_another_clients_object_or_function_fails_and_never_reveals_it",
        ],
    ),
    Fault(
        "a scheduler that restarted runs again every task its workers hold",
        [
            (
                f"{SCHEDULER}/scheduler_core.py",
                "                self._routing.adopt(worker, hello.worker_info.held_tasks, now, out)\n",
                "                pass\n",
            ),
        ],
        ["packages/scaler-scheduler/tests/test_scheduler_reconnect.py"],
    ),
    Fault(
        "a client sends nothing again when its scheduler comes back",
        [
            (
                f"{CLIENT}/client_core.py",
                "        tasks, graphs = self._tasks.resend()\n",
                "        tasks, graphs = 0, 0\n",
            ),
        ],
        ["packages/scaler-client/tests/test_client_core_reconnect.py", "tests/test_scheduler_restart.py"],
    ),
]


class CheckError(Exception):
    """The check itself cannot go on (a fault no longer applies, a test fails without its fault, ...)."""


def copy_sources(tree: Path) -> None:
    """Every file git knows of (tracked, or new and not ignored), as it is in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    if tree.exists():
        shutil.rmtree(tree)
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)


def install_editable(tree: Path) -> None:
    targets = dev.every_distribution(str(tree / "packages"))
    targets += [str(tree / "packages" / name) for name in dev.TEST_PACKAGES]  # the fake Symphony
    arguments = [item for target in targets for item in ("-e", target)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-build-isolation",
         *arguments],
        check=True,
    )  # fmt: skip


def run_tests(
    tree: Path, workdir: Path, name: str, tests: List[str], first_failure: bool = False
) -> Tuple[int, List[str], float]:
    """pytest on ``tests`` in the copy: its exit code, the ids of the tests that failed, and its seconds.
    ``first_failure``: stop at the first test that fails (one is enough to show a fault is caught); the run's
    output then goes to WORKDIR/NAME.log, not to ours: its failures are the expected ones, and a reader of the
    CI log should find no failing test there but real ones."""
    report = workdir / f"{name}.xml"
    environ = dict(os.environ, PYTHONPYCACHEPREFIX=str(workdir / "pycache" / name))  # no bytecode of another run
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--timeout={TIMEOUT_SECONDS}",
               f"--junitxml={report}", *(["-x"] if first_failure else []), *tests]  # fmt: skip
    print(f"mutants: {name}: pytest {' '.join(tests)}", flush=True)
    started = time.monotonic()
    (workdir / f"{name}.log").unlink(missing_ok=True)
    if first_failure:
        with open(workdir / f"{name}.log", "wb") as log:
            code = subprocess.run(command, cwd=tree, env=environ, stdout=log, stderr=subprocess.STDOUT).returncode
    else:
        code = subprocess.run(command, cwd=tree, env=environ).returncode
    seconds = time.monotonic() - started
    failed = []
    if report.exists():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}")
    return code, failed, seconds


def _output_tail(log: Path, lines: int = 40) -> str:
    """The end of a fault run's output, for a failed check (empty when the run printed to ours)."""
    if not log.exists():
        return ""
    return ":\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def apply(tree: Path, fault: Fault) -> dict:
    """Edit the copy; returns the original text of each file edited."""
    originals: dict = {}
    for file, old, new in fault.edits:
        path = tree / file
        if not path.exists():
            raise CheckError(f"fault '{fault.name}': {file} does not exist any more: update tests/mutants.py")
        text = path.read_text()
        originals.setdefault(path, text)
        if text.count(old) != 1:
            raise CheckError(
                f"fault '{fault.name}': the text to replace is not in {file} exactly once: update tests/mutants.py"
            )
        path.write_text(text.replace(old, new))
    return originals


def check(workdir: Path, every_test: bool) -> List[Tuple[Fault, List[str], float]]:
    tree = workdir / "sources"
    copy_sources(tree)
    install_editable(tree)
    caught = []
    for number, fault in enumerate(FAULTS, 1):
        originals = apply(tree, fault)
        try:
            code, failed, seconds = run_tests(tree, workdir, f"fault-{number}", fault.tests, not every_test)
        finally:
            for path, text in originals.items():
                path.write_text(text)
        log = _output_tail(workdir / f"fault-{number}.log")
        if code == 0:
            raise CheckError(f"fault '{fault.name}': every test passed: the tests do not catch it{log}")
        if code != 1 or not failed:
            raise CheckError(f"fault '{fault.name}': pytest ended with exit code {code}, not with failed tests{log}")
        code, failed_unchanged, _ = run_tests(tree, workdir, f"control-{number}", failed, True)
        if code != 0:
            log = _output_tail(workdir / f"control-{number}.log")
            raise CheckError(
                f"fault '{fault.name}': the tests that caught it fail without it too (exit code {code}): "
                f"{', '.join(failed_unchanged or failed)}{log}"
            )
        caught.append((fault, failed, seconds))
        print(f"mutants: fault '{fault.name}' caught by {len(failed)} test(s)", flush=True)
    return caught


def report(caught: List[Tuple[Fault, List[str], float]]) -> str:
    """A Markdown table: each fault, the seconds its run took, and the tests that failed (by file, without
    their parameters)."""
    lines = ["| fault | seconds | tests that failed |", "| --- | --- | --- |"]
    for fault, failed, seconds in caught:
        by_file: Dict[str, List[str]] = {}
        for test in failed:
            file, _, name = test.partition("::")
            names = by_file.setdefault(file, [])
            if name.split("[")[0] not in names:
                names.append(name.split("[")[0])
        tests = "<br>".join(f"`{file}`: {', '.join(names)}" for file, names in by_file.items())
        lines.append(f"| {fault.name} | {seconds:.0f} | {len(failed)}: {tests} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path, help="where the copy of the sources and the reports go")
    parser.add_argument("--report", type=Path, help="also write the report (a Markdown table) to this file")
    parser.add_argument("--every-test", action="store_true",
                        help="run each fault's tests to the end (default: stop at the first failure)")
    args = parser.parse_args()
    if "TOX_ENV_NAME" not in os.environ:
        print("mutants: it installs the copy into the running environment: run it through python3 dev.py test mutants")
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        caught = check(args.workdir.resolve(), args.every_test)
    except CheckError as error:
        print(f"mutants: FAILED: {error}", file=sys.stderr)
        return 1
    text = report(caught)
    print(f"\nmutants: every fault was caught\n\n{text}")
    if args.report:
        args.report.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
