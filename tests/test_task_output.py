"""``Client(stream_output=True)``: what a task prints reaches the client as it prints it, prefixed with the task."""

from __future__ import annotations

import os
import sys
import time

from scaler import Client
from scaler.protocol.ids import show


def print_then_wait_for(path: str) -> str:
    """Print, then wait (a minute at most) for the test to answer by creating ``path``: only output that arrives
    while the task runs lets it finish."""
    print("first line", flush=True)
    print("a warning", file=sys.stderr)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError("the client never saw the first line while the task ran")
        time.sleep(0.01)
    print("second line, ", end="")
    print("finished")
    return "done"


def quiet_print() -> int:
    print("nobody asked for this")
    return 1


def test_output_reaches_the_client_while_the_task_runs(client, capsys, tmp_path):
    answer = tmp_path / "seen"
    with Client(address=client.address, stream_output=True) as streaming:
        future = streaming.submit(print_then_wait_for, str(answer))
        prefix = f"[task {show(future.task_id)}] "
        out = err = ""
        deadline = time.monotonic() + 60
        while prefix + "first line\n" not in out:
            assert time.monotonic() < deadline, f"no output while the task runs: {out!r}"
            captured = capsys.readouterr()
            out, err = out + captured.out, err + captured.err
            time.sleep(0.01)
        answer.touch()
        assert future.result(timeout=60) == "done"
        captured = capsys.readouterr()  # the task's last output came before its result
        out, err = out + captured.out, err + captured.err
    assert out.count(prefix) == 2 and prefix + "second line, finished\n" in out
    assert prefix + "a warning\n" in err and "a warning" not in out


def test_output_stays_on_the_worker_by_default(client, capsys):
    assert client.submit(quiet_print).result(timeout=60) == 1  # its output would have come before its result
    assert "nobody asked for this" not in capsys.readouterr().out


def test_graph_tasks_stream_their_output(client, capsys):
    with Client(address=client.address, stream_output=True) as streaming:
        assert streaming.get({"a": (quiet_print,)}, ["a"]) == {"a": 1}
    assert "] nobody asked for this\n" in capsys.readouterr().out


def print_around_a_child() -> str:
    print("parent before")
    with Client() as inside:  # a plain client of the worker's processor: the child does not stream its output
        assert inside.submit(quiet_print).result(timeout=60) == 1
    print("parent after")
    return "done"


def test_a_waiting_task_keeps_its_output_and_the_task_run_meanwhile_keeps_its_own(client, capsys):
    """The parent waits for its child in the same processor (the child runs while the parent is switched out):
    what each prints goes where its own task says, not where the other's does."""
    with Client(address=client.address, stream_output=True) as streaming:
        future = streaming.submit(print_around_a_child)
        assert future.result(timeout=60) == "done"
        out = capsys.readouterr().out
    prefix = f"[task {show(future.task_id)}] "
    assert prefix + "parent before\n" in out and prefix + "parent after\n" in out
    assert "nobody asked for this" not in out
