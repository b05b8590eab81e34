"""A Dask or Ray user's first day: a local cluster that is quiet, that refuses a busy address, that survives
Ctrl-C, and the calls such a user expects (docs/interfaces.md, "Coming from Dask", "Coming from Ray")."""

from __future__ import annotations

import concurrent.futures
import graphlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import nbclient
import nbformat
import psutil
import pytest
from cluster_processes import BIN, hello_answered, wait_until, worker_count

from scaler import Client, SchedulerClusterCombo
from scaler.cluster.combo import ClusterStartError
from scaler.protocol.addresses import default_monitor_address, default_storage_address
from scaler.protocol.errors import TaskRejectedError


def _start_program(code: str) -> subprocess.Popen:
    """``code`` as a Python program in a process group of its own (as a terminal runs one), its output piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _finish(program: subprocess.Popen, timeout: float = 120) -> tuple:
    try:
        out, err = program.communicate(timeout=timeout)
    finally:
        if program.poll() is None:
            os.killpg(program.pid, signal.SIGKILL)
            program.wait(30)
    return program.returncode, out, err


# ----------------------------------------------------------------------------------------------------------- quiet


def test_a_combo_and_its_clients_print_nothing_but_the_programs_own_output():
    program = _start_program("""
        from scaler import Client, SchedulerClusterCombo
        combo = SchedulerClusterCombo(n_workers=2)
        with Client(combo.get_address()) as client:
            print(client.submit(abs, -3).result(timeout=60))
            print(sum(client.map(abs, [(-i,) for i in range(10)])))
        with Client(combo.get_address()) as client:
            print(client.get({"a": 1, "b": (abs, "a")}, keys=["b"]))
        combo.shutdown()
    """)
    assert _finish(program) == (0, "3\n45\n{'b': 1}\n", "")


def test_the_storage_server_a_scheduler_starts_logs_at_the_schedulers_level(processes, address, tmp_path):
    log = tmp_path / "scheduler.log"
    scheduler = processes.scheduler(address, "--logging-level", "WARNING", log_path=str(log))
    assert hello_answered(default_storage_address(address))  # the one it started
    processes.kill_group(scheduler, signal.SIGTERM)
    scheduler.wait(30)
    assert "[INFO]" not in log.read_text()  # the storage server's lines (listening, sizes, stopping) are not written


def test_in_a_notebook_a_combos_start_use_and_shutdown_show_only_the_users_output(monkeypatch):
    """A real Jupyter kernel runs the cells; what its child processes write lands in whichever cell runs then, so
    a cell runs after the shutdown too."""
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # the kernel shows what its children write, as it does for users
    cells = [
        "from scaler import Client, SchedulerClusterCombo\ncombo = SchedulerClusterCombo(n_workers=2)",
        "client = Client(combo.get_address())\nprint(client.submit(abs, -7).result(timeout=60))",
        "client.map(abs, [(-i,) for i in range(5)])",
        "client.disconnect()\ncombo.shutdown()",
        "print('done')",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    outputs = [
        [output.get("text") or output.get("data", {}).get("text/plain") for output in cell.outputs]
        for cell in notebook.cells
    ]
    assert outputs == [[], ["7\n"], ["[0, 1, 2, 3, 4]"], [], ["done\n"]]


# ------------------------------------------------------------------------------------------------- a busy address


def test_a_second_combo_on_a_busy_address_raises_naming_the_address(cluster):
    address = cluster.get_address()
    with pytest.raises(ClusterStartError, match=f"scheduler at {address}: the address is in use"):
        SchedulerClusterCombo(n_workers=1, address=address)
    storage = default_storage_address(address)
    with pytest.raises(ClusterStartError, match=f"object storage server at {storage}: the address is in use"):
        SchedulerClusterCombo(n_workers=1, object_storage_address=storage)
    monitor = default_monitor_address(address)
    with pytest.raises(ClusterStartError, match=f"monitor at {monitor}: the address is in use"):
        SchedulerClusterCombo(n_workers=1, monitor_address=monitor)
    with Client(address) as client:  # the first one is untouched, and no worker of a second one joined it
        assert client.submit(abs, -1).result(timeout=60) == 1
    wait_until(lambda: worker_count(monitor) == 2, 30, "the first combo's two workers")


# ---------------------------------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_in_a_terminal_interrupts_the_program_and_leaves_its_cluster_serving():
    """SIGINT to the program's whole process group, as a terminal's Ctrl-C sends it, reaches the program alone:
    its user gets KeyboardInterrupt where they wait, and the cluster goes on serving."""
    program = _start_program("""
        import time
        from scaler import Client, SchedulerClusterCombo
        combo = SchedulerClusterCombo(n_workers=1)
        client = Client(combo.get_address())
        future = client.submit(time.sleep, 60)
        try:
            print("waiting", flush=True)
            future.result(timeout=90)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        future.cancel()
        print(client.submit(abs, -5).result(timeout=60), flush=True)
        client.disconnect()
        combo.shutdown()
    """)
    try:
        assert program.stdout.readline() == "waiting\n"
        os.killpg(program.pid, signal.SIGINT)
    finally:
        code, out, err = _finish(program)
    assert (code, out, err) == (0, "interrupted\n5\n", "")


def test_a_combo_stopped_by_ctrl_c_in_its_program_leaves_nothing_behind(address):
    """A program that lets the KeyboardInterrupt end it stops its cluster as it exits."""
    program = _start_program(f"""
        import time
        from scaler import SchedulerClusterCombo
        combo = SchedulerClusterCombo(n_workers=1, address={address!r})
        print("ready", flush=True)
        time.sleep(90)
    """)
    try:
        assert program.stdout.readline() == "ready\n"
        assert hello_answered(address)
        os.killpg(program.pid, signal.SIGINT)
    finally:
        code, out, err = _finish(program)
    assert code == -signal.SIGINT and err.rstrip().endswith("KeyboardInterrupt")
    wait_until(lambda: not hello_answered(address, timeout=0.2), 30, "the combo's scheduler to stop")


# ---------------------------------------------------------------------------------------------------- capabilities


def test_a_task_never_runs_on_a_worker_without_the_capabilities_it_needs_under_the_default_policy(client):
    """The shared cluster's workers offer nothing: the task waits, and its queue timeout rejects it."""
    future = client.submit_verbose(abs, (-1,), {}, capabilities={"gpu": -1}, timeout_seconds=2)
    with pytest.raises(TaskRejectedError, match="no worker with capabilities gpu took the task within"):
        future.result(timeout=60)
    assert client.submit(abs, -2).result(timeout=60) == 2


