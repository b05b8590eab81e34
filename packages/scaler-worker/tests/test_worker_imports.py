"""The worker's boundary: none of its modules imports the client. The payload format and the task context are
contracts both sides take from scaler.protocol; the processor hosts a user's own `Client` only through the task
context, which the client fills in (`scaler.protocol.task_context`)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import scaler.cluster
import scaler.worker
import scaler.worker_manager


def _imports(source: pathlib.Path):
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            yield from ([f"{module}.{alias.name}" for alias in node.names] if module == "scaler" else [module])


def test_no_module_of_the_worker_imports_the_client():
    packages = (scaler.worker, scaler.cluster, scaler.worker_manager)
    sources = [source for package in packages for source in pathlib.Path(package.__file__).parent.glob("**/*.py")]
    assert len(sources) > 30
    found = {
        f"{source.name}: {name}"
        for source in sources
        for name in _imports(source)
        if name == "scaler.client" or name.startswith("scaler.client.") or name == "scaler.Client"
    }
    assert not found


def test_a_processor_starts_without_importing_the_client():
    code = (
        "import sys\n"
        "import scaler.worker.processor\n"
        "print(sorted(m for m in sys.modules if m == 'scaler.client' or m.startswith('scaler.client.')))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"
