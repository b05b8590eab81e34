"""Progress bars of map, get, dask_get and scaler.progress on a real cluster, their output captured."""

from __future__ import annotations

import functools
import re
import time

import dask
import nbclient
import nbformat
import pytest

import scaler


def slow_square(x):
    time.sleep(0.002)
    return x * x


def fail_on(x, bad):
    if x == bad:
        raise ValueError(f"bad {x}")
    return x


def _last_text_line(stderr: str) -> str:
    """What a terminal shows last: the text after the last carriage return of the last line."""
    lines = [line for line in stderr.split("\n") if line.strip()]
    return lines[-1].split("\r")[-1]


def test_progress_is_off_by_default(client, capfd):
    assert client.map(slow_square, [(i,) for i in range(50)]) == [i * i for i in range(50)]
    assert client.get({"a": 2, "b": (slow_square, "a")}, ["b"]) == {"b": 4}
    assert capfd.readouterr().err == ""


def test_map_with_a_text_counter(client, capfd):
    results = client.map(slow_square, [(i,) for i in range(3000)], progress="text")
    assert results == [i * i for i in range(3000)]
    err = capfd.readouterr().err
    assert re.fullmatch(r"map: 3,000/3,000 tasks \(100%\) \d+\.\ds", _last_text_line(err)), err[-300:]
    assert err.endswith("\n")


def test_map_with_a_tqdm_bar(client, capfd):
    client.map(slow_square, [(i,) for i in range(3000)], progress=True)  # tqdm is installed here
    err = capfd.readouterr().err
    assert "map: 100%|" in err and "3000/3000" in err, err[-300:]


def test_get_and_dask_get_with_a_bar(client, capfd):
    graph = {f"x{i}": (slow_square, i) for i in range(20)}
    assert client.get(graph, list(graph), progress="text") == {f"x{i}": i * i for i in range(20)}
    assert _last_text_line(capfd.readouterr().err).startswith("graph: 20/20 tasks (100%)")
    squares = [dask.delayed(slow_square)(i) for i in range(10)]
    scheduler = functools.partial(client.dask_get, progress=True)
    assert dask.compute(*squares, scheduler=scheduler) == tuple(i * i for i in range(10))
    err = capfd.readouterr().err
    assert "graph: 100%|" in err and "10/10" in err, err[-300:]
    with pytest.raises(ValueError, match="block=True"):
        client.get(graph, ["x1"], block=False, progress=True)


def test_a_failing_map_ends_its_bar_and_raises(client, capfd):
    with pytest.raises(ValueError, match="bad 5"):
        client.map(fail_on, [(i, 5) for i in range(200)], progress="text")
    err = capfd.readouterr().err
    assert re.match(r"map: \d+/200 tasks", _last_text_line(err)) and err.endswith("\n")


def test_scaler_progress_over_futures(client, capfd):
    futures = [client.submit(slow_square, i) for i in range(100)]
    assert scaler.progress(futures, style="text") == futures
    assert all(future.done() for future in futures)
    assert _last_text_line(capfd.readouterr().err).startswith("tasks: 100/100 tasks (100%)")
    with client.executor() as executor:
        futures = [executor.submit(slow_square, i) for i in range(30)]
        scaler.progress(futures, description="squares")
    err = capfd.readouterr().err
    assert "squares: 100%|" in err and "30/30" in err


def test_scaler_progress_timeout_leaves_the_tasks_running(client, capfd):
    futures = [client.submit(time.sleep, 2.0)]
    with pytest.raises(TimeoutError, match="1 of 1"):
        scaler.progress(futures, timeout=0.2, style="text")
    assert futures[0].result(timeout=60) is None


def test_bad_progress_options_are_refused(client):
    with pytest.raises(ValueError, match="progress must be"):
        client.map(slow_square, [(1,)], progress="fancy")
    with pytest.raises(ValueError, match="progress must be"):
        client.get({"a": (slow_square, 2)}, ["a"], progress="fancy")
    with pytest.raises(ValueError, match="progress must be"):
        client.map(slow_square, [(1,)], progress=2)


def test_a_notebook_shows_a_widget_bar(cluster):
    """A real Jupyter kernel runs the cells: the bars are ipywidgets progress bars that end full."""
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(f"import scaler\nclient = scaler.Client(address={cluster.get_address()!r})"),
            nbformat.v4.new_code_cell(
                "futures = [client.submit(abs, -i) for i in range(20)]\n_ = scaler.progress(futures)"
            ),
            nbformat.v4.new_code_cell("sum(client.map(abs, [(i,) for i in range(100)], progress=True))"),
            nbformat.v4.new_code_cell("client.disconnect()"),
        ]
    )
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    for cell in notebook.cells[1:3]:
        kinds = [output.get("data", {}).keys() for output in cell.outputs if output["output_type"] == "display_data"]
        assert any("application/vnd.jupyter.widget-view+json" in kind for kind in kinds), cell.outputs
    assert notebook.cells[2].outputs[-1]["data"]["text/plain"] == "4950"
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = sorted(
        (model["state"]["value"], model["state"]["max"], model["state"]["bar_style"])
        for model in state.values()
        if model["model_name"] == "FloatProgressModel"
    )
    assert bars == [(20.0, 20.0, "success"), (100.0, 100.0, "success")]