def test_with_missing_capabilities_fail_a_task_no_worker_can_run_fails_naming_them():
    with SchedulerClusterCombo(n_workers=1, per_worker_capabilities="linux", missing_capabilities="fail") as combo:
        with Client(combo.get_address()) as client:
            assert client.submit_verbose(abs, (-1,), {}, capabilities={"linux": -1}).result(timeout=60) == 1
            future = client.submit_verbose(abs, (-1,), {}, capabilities={"gpu": -1, "linux": -1})
            with pytest.raises(TaskRejectedError, match=r"no worker offers the capabilities it needs \(gpu,linux\)"):
                future.result(timeout=60)


# ------------------------------------------------------------------------------------ Dask's calls on the Client


def identity(value):
    return value


def add_all(values, offset=0):
    return sum(values) + offset


def test_gather_takes_futures_in_nested_collections(client):
    futures = [client.submit(abs, -i) for i in range(3)]
    assert client.gather(futures) == [0, 1, 2]
    assert client.gather({"a": futures, "b": (futures[2], "text")}) == {"a": [0, 1, 2], "b": (2, "text")}
    failing = client.submit(divmod, 1, 0)
    with pytest.raises(ZeroDivisionError):
        client.gather([futures[0], failing])
    assert client.gather([futures[0], failing], errors="skip") == [0]


def test_scattered_data_and_references_inside_lists_tuples_and_dicts_reach_tasks_as_their_objects(client):
    ten, twenty = client.scatter([10, 20])
    assert client.submit(add_all, [ten, twenty]).result(timeout=60) == 30
    assert client.submit(add_all, (ten,), offset=twenty).result(timeout=60) == 30  # a top-level one, as before
    by_name = client.scatter({"x": [1, 2], "y": "text"})
    nested = {"deep": [(by_name["x"], {"y": by_name["y"]})], "plain": [1, 2]}
    assert client.submit(identity, nested).result(timeout=60) == {"deep": [([1, 2], {"y": "text"})], "plain": [1, 2]}
    assert client.map(add_all, [([ten, twenty],), ([ten],)]) == [30, 10]
    assert client.submit(len, client.scatter(b"x" * 100_000)).result(timeout=60) == 100_000


def test_scheduler_info_names_the_workers_and_no_dashboard_runs_unless_asked(client, cluster):
    address = cluster.get_address()
    wait_until(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "the cluster's two workers")
    info = client.scheduler_info()
    assert info["address"] == address and info["monitor_address"] == default_monitor_address(address)
    assert {worker["host"] for worker in info["workers"].values()} == {os.uname().nodename}
    assert all(worker["pid"] > 0 and worker["capabilities"] == {} for worker in info["workers"].values())
    assert info["clients"] >= 1 and info["dashboard_link"] is None and client.dashboard_link is None


