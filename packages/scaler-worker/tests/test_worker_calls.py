"""Calls on every worker, the worker's part (`worker_calls.py` in the core, `worker_setup.py` for the shell's and
the processor's I/O): a restart replaces the processor now, an upload once no task runs there, a run is the
shell's; what an uploaded file's name may be, where it goes, and a preload that cannot run."""

from __future__ import annotations

import os
import sys
import zipfile

from core_harness import CLIENT, Harness, make_task, task_id

from scaler.protocol import messages as m
from scaler.worker.worker_events import CallDone, FromScheduler
from scaler.worker.worker_setup import add_uploads_to_path, preload_problem, save_upload


def _call(kind: m.WorkerCallKind, call_id: int = 3) -> m.WorkerCall:
    return m.WorkerCall(call_id, kind, CLIENT, "helper.py" if kind == m.WorkerCallKind.UPLOAD else "", b"x")


def test_a_restart_replaces_the_processor_now_and_the_task_it_ran_died():
    h = Harness()
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    assert h.running_task() == task_id(1)
    h.handle(FromScheduler(_call(m.WorkerCallKind.RESTART)))
    assert h.started == [0, 1] and h.running_task() == task_id(2)  # the queued task runs on the fresh one
    (died,) = h.results()
    assert died.status == m.TaskStatus.WORKER_DIED and "Client.restart" in died.error_text
    assert h.take(m.WorkerCallResult) == [m.WorkerCallResult(3, CLIENT, b"", True)]


def test_after_an_upload_the_processor_is_replaced_once_no_task_runs_there():
    h = Harness(pipeline_depth=2)
    h.assign(*[make_task(n) for n in range(1, 7)])
    h.answer_gets()
    h.finish()  # quick: task 2 runs, tasks 3 and 4 are sent ahead
    h.results()
    assert h.runner.inbox == [task_id(3), task_id(4)]
    call = _call(m.WorkerCallKind.UPLOAD)
    h.handle(FromScheduler(call))
    assert h.calls == [call] and h.started == [0]  # the shell saves it; the runner waits for its answer
    h.handle(CallDone(m.WorkerCallResult(3, CLIENT, b"", True), uploaded=True))
    assert h.take(m.WorkerCallResult) == [m.WorkerCallResult(3, CLIENT, b"", True)]
    h.tell(h.processor_finishes())  # task 2 ends quickly: task 3 starts, but nothing more is sent ahead
    assert h.running_task() == task_id(3) and h.runner.inbox == [task_id(4)] and h.started == [0]
    assert h.run_all() == [task_id(n) for n in range(3, 7)]
    assert h.started == [0, 1]  # tasks 5 and 6 ran on a fresh processor
    assert [r.task_id for r in h.results()] == [task_id(n) for n in range(2, 7)]


def test_a_run_is_the_shells_and_its_answer_goes_to_the_scheduler_as_it_is():
    h = Harness()
    call = _call(m.WorkerCallKind.RUN)
    h.handle(FromScheduler(call))
    assert h.calls == [call]
    answer = m.WorkerCallResult(3, CLIENT, b"", False, b"", "Traceback ...")
    h.handle(CallDone(answer))
    assert h.take(m.WorkerCallResult) == [answer] and h.started == [0]


def test_an_uploaded_file_has_a_plain_name_and_is_saved_whole(tmp_path):
    directory = str(tmp_path / "uploads")
    os.mkdir(directory)  # the agent makes it as it starts
    assert "not a file name" in save_upload(directory, "../escape.py", b"")
    assert "not a file name" in save_upload(directory, ".hidden.py", b"")
    assert ".py, .zip or .whl" in save_upload(directory, "notes.txt", b"")
    assert save_upload(directory, "helper.py", b"VALUE = 1\n") is None
    assert os.listdir(directory) == ["helper.py"]  # no partial file left
    with zipfile.ZipFile(os.path.join(directory, "pack.zip"), "w") as archive:
        archive.writestr("pack/__init__.py", "")
    before = list(sys.path)
    try:
        add_uploads_to_path(directory)
        add_uploads_to_path(directory)  # once each
        assert sys.path[: len(before)] == before  # after what is installed
        assert sys.path[len(before) :] == [directory, os.path.join(directory, "pack.zip")]
    finally:
        sys.path[:] = before


def test_a_preload_that_cannot_run_here_is_named(tmp_path):
    assert preload_problem("json") is None
    assert preload_problem("os.path") is None
    assert "no module 'no_such_module_x'" in preload_problem("no_such_module_x")
    assert "no such script" in preload_problem(str(tmp_path / "missing.py"))
    script = tmp_path / "setup.py"
    script.write_text("")
    assert preload_problem(str(script)) is None


def test_a_run_returns_its_value_or_its_exception_and_refuses_a_large_result(tmp_path):
    import cloudpickle

    from scaler.worker.worker_setup import RUN_RESULT_BYTES, run_function

    success, value, error = run_function(str(tmp_path), cloudpickle.dumps((divmod, (7, 2), {})))
    assert (success, cloudpickle.loads(value), error) == (True, (3, 1), "")
    success, value, error = run_function(str(tmp_path), cloudpickle.dumps((bytes, (RUN_RESULT_BYTES,), {})))
    assert not success and "more than run's" in str(cloudpickle.loads(value)) and "Traceback" in error
    success, value, error = run_function(str(tmp_path), cloudpickle.dumps((int, ("x",), {})))
    assert not success and isinstance(cloudpickle.loads(value), ValueError)


def test_the_recent_log_lines_are_the_last_ones_as_the_log_shows_them():
    import logging

    from scaler.worker.worker_setup import LOG_LINES, RecentLogs

    logs = RecentLogs()
    logger = logging.getLogger("scaler.test.recent")
    logger.addHandler(logs)
    try:
        for number in range(LOG_LINES + 10):
            logger.warning(f"line {number}")
    finally:
        logger.removeHandler(logs)
    assert len(logs.lines) == LOG_LINES
    assert logs.lines[0][0] == "WARNING" and logs.lines[0][1].endswith("line 10")
    assert logs.lines[-1][1].startswith("[WARNING]") and logs.lines[-1][1].endswith(f"line {LOG_LINES + 9}")
