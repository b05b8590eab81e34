"""Code and set-up on the workers, by Dask's names, against real clusters: `Client.upload_file`, `Client.run`,
the workers' ``--preload``, `Client.restart`, and the hint a missing module's error gives (docs/interfaces.md,
"Coming from Dask")."""

from __future__ import annotations

import builtins
import importlib
import os
import subprocess
import sys
import threading
import time
import zipfile

import pytest
from cluster_processes import wait_until, worker_count
from keyed_clusters import start_cluster

from scaler import Client, SchedulerClusterCombo
from scaler.client.worker_calls import MAX_CALL_BYTES
from scaler.protocol.addresses import default_monitor_address


def _module_value(name: str):
    return importlib.import_module(name).VALUE


def _processor_pid() -> int:
    return os.getpid()


def _environment(name: str):
    return os.environ.get(name)


def _raise(text: str) -> None:
    raise ValueError(text)


def _mark_processor() -> int:
    builtins._scaler_test_mark = getattr(builtins, "_scaler_test_mark", 0) + 1  # type: ignore[attr-defined]
    return builtins._scaler_test_mark  # type: ignore[attr-defined]


def _slow_double(x: int) -> int:
    time.sleep(0.2)
    return 2 * x


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _workers(address: str, count: int) -> None:
    wait_until(lambda: worker_count(default_monitor_address(address)) == count, 60, f"{count} workers")


@pytest.fixture
def both(client):
    """The module's client once both workers of its cluster are connected."""
    wait_until(lambda: len(client.scheduler_info()["workers"]) == 2, 60, "the cluster's 2 workers")
    return client


# ----------------------------------------------------------------------------------------------------- upload_file


def test_an_uploaded_module_is_imported_by_every_worker_also_one_that_joins_later(processes, address, tmp_path):
    start_cluster(processes, address, tmp_path, secure=False, n_workers=1)
    module = _write(tmp_path / "helper_30a.py", "VALUE = 'first'\n")
    with Client(address, timeout_seconds=30) as client:
        with pytest.raises(ModuleNotFoundError, match=r"upload_file\('helper_30a.py'\)"):
            client.submit(_module_value, "helper_30a").result(timeout=60)  # the hint, in the error the user sees
        client.upload_file(module)
        assert client.submit(_module_value, "helper_30a").result(timeout=60) == "first"

        # a worker that joins later gets it too: it alone offers "late", so the task runs there
        processes.cluster(address, 1, "--per-worker-capabilities", "late")
        _workers(address, 2)
        late = client.submit_verbose(_module_value, ("helper_30a",), {}, capabilities={"late": 1})
        assert late.result(timeout=60) == "first"

        # uploaded again, changed: every task that starts after the call imports the new version
        _write(tmp_path / "helper_30a.py", "VALUE = 'second'\n")
        client.upload_file(module)
        assert client.submit(_module_value, "helper_30a").result(timeout=60) == "second"
        late = client.submit_verbose(_module_value, ("helper_30a",), {}, capabilities={"late": 1})
        assert late.result(timeout=60) == "second"


def test_a_zip_and_a_wheel_of_packages_are_importable(client, tmp_path):
    archive = tmp_path / "zipped_30b.zip"
    with zipfile.ZipFile(archive, "w") as file:
        file.writestr("zipped_30b/__init__.py", "VALUE = 'from a zip'\n")
    wheel = tmp_path / "wheeled_30b-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as file:
        file.writestr("wheeled_30b/__init__.py", "VALUE = 'from a wheel'\n")
    client.upload_file(str(archive))
    client.upload_file(str(wheel))
    assert client.submit(_module_value, "zipped_30b").result(timeout=60) == "from a zip"
    assert client.submit(_module_value, "wheeled_30b").result(timeout=60) == "from a wheel"


def test_upload_file_refuses_a_missing_file_another_kind_and_one_too_large(client, tmp_path):
    with pytest.raises(FileNotFoundError, match="no file"):
        client.upload_file(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match=r"\.py, \.zip or \.whl"):
        client.upload_file(_write(tmp_path / "notes.txt", "hello"))
    large = tmp_path / "large.py"
    with open(large, "wb") as file:
        file.truncate(MAX_CALL_BYTES + 1)
    with pytest.raises(ValueError, match="more than the limit"):
        client.upload_file(str(large))
    assert client.submit(abs, -1).result(timeout=60) == 1  # the client goes on


def test_an_uploaded_module_never_shadows_an_installed_one(client, tmp_path):
    client.upload_file(_write(tmp_path / "json.py", "raise RuntimeError('the uploaded json')\n"))
    assert client.submit(_module_value_or_name, "json").result(timeout=60) == "json"  # the standard library's


def _module_value_or_name(name: str) -> str:
    return importlib.import_module(name).__name__


# ------------------------------------------------------------------------------------------------------------- run


def test_run_calls_a_function_in_every_workers_agent_keyed_by_worker_id(both):
    client = both
    workers = client.scheduler_info()["workers"]
    assert client.run(os.getpid) == {worker_id: worker["pid"] for worker_id, worker in workers.items()}
    assert set(client.run(int, "ff", base=16).values()) == {255}


def test_run_raises_a_workers_exception_or_returns_it_or_leaves_it_out(both):
    client = both
    with pytest.raises(ValueError, match="no good") as raised:
        client.run(_raise, "no good")
    assert "_raise" in str(raised.value.__cause__)  # the worker's traceback
    returned = client.run(_raise, "no good", on_error="return")
    assert len(returned) == 2 and all(isinstance(error, ValueError) for error in returned.values())
    assert client.run(_raise, "no good", on_error="ignore") == {}
    with pytest.raises(ValueError, match="on_error"):
        client.run(os.getpid, on_error="skip")


def test_run_refuses_an_unpicklable_function_and_names_an_unpicklable_result(both):
    client = both
    lock = threading.Lock()
    with pytest.raises(TypeError, match="lock"):
        client.run(lambda: lock.locked())
    with pytest.raises(TypeError, match="lock"):
        client.run(threading.Lock)  # made on the worker, it cannot come back
    assert client.submit(abs, -2).result(timeout=60) == 2


def test_run_is_bounded_by_the_clients_timeout(cluster, both):
    with Client(cluster.get_address(), timeout_seconds=1) as client:
        with pytest.raises(TimeoutError, match="did not all answer"):
            client.run(time.sleep, 30)
        assert client.submit(abs, -3).result(timeout=60) == 3


def test_upload_and_run_on_a_cluster_with_keys(secure_cluster, tmp_path):
    with Client(secure_cluster.address, security=secure_cluster.security("client"), timeout_seconds=30) as client:
        client.upload_file(_write(tmp_path / "keyed_30c.py", "VALUE = 'with keys'\n"))
        assert client.submit(_module_value, "keyed_30c").result(timeout=60) == "with keys"
        assert sorted(client.run(_module_value, "keyed_30c").values()) == ["with keys", "with keys"]


# --------------------------------------------------------------------------------------------------------- restart


def test_restart_gives_fresh_processors_cancels_this_clients_tasks_and_keeps_another_clients_map(
    processes, address, tmp_path
):
    start_cluster(processes, address, tmp_path, secure=False, n_workers=2)
    with Client(address, timeout_seconds=30) as other, Client(address, timeout_seconds=30) as client:
        marks = {client.submit(_mark_processor).result(timeout=60) for _ in range(4)}
        assert max(marks) >= 2  # the processors keep what tasks leave in them
        pids = set(client.run(os.getpid))
        mine = client.submit(time.sleep, 60)

        result = {}
        arguments = [(i,) for i in range(40)]
        mapping = threading.Thread(target=lambda: result.update(values=other.map(_slow_double, arguments)))
        mapping.start()
        time.sleep(1.0)  # the other client's map runs
        client.restart()
        mapping.join(120)

        assert result["values"] == [2 * i for i in range(40)]  # nothing of the other client's was lost
        assert mine.cancelled()
        assert client.submit(_mark_processor).result(timeout=60) == 1  # a fresh processor
        assert set(client.run(os.getpid)) == pids  # the same workers (agents), connected
        assert client.submit(abs, -4).result(timeout=60) == 4


# --------------------------------------------------------------------------------------------------------- preload


def test_a_preload_script_runs_in_every_processor_also_after_a_restart(processes, address, tmp_path):
    script = _write(tmp_path / "setup_30d.py", "import os\nos.environ['PRELOADED_30D'] = 'yes'\n")
    start_cluster(processes, address, tmp_path, secure=False, n_workers=0)
    processes.cluster(address, 1, "--preload", script)
    _workers(address, 1)
    with Client(address, timeout_seconds=30) as client:
        assert client.submit(_environment, "PRELOADED_30D").result(timeout=60) == "yes"
        client.restart()
        assert client.submit(_environment, "PRELOADED_30D").result(timeout=60) == "yes"


def test_a_preload_module_by_name(processes, address, tmp_path):
    _write(tmp_path / "setup_30e.py", "import builtins\nbuiltins.PRELOADED_30E = 'by name'\n")
    start_cluster(processes, address, tmp_path, secure=False, n_workers=0)
    environment = {**os.environ, "PYTHONPATH": str(tmp_path)}
    command = [os.path.join(os.path.dirname(sys.executable), "scaler_cluster"), "-n", "1", address]
    worker = subprocess.Popen([*command, "--preload", "setup_30e"], env=environment, start_new_session=True)
    processes.processes.append(worker)
    _workers(address, 1)
    with Client(address, timeout_seconds=30) as client:
        assert client.submit(eval, "PRELOADED_30E").result(timeout=60) == "by name"


def test_a_preload_that_fails_ends_the_workers_naming_it(processes, address, tmp_path):
    start_cluster(processes, address, tmp_path, secure=False, n_workers=0)
    broken = _write(tmp_path / "broken_30f.py", "raise RuntimeError('the preload is broken')\n")
    log = tmp_path / "cluster.log"
    cluster = processes.cluster(address, 1, "--preload", broken, log_path=str(log))
    assert cluster.wait(60) != 0  # its worker was refused, not replaced
    text = log.read_text()
    assert "the preload is broken" in text and f"--preload {broken!r} failed" in text

    missing = processes.cluster(address, 1, "--preload", "no_such_module_30f", log_path=str(tmp_path / "m.log"))
    assert missing.wait(60) != 0
    assert "no module 'no_such_module_30f' is installed here" in (tmp_path / "m.log").read_text()


def test_a_combos_preload_runs_in_its_workers_and_one_not_installed_is_refused_at_once(tmp_path):
    with pytest.raises(ValueError, match="no module 'no_such_module_30g'"):
        SchedulerClusterCombo(n_workers=1, preload="no_such_module_30g")
    script = _write(tmp_path / "setup_30g.py", "import os\nos.environ['PRELOADED_30G'] = 'combo'\n")
    combo = SchedulerClusterCombo(n_workers=1, preload=script)
    try:
        with Client(combo.get_address(), timeout_seconds=30) as client:
            assert client.submit(_environment, "PRELOADED_30G").result(timeout=60) == "combo"
    finally:
        combo.shutdown()


# ------------------------------------------------------------------------------------------------- get_worker_logs


def _log_warning(text: str) -> None:
    import logging

    logging.getLogger("scaler.test").warning(text)


def test_get_worker_logs_gives_each_workers_recent_lines(both):
    client = both
    client.run(_log_warning, "a line from run 30h")
    logs = client.get_worker_logs()
    assert set(logs) == set(client.scheduler_info()["workers"])
    for lines in logs.values():
        assert ("WARNING", lines[-1][1]) == lines[-1] and lines[-1][1].endswith("a line from run 30h")
    assert all(len(lines) == 1 for lines in client.get_worker_logs(n=1).values())
    assert all(lines == [] for lines in client.get_worker_logs(n=0).values())