def test_a_combo_asked_for_a_dashboard_serves_its_page_and_its_clients_know_the_link():
    with SchedulerClusterCombo(n_workers=1, dashboard_address=":0") as combo:
        assert combo.dashboard_link.startswith("http://127.0.0.1:")
        with Client(combo.get_address()) as client:
            assert client.dashboard_link == combo.dashboard_link
            assert client.scheduler_info()["dashboard_link"] == combo.dashboard_link
        with urllib.request.urlopen(combo.dashboard_link, timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read().lower()


def test_the_joblib_backend_uses_the_current_client_when_given_none(cluster, monkeypatch):
    import joblib

    import scaler.compat.joblib  # noqa: F401  (registers the backend)

    monkeypatch.delenv("SCALER_SCHEDULER_ADDRESS", raising=False)
    with Client(cluster.get_address()) as client:
        assert Client.current() is client
        with joblib.parallel_config(backend="scaler", n_jobs=2):
            assert joblib.Parallel()(joblib.delayed(abs)(-i) for i in range(10)) == list(range(10))
        assert client.connected  # it was borrowed, not the backend's to disconnect


# -------------------------------------------------------------------------------- the earlier engine's behaviour


def test_a_call_that_cannot_bind_raises_type_error_at_submit(client):
    with pytest.raises(TypeError, match="missing a required argument"):
        client.submit(divmod, 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bad'"):
        client.submit_verbose(identity, (1,), {"bad": 2})
    with pytest.raises(TypeError, match="too many positional arguments"):
        client.map(abs, [(1,), (1, 2)])


def test_futures_pending_when_a_client_leaves_its_with_block_end_cancelled(cluster):
    with Client(cluster.get_address()) as client:
        pending = client.submit(time.sleep, 60)
        finished = client.submit(abs, -1)
        assert finished.result(timeout=60) == 1
    assert pending.cancelled() and not finished.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        pending.result(timeout=10)


def test_graph_cycles_duplicate_keys_early_profiling_and_refused_shutdowns_raise_as_before(cluster):
    with Client(cluster.get_address(), profiling=True) as client:
        with pytest.raises(graphlib.CycleError) as cycle:
            client.get({"a": (abs, "b"), "b": (abs, "a")}, keys=["a"])
        assert set(cycle.value.args[1]) == {"a", "b"}
        with pytest.raises(KeyError, match="requested more than once"):
            client.get({"a": 1, "b": (abs, "a")}, keys=["b", "b"])
        running = client.submit(time.sleep, 60)
        with pytest.raises(ValueError, match="has not ended"):
            running.profiling_info()
        running.cancel()
        with pytest.raises(ValueError, match="refused to shut down"):  # the combo's scheduler is protected
            client.shutdown()


# -------------------------------------------------------------------------------------------------------- scaler_up


def _start_up(tmp_path, address: str) -> subprocess.Popen:
    config = tmp_path / "cluster.toml"
    config.write_text(
        textwrap.dedent(f"""
        [scheduler]
        address = "{address}"
        logging-level = "WARNING"

        [object_storage_server]
        logging-level = "WARNING"

        [ui]
        port = 0
        logging-level = "WARNING"

        [cluster]
        num-of-workers = 2
        logging-level = "WARNING"
    """)
    )
    return subprocess.Popen(
        [os.path.join(BIN, "scaler_up"), str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _read_until_running(up: subprocess.Popen) -> dict:
    """What scaler_up printed of each program (name -> line), once it says it runs."""
    lines = {}
    for line in up.stdout:
        if line.startswith("scaler_up: running"):
            return lines
        lines[line.split(" at ")[0].removeprefix("scaler_up: ")] = line
    raise AssertionError(f"scaler_up ended before running: {up.stderr.read()}")


def test_scaler_up_starts_a_whole_cluster_from_one_file_and_ctrl_c_stops_it_all(tmp_path, address):
    up = _start_up(tmp_path, address)
    try:
        printed = _read_until_running(up)
        link = printed["dashboard"].split(" at ")[1].split(" ")[0]
        assert f"scheduler at {address}" in printed["scheduler"]
        assert f"object storage server at {default_storage_address(address)}" in printed["object storage server"]
        tree = psutil.Process(up.pid).children(recursive=True)
        with Client(address) as client:
            assert client.submit(abs, -4).result(timeout=60) == 4
            assert client.dashboard_link == link
            wait_until(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "scaler_up's two workers")
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.status == 200
        up.send_signal(signal.SIGINT)
    finally:
        code, out, err = _finish(up)
    assert (code, err) == (0, "") and "received SIGINT: stopped every program" in out
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == []


def test_scaler_up_stops_the_tree_when_one_of_its_programs_dies(tmp_path, address):
    up = _start_up(tmp_path, address)
    try:
        scheduler_pid = int(_read_until_running(up)["scheduler"].rsplit("(pid ", 1)[1].rstrip(")\n"))
        tree = psutil.Process(up.pid).children(recursive=True)
        os.kill(scheduler_pid, signal.SIGKILL)
    finally:
        code, out, err = _finish(up)
    assert code == 1 and f"the scheduler (pid {scheduler_pid}) was killed by signal SIGKILL; stopping" in err
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == []
