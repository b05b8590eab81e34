#!/usr/bin/env python3
"""Developer commands for this repository. Needs only python3 (3.10 or newer).

    python3 dev.py demo              # install every distribution into .venv, run examples/demo.py
    python3 dev.py test              # run the CI selection of tox.ini's matrix (what .ci/run runs)
    python3 dev.py test ENV [ENV..]  # run those tox environments instead (e.g. py312-scheduler lint)
    python3 dev.py pytest DIR [ARG]  # pytest on DIR; a missing or empty DIR passes (used by tox.ini)
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent

# The CI selection: every distribution alone on 3.11, the client (the one distribution that
# promises every platform and version) also on the oldest and newest Python, the integration
# suite, the client installed alone against a cluster, and lint. The rest of the matrix is one
# `dev.py test ENV` away.
CI_ENVS = [
    "py311-protocol",
    "py311-client",
    "py311-scheduler",
    "py311-storage",
    "py311-worker",
    "py311-monitor",
    "py311-symphony",
    "py310-client",
    "py313-client",
    "py311-integration",
    "client-alone",  # after py311-integration: it runs the cluster from that environment
    "lint",
]

# scaler-protocol first: the others depend on it, and pip resolves local names from this list.
DISTRIBUTIONS = [
    "scaler-protocol",
    "scaler-client",
    "scaler-scheduler",
    "scaler-storage",
    "scaler-worker",
    "scaler-monitor",
    "scaler-symphony",
]

TOX_REQUIREMENT = "tox>=4.11,<5"  # tox.ini is written for tox 4


def _run(command: list[str], **kwargs) -> int:
    print("+", shlex.join(str(part) for part in command), flush=True)
    return subprocess.call(command, **kwargs)


def _check(command: list[str], **kwargs) -> None:
    code = _run(command, **kwargs)
    if code != 0:
        sys.exit(f"dev.py: command failed with exit code {code}")


def _venv_python(directory: Path) -> Path:
    return directory / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _ensure_venv(directory: Path) -> Path:
    python = _venv_python(directory)
    if not python.exists():
        print(f"creating {directory.name}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(directory)
    return python


def _with_pyenv_pythons(environ: dict[str, str]) -> dict[str, str]:
    """Put every installed pyenv CPython 3.10-3.13 on PATH, so tox finds python3.10 ... python3.13."""
    versions = Path(environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        candidates = sorted(versions.glob(f"{minor}.*/bin"), reverse=True)
        found += [str(path) for path in candidates if (path / f"python{minor}").exists()][:1]
    environ = dict(environ)
    environ["PATH"] = os.pathsep.join([*found, environ.get("PATH", "")])
    return environ


def demo(_args: list[str]) -> None:
    script = ROOT / "examples" / "demo.py"
    if not script.exists():
        sys.exit(f"dev.py demo: {script.relative_to(ROOT)} does not exist yet")
    python = _ensure_venv(ROOT / ".venv")
    packages = [str(ROOT / "packages" / name) for name in DISTRIBUTIONS]
    _check([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages])
    sys.exit(_run([str(python), str(script)], cwd=ROOT))


def test(envs: list[str]) -> None:
    python = _ensure_venv(ROOT / ".venv-tox")
    _check([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", TOX_REQUIREMENT])
    environ = _with_pyenv_pythons(os.environ)
    selection = ",".join(envs or CI_ENVS)
    print(f"dev.py test: tox environments {selection}", flush=True)
    sys.exit(_run([str(python), "-m", "tox", "run", "-e", selection], cwd=ROOT, env=environ))


def pytest(args: list[str]) -> None:
    if not args:
        sys.exit("usage: dev.py pytest DIR [PYTEST ARGS]")
    directory = Path(args[0])
    if not directory.is_dir():
        print(f"dev.py pytest: {directory} does not exist: no tests to run", flush=True)
        return
    code = _run([sys.executable, "-m", "pytest", *args])
    if code == 5:  # pytest collected no test: a package without tests yet is not a failure
        print(f"dev.py pytest: pytest collected no test in {directory}", flush=True)
        code = 0
    sys.exit(code)


COMMANDS = {"demo": demo, "test": test, "pytest": pytest}


def main() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - dev.py runs on whatever python3 the machine has
        sys.exit("dev.py needs Python 3.10 or newer")
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
