"""Parfun 7.4 (opengris-parfun) runs its own examples on its two Scaler backends, unchanged.

Its examples that take ``--backend`` run as they are, given the Scaler backends on their command line; its
README's example and its API examples name ``local_multiprocessing`` in their code, and only that name is
changed (as Parfun's documentation says to choose a backend). Each output is compared with the one the same
program gives on Parfun's own ``local_single_process`` backend, where the example's data allow it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest

BACKENDS = ["scaler_local", "scaler_remote"]


def backend_arguments(backend: str, address: str) -> dict:
    if backend == "scaler_local":
        return {"n_workers": 2}
    return {"scheduler_address": address, "n_workers": 2}


def run(arguments, cwd: str) -> str:
    done = subprocess.run([sys.executable, *arguments], cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{arguments} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def with_backend(code: str, backend: str, address: str) -> str:
    """``code`` with its backend ``"local_multiprocessing"`` changed to ``backend`` and its arguments."""
    arguments = "".join(f", {name}={value!r}" for name, value in backend_arguments(backend, address).items())
    changed, count = re.subn(r'"local_multiprocessing"', f'"{backend}"{arguments}', code)
    assert count == 1, "the example no longer names its backend once"
    return changed


def scaler_lines(output: str) -> str:
    """The program's own output, without the log lines of a cluster it started (scaler_local)."""
    return "\n".join(line for line in output.splitlines() if not line.startswith(("[INFO]", "[WARNING]"))).strip("\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_readme_example(backend, remote_cluster, tmp_path):
    readme = importlib.metadata.metadata("opengris-parfun").get_payload()  # the README, as installed
    (code,) = re.findall(r"```Python\n(.*?)```", readme, re.S)
    program = tmp_path / "readme_example.py"
    program.write_text(with_backend(code, backend, remote_cluster))
    assert scaler_lines(run([str(program)], str(tmp_path))).splitlines()[-1] == "[1, 4, 9]"


@pytest.mark.parametrize("backend", BACKENDS)
def test_portfolio_metrics(backend, sources, remote_cluster):
    """examples/portfolio_metrics: pandas dataframes partitioned by group, on each backend as it is."""
    root = sources["opengris_parfun"]
    module = ["-m", "examples.portfolio_metrics.main"]
    expected = run([*module, "--backend", "local_single_process"], root)
    arguments = json.dumps(backend_arguments(backend, remote_cluster))
    assert scaler_lines(run([*module, "--backend", backend, "--backend_args", arguments], root)) == expected.strip("\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_bigrams(backend, sources, remote_cluster, tmp_path):
    """examples/count_bigrams, reading a local text (its --text-url takes any URL urllib opens)."""
    root = sources["opengris_parfun"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i} of the quick brown fox and the lazy dog" for i in range(3_000)))
    module = ["-m", "examples.count_bigrams.main", "--text-url", text.as_uri()]
    expected = run([*module, "--backend", "local_single_process"], root)
    arguments = json.dumps(backend_arguments(backend, remote_cluster))
    assert scaler_lines(run([*module, "--backend", backend, "--backend_args", arguments], root)) == expected.strip("\n")


API_EXAMPLES = ["per_argument", "all_arguments", "custom_generators", "partition_size", "profiling"]


@pytest.mark.parametrize("example", API_EXAMPLES)
def test_api_usage_examples(example, sources, remote_cluster, tmp_path, backend="scaler_remote"):
    """On the remote backend only (the other tests run both): each of them on a new local cluster would double
    this suite's time for no path of ours that the others do not take."""
    root = sources["opengris_parfun"]
    code = open(os.path.join(root, "examples", "api_usage", f"{example}.py")).read()
    program = tmp_path / f"{example}.py"
    program.write_text(with_backend(code, backend, remote_cluster))
    output = scaler_lines(run([str(program)], str(tmp_path)))
    original = tmp_path / f"{example}_single.py"
    original.write_text(code.replace('"local_multiprocessing"', '"local_single_process"'))
    expected = run([str(original)], str(tmp_path)).strip("\n")
    if example == "profiling":  # random values: one line, its sum
        assert re.fullmatch(r"Sum = \d+", output) and re.fullmatch(r"Sum = \d+", expected)
    elif example == "partition_size":  # random values: three ways of summing the same dataframe agree
        assert len(set(output.splitlines())) == 1 and len(output.splitlines()) == 3
    else:  # fixed inputs: the very same result
        assert output == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_parallel_functions(backend, sources, remote_cluster, tmp_path):
    """examples/api_usage/nested_functions: Parfun functions called inside Parfun functions (nested tasks)."""
    root = sources["opengris_parfun"]
    code = open(os.path.join(root, "examples", "api_usage", "nested_functions.py")).read()
    program = tmp_path / "nested_functions.py"
    program.write_text(with_backend(code, backend, remote_cluster))
    output = scaler_lines(run([str(program)], str(tmp_path)))
    sections = re.split(r"^(?:A|B|A \+ B) =$", output, flags=re.M)[1:]
    a, b, total = (ast.literal_eval(section.strip()) for section in sections)
    assert total == [[x + y for x, y in zip(row_a, row_b, strict=True)] for row_a, row_b in zip(a, b, strict=True)]
