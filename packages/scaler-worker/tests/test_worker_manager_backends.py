"""What runs worker groups, alone: the Slurm commands the Slurm backend runs and how it reads their answers (a
recorded ``run`` in place of Slurm: the real one is tests/test_slurm.py), and the webhook adapter's answers and
the memory limit its groups get."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
from typing import Any, List

import pytest

from scaler.worker import WorkerConfig
from scaler.worker.memory_limit import memory_limit_bytes
from scaler.worker_manager import native_groups
from scaler.worker_manager.adapter import UNLIMITED_GROUPS, WorkerAdapter, serve
from scaler.worker_manager.group_backend import ENDED, RUNNING, GroupBackendError
from scaler.worker_manager.native_groups import sharing_this_host
from scaler.worker_manager.slurm_groups import SlurmGroups, SlurmOptions, time_limit_seconds

CONFIG = WorkerConfig("tcp://127.0.0.1:2345")


class Slurm:
    """Answers each command with the next of ``answers`` ((exit code, stdout, stderr) or an exception) and
    records it."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.commands: List[List[str]] = []

    def __call__(self, arguments: List[str], **options: Any) -> subprocess.CompletedProcess:
        assert options["timeout"] > 0
        self.commands.append(arguments)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        code, out, err = answer
        return subprocess.CompletedProcess(arguments, code, out, err)


def test_time_limits_in_slurms_formats():
    assert time_limit_seconds("30") == 1800
    assert time_limit_seconds("1:30") == 90
    assert time_limit_seconds("2:00:00") == 7200
    assert time_limit_seconds("1-0") == 86400
    assert time_limit_seconds("1-2:3") == 86400 + 7200 + 180
    for bad in ("", "0", "soon", "1:2:3:4", "-5"):
        with pytest.raises(ValueError, match="is not a Slurm time limit"):
            time_limit_seconds(bad)


def test_a_group_is_an_sbatch_of_a_script_that_runs_scaler_cluster_with_its_id(tmp_path):
    slurm = Slurm((0, "42;cluster\n", ""))
    options = SlurmOptions(partition="debug", time_limit="10", cpus_per_worker=2, memory="4G",
                           sbatch_options=("--account=p",), job_directory=str(tmp_path), python="/opt/py")  # fmt: skip
    groups = SlurmGroups(CONFIG, options, run=slurm)
    assert groups.start(b"M|h|1|aa/3", 4) == "slurm job 42"
    (command,) = slurm.commands
    assert command[:2] == ["sbatch", "--parsable"]
    for option in ("--cpus-per-task=8", "--partition=debug", "--time=10", "--mem=4G", "--account=p", "--nodes=1"):
        assert option in command
    script = open(command[-1]).read()
    assert "exec /opt/py -m scaler.cluster.cluster_main -n 4 tcp://127.0.0.1:2345" in script
    assert "--worker-group-id 'M|h|1|aa/3'" in script


def test_squeue_says_when_a_job_runs_and_when_it_ended_and_why(tmp_path):
    slurm = Slurm(
        (0, "7\n", ""), (0, "8\n", ""),
        (0, "7|PENDING|Priority\n8|RUNNING|None\n99|RUNNING|None\n", ""),
        (0, "7|RUNNING|None\n8|RUNNING|None\n", ""),
        (1, "", "slurm_load_jobs error: Unable to contact slurm controller"),
        (0, "7|TIMEOUT|TimeLimit\n", ""),
    )  # fmt: skip
    groups = SlurmGroups(CONFIG, SlurmOptions(job_directory=str(tmp_path)), run=slurm)
    groups.start(b"g1", 1)
    groups.start(b"g2", 1)
    assert groups.poll() == [(b"g2", RUNNING, "")]
    assert groups.poll() == [(b"g1", RUNNING, "")]
    assert groups.poll() == []  # squeue failed: nothing known, nothing lost
    assert groups.poll() == [
        (b"g1", ENDED, "slurm job 7 timeout (TimeLimit)"),
        (b"g2", ENDED, "slurm job 8 no longer known to Slurm"),
    ]
    assert groups.poll() == [] and len(slurm.commands) == 6  # nothing left to follow: squeue is not asked


def test_slurm_commands_that_fail_hang_or_are_missing_are_one_clear_error(tmp_path):
    slurm = Slurm(
        (1, "", "sbatch: error: invalid partition specified: nosuch\n"),
        subprocess.TimeoutExpired("sbatch", 30),
        FileNotFoundError("sbatch"),
        (0, "not a job id\n", ""),
    )
    groups = SlurmGroups(CONFIG, SlurmOptions(job_directory=str(tmp_path), command_timeout=30), run=slurm)
    for says in (
        "sbatch failed (exit 1): sbatch: error: invalid partition specified: nosuch",
        "sbatch did not answer within 30s",
        "sbatch is not installed here",
        "sbatch answered 'not a job id', not a job ID",
    ):
        with pytest.raises(GroupBackendError, match=re.escape(says)):
            groups.start(b"g", 1)


def test_the_adapter_answers_what_it_can_start_and_refuses_what_it_cannot():
    adapter = WorkerAdapter(WorkerConfig("tcp://127.0.0.1:2345", capabilities=[]), 0, 2)
    assert adapter.answer({"action": "get_worker_adapter_info"}) == (
        200, {"max_worker_groups": 0, "workers_per_group": 2, "base_capabilities": {}}
    )  # fmt: skip
    assert adapter.answer({"action": "start_worker_group"})[0] == 429  # no room at all
    assert adapter.answer({"action": "shutdown_worker_group"}) == (400, {"error": "worker_group_id not specified"})
    assert adapter.answer({"action": "shutdown_worker_group", "worker_group_id": "x"})[0] == 404
    assert adapter.answer({"action": "fly"}) == (400, {"error": "Unknown action 'fly'"})
    assert adapter.answer({}) == (400, {"error": "No action specified"})
    assert adapter.answer([1]) == (400, {"error": "the request must be a JSON object"})


def test_the_adapter_serves_post_and_answers_bad_requests_with_400():
    server = serve(WorkerAdapter(CONFIG, 0, 1), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        ok = urllib.request.urlopen(urllib.request.Request(url, b'{"action": "get_worker_adapter_info"}'), timeout=10)
        assert json.loads(ok.read())["workers_per_group"] == 1
        for body, status in ((b"{not json", 400), (b'{"action": "start_worker_group"}', 429)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, body), timeout=10)
            assert refused.value.code == status and "error" in json.loads(refused.value.read())
    finally:
        server.shutdown()
        server.server_close()


class _Started:
    """What `start_child` returns, for a group that is recorded, not run."""

    pid = 4321

    def poll(self) -> int:
        return 0

    def wait(self, timeout: Any = None) -> int:
        return 0


def _started_groups(monkeypatch: Any) -> List[List[str]]:
    """The command lines of the groups started from now on (recorded in place of starting them)."""
    commands: List[List[str]] = []

    def start_child(command: List[str], **options: Any) -> _Started:
        commands.append(command)
        return _Started()

    monkeypatch.setattr(native_groups, "start_child", start_child)
    return commands


def _memory_limit(command: List[str]) -> str:
    return command[command.index("--memory-limit") + 1]


@pytest.mark.parametrize("spec", ["auto", "40%"])
def test_the_adapter_divides_a_share_of_the_hosts_memory_among_all_the_workers_it_may_run(monkeypatch, spec):
    commands = _started_groups(monkeypatch)
    config = WorkerConfig("tcp://127.0.0.1:2345", memory_limit=spec)
    adapter = WorkerAdapter(config, 3, 2)  # 3 groups of 2: 6 workers on this host
    try:
        assert adapter.answer({"action": "start_worker_group"})[0] == 200
    finally:
        adapter.close()
    [command] = commands
    assert command[command.index("-n") + 1] == "2"
    assert _memory_limit(command) == str(memory_limit_bytes(spec, 6))  # each worker's size, not the group's share


def test_a_size_or_none_is_each_workers_and_an_unbounded_adapter_leaves_the_share_to_each_group(monkeypatch):
    commands = _started_groups(monkeypatch)
    for spec, max_groups in (("2GiB", 3), ("none", 3), ("auto", UNLIMITED_GROUPS)):
        adapter = WorkerAdapter(WorkerConfig("tcp://127.0.0.1:2345", memory_limit=spec), max_groups, 2)
        try:
            assert adapter.answer({"action": "start_worker_group"})[0] == 200
        finally:
            adapter.close()
    assert [_memory_limit(command) for command in commands] == [str(2 << 30), "none", "auto"]


def test_the_native_manager_divides_a_share_among_its_max_workers_too():
    assert sharing_this_host(WorkerConfig("tcp://127.0.0.1:2345", memory_limit="50%"), 4).memory_limit == (
        memory_limit_bytes("50%", 4)
    )
