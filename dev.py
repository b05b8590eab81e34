#!/usr/bin/env python3
"""Developer commands for this repository. Needs only python3 (3.10 or newer; `sync` needs 3.11 or tomli).

    python3 dev.py demo              # install every distribution into .venv, run examples/demo.py
    python3 dev.py test              # run the CI selection of tox.ini's matrix (what .ci/run runs); installs
                                     # the Debian packages its tests need (as root), or says which are missing
    python3 dev.py test ENV [ENV..]  # run those tox environments instead (e.g. py312-scheduler lint)
    python3 dev.py sync [--check]    # write DISTRIBUTIONS into tox.ini and pyproject.toml (--check: only compare)
    python3 dev.py sizes             # fail if a source file of a distribution is longer than MAX_SOURCE_LINES
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent

# The distributions of this repository (each packages/<name>, with its own pyproject.toml): the one list.
# `dev.py sync` writes it, with each distribution's dependencies among them and its extras (read from its
# pyproject.toml), into tox.ini (the environments, what each installs, what each runs) and into the root
# pyproject.toml (the meta-distribution's dependencies, mypy's search path); the lint environment runs
# `dev.py sync --check`, which fails when either file no longer matches this list.
DISTRIBUTIONS = [
    "scaler-protocol",
    "scaler-client",
    "scaler-scheduler",
    "scaler-storage",
    "scaler-worker",
    "scaler-monitor",
    "scaler-symphony",
]
# Directories of packages/ that are not components: the lint environment installs them for mypy.
TYPE_STUBS = ["soamapi-stubs"]
# Test-only distributions, never shipped: each is installed in the environment of the distribution whose tests
# need it, and in the integration environment; its own tests run in that distribution's environment.
TEST_PACKAGES = {"soamapi-fake": "scaler-symphony"}  # a fake IBM Symphony (soamapi) for scaler-symphony
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]  # every version the distributions support (requires-python)


def _short(distribution: str) -> str:
    return distribution.removeprefix("scaler-")


# The CI selection: every distribution alone on 3.11, the client (the one distribution that
# promises every platform and version) also on the oldest and newest Python, the integration
# suite, the client installed alone against a cluster, the last release and a peer of another
# protocol major against the current sources, Parfun and Pargraph from PyPI, lint, and the
# mutation check (6 of the minutes the selection takes on the 2-core development machine; CI
# allows 30: docs/testing.md has the count). The rest of the matrix is one `dev.py test ENV` away.
CI_ENVS = [
    *(f"py311-{_short(name)}" for name in DISTRIBUTIONS),
    "py310-client",
    "py313-client",
    "py311-integration",
    "client-alone",  # after py311-integration: it runs the cluster from that environment
    "py311-system",  # the integration suites that need root and Debian packages
    "crossversion",
    "thirdparty",
    "lint",
    "mutants",
]
# The CI selection runs in two lanes at once, a tox process each: the integration suite with client-alone (which
# runs the cluster of its environment), whose output streams as it runs, and every other environment (the system
# suites among them), whose output is printed when the lane ends. On the 2-core CI machine most of the integration
# suites' minutes are spent waiting on real processes (timeouts, cut links, sleeping tasks), so the lanes cost
# each other little; one after the other the selection no longer fits CI's 30 minutes (docs/testing.md).
STREAMED_LANE = ["py311-integration", "client-alone"]

TOX_REQUIREMENT = "tox>=4.11,<5"  # tox.ini is written for tox 4

# What tests need from the machine beyond Python, by the factor of the tox environments that run them (the
# `system` of py311-system): Debian packages, each known by the programs the tests run from it (a
# name on PATH or an absolute path), and root. `dev.py test` installs what is missing when it runs as root
# where apt-get is (CI does), and otherwise stops at once, naming what is missing and the command that
# installs it. The other environments need none of this.
SYSTEM_PACKAGES = {
    "system": {
        "chromium": ["chromium"],  # tests/test_monitoring.py: scaler_ui in a headless browser
        "chromium-driver": ["chromedriver"],  # ... driven through Selenium
        "slurm-wlm": ["sbatch", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"],  # tests/test_slurm.py: a real Slurm
        "munge": ["/usr/sbin/munged", "/usr/sbin/mungekey"],  # ... authenticated by munge
        "iproute2": ["/usr/sbin/ip"],  # tests/network_hosts.py: hosts made of network namespaces
    },
}
NEEDS_ROOT = {"system": "Slurm's daemons (tests/test_slurm.py) and network namespaces (tests/network_hosts.py)"}
MUNGE_KEY = "/etc/munge/munge.key"  # munged refuses to start without it; the package does not always make one
APT_LOCK_SECONDS = 600  # how long apt-get waits for another apt (e.g. an unattended upgrade) to finish


@dataclass
class SystemPlan:
    """What `dev.py test` does about the machine before it runs anything: install ``packages`` with apt-get,
    make munge's key, or stop with ``problem``."""

    packages: list[str] = field(default_factory=list)
    make_munge_key: bool = False
    problem: str = ""


def plan_system(envs: list[str], present: Callable[[str], bool], root: bool, apt: bool, command: str) -> SystemPlan:
    """What the tox environments ``envs`` lack: ``present`` tells whether a program (or file) is there, ``root``
    whether this process runs as root, ``apt`` whether apt-get is there; ``command`` is the dev.py command
    line to run again as root."""
    factors = {factor for env in envs for factor in env.split("-")}
    wanted = {package: files for factor in sorted(factors & set(SYSTEM_PACKAGES))
              for package, files in SYSTEM_PACKAGES[factor].items()}  # fmt: skip
    missing = [package for package, files in wanted.items() if not all(map(present, files))]
    make_key = "munge" in wanted and root and not present(MUNGE_KEY)  # (only root may look in /etc/munge)
    needs_root = [NEEDS_ROOT[factor] for factor in sorted(factors & set(NEEDS_ROOT))]
    if not (missing or make_key or (needs_root and not root)):
        return SystemPlan()
    if root and apt:
        return SystemPlan(missing, make_key)
    lacks = []
    commands = []
    if missing:
        lacks.append(f"the Debian packages {', '.join(missing)}")
        commands.append(f"apt-get install -y {' '.join(missing)}")
    if make_key:
        lacks.append(f"munge's key {MUNGE_KEY}")
        commands.append("mungekey --create")
    if needs_root and not root:
        lacks.append(f"root, for {' and '.join(needs_root)}")
    how = f"As root: {' && '.join(commands)}" if commands else ""
    if not root:
        how = (how + "; then run" if how else "Run") + f" `sudo {command}`"
    elif not apt:
        how = f"No apt-get here: install them with this system's package manager ({how})"
    selection = ", ".join(env for env in envs if set(env.split("-")) & (set(SYSTEM_PACKAGES) | set(NEEDS_ROOT)))
    return SystemPlan(
        problem=(
            f"dev.py test: {selection} need{'s' if ',' not in selection else ''} {'; '.join(lacks)}. {how}. "
            "Environments that need none of this run anywhere: e.g. python3 dev.py test py311-worker lint"
        )
    )


def _present(path: str) -> bool:
    return os.path.exists(path) if os.path.isabs(path) else shutil.which(path) is not None


def _provide_system(envs: list[str]) -> None:
    """Install what ``envs`` (the CI selection if none) need from the machine (as root, with apt-get), or stop
    naming what is missing."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    command = shlex.join(["python3", "dev.py", "test", *envs])
    envs = envs or CI_ENVS
    plan = plan_system(envs, _present, root, shutil.which("apt-get") is not None, command)
    if plan.problem:
        sys.exit(plan.problem)
    if plan.packages:
        lock = f"DPkg::Lock::Timeout={APT_LOCK_SECONDS}"
        environ = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _check(["apt-get", "-o", lock, "update", "-qq"], env=environ)
        _check(["apt-get", "-o", lock, "install", "-y", "-qq", *plan.packages], env=environ)
    if plan.make_munge_key and not _present(MUNGE_KEY):  # (the package may have made one)
        _check(["mungekey", "--create"])
    left = plan_system(envs, _present, root, False, command)
    if left.problem:
        sys.exit(f"dev.py test: installing did not give everything: {left.problem}")


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
    """Put every installed pyenv CPython of PYTHONS on PATH, so tox finds python3.10 ... python3.13."""
    versions = Path(environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for minor in PYTHONS:
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
    _provide_system(envs)
    python = _ensure_venv(ROOT / ".venv-tox")
    _check([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", TOX_REQUIREMENT])
    environ = _with_pyenv_pythons(os.environ)
    tox = [str(python), "-m", "tox", "run", "-e"]
    if envs:
        print(f"dev.py test: tox environments {','.join(envs)}", flush=True)
        sys.exit(_run([*tox, ",".join(envs)], cwd=ROOT, env=environ))
    sys.exit(_two_lanes(tox, environ))


def _two_lanes(tox: list[str], environ: dict[str, str]) -> int:
    """The CI selection in two lanes at once (STREAMED_LANE): the other lane's output goes to a log, printed
    when it ends; the exit code is the first failing lane's."""
    other = [env for env in CI_ENVS if env not in STREAMED_LANE]
    log_path = ROOT / ".tox" / "other-lane.log"
    log_path.parent.mkdir(exist_ok=True)
    print(f"dev.py test: tox environments {','.join(STREAMED_LANE)} (streamed) and, at once, {','.join(other)} "
          f"(its output follows when they end; meanwhile in {log_path.relative_to(ROOT)})", flush=True)  # fmt: skip
    with open(log_path, "wb") as log:
        background = subprocess.Popen([*tox, ",".join(other)], cwd=ROOT, env=environ, stdout=log, stderr=log)
        try:
            streamed = _run([*tox, ",".join(STREAMED_LANE)], cwd=ROOT, env=environ)
            background_code = background.wait()
        finally:
            if background.poll() is None:  # interrupted: the other lane ends with this process
                background.terminate()
                background.wait()
    print(f"\ndev.py test: the output of {','.join(other)}:", flush=True)
    sys.stdout.buffer.write(log_path.read_bytes())
    sys.stdout.flush()
    print(f"dev.py test: {','.join(STREAMED_LANE)} exited with {streamed}, the others with {background_code}")
    return streamed or background_code


# ----------------------------------------------------------------------------- sync


def _load_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            sys.exit("dev.py sync reads pyproject.toml files: it needs Python 3.11 or newer, or tomli installed")
    with path.open("rb") as file:
        return tomllib.load(file)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def _projects() -> dict[str, dict]:
    return {name: _load_toml(ROOT / "packages" / name / "pyproject.toml")["project"] for name in DISTRIBUTIONS}


def _with_extras(directory: str, project: dict) -> str:
    """A pip argument: the distribution at ``directory`` with every extra it declares."""
    extras = ",".join(sorted(project.get("optional-dependencies", {})))
    return f"{directory}[{extras}]" if extras else directory


def every_distribution(packages: str) -> list[str]:
    """pip arguments for every distribution, with all its extras, in ``packages`` (a copy of packages/)."""
    return [_with_extras(f"{packages}/{name}", project) for name, project in _projects().items()]


def _install_lists() -> dict[str, list[str]]:
    """What a tox environment installs from packages/ for each distribution: its local dependencies first
    (without extras, as it declares them), then itself with every extra it declares."""
    projects = _projects()
    unlisted = sorted(
        path.parent.name
        for path in (ROOT / "packages").glob("*/pyproject.toml")
        if path.parent.name not in [*DISTRIBUTIONS, *TYPE_STUBS, *TEST_PACKAGES]
    )
    if unlisted:
        listed = "DISTRIBUTIONS, TYPE_STUBS or TEST_PACKAGES"
        sys.exit(f"dev.py sync: packages/{', packages/'.join(unlisted)} not in dev.py's {listed}")
    local = {
        name: [dep for dep in map(_requirement_name, project.get("dependencies", [])) if dep in DISTRIBUTIONS]
        for name, project in projects.items()
    }
    lists: dict[str, list[str]] = {}
    for name in DISTRIBUTIONS:
        closure: list[str] = []
        pending = list(local[name])
        while pending:
            dependency = pending.pop()
            if dependency not in closure:
                closure.append(dependency)
                pending += local[dependency]
        late = [dep for dep in closure if DISTRIBUTIONS.index(dep) > DISTRIBUTIONS.index(name)]
        if late:
            sys.exit(f"dev.py sync: {name} depends on {', '.join(late)}: list it after them in DISTRIBUTIONS")
        own = _with_extras(f"{{tox_root}}/packages/{name}", projects[name])
        for_tests = [f"{{tox_root}}/packages/{test}" for test, owner in TEST_PACKAGES.items() if owner == name]
        lists[name] = [f"{{tox_root}}/packages/{dep}" for dep in DISTRIBUTIONS if dep in closure] + [own] + for_tests
    return lists


def _test_directories(name: str) -> str:
    """The test directories a distribution's environment runs: its own, and those of its test packages."""
    owned = [test for test, owner in TEST_PACKAGES.items() if owner == name]
    return " ".join(f"{{tox_root}}/packages/{directory}/tests" for directory in [name, *owned])


def _generated_regions() -> dict[Path, dict[str, list[str]]]:
    """For each generated file, each region's lines (between `# dev.py sync: begin NAME` and `... end NAME`)."""
    shorts = [_short(name) for name in DISTRIBUTIONS]
    installs = _install_lists()
    every = every_distribution("{tox_root}/packages") + ["{tox_root}"]
    every += [f"{{tox_root}}/packages/{test}" for test in TEST_PACKAGES]
    versions = ",".join(version.replace(".", "") for version in PYTHONS)
    return {
        ROOT / "tox.ini": {
            "environments": [
                f"    py{{{versions}}}-{{{','.join(shorts)}}}",
                f"    py{{{versions}}}-{{integration,system}}",
            ],
            "dists": [f"{_short(name)} = {' '.join(install)}" for name, install in installs.items()]
            + [f"all = {' '.join(every)}"],
            "install": [f"    {short}: {{[testenv]install_local}} {{[dists]{short}}}" for short in shorts],
            "run": [
                f"    {_short(name)}: python -m pytest {_test_directories(name)} {{posargs}}"
                for name in DISTRIBUTIONS
            ],
        },
        ROOT / "pyproject.toml": {
            "dependencies": [f'    "{name}",' for name in DISTRIBUTIONS],
            "mypy_path": [f'    "packages/{name}/src",' for name in DISTRIBUTIONS],
        },
    }


def _replace_regions(text: str, regions: dict[str, list[str]], path: Path) -> str:
    for name, lines in regions.items():
        begin, end = rf"^[ \t]*# dev\.py sync: begin {name}\n", rf"^[ \t]*# dev\.py sync: end {name}$"
        body = "".join(f"{line}\n" for line in lines).replace("\\", "\\\\")
        text, count = re.subn(f"({begin}).*?({end})", rf"\g<1>{body}\g<2>", text, flags=re.M | re.S)
        if count != 1:
            sys.exit(f"dev.py sync: {path.name} needs exactly one region '# dev.py sync: begin/end {name}'")
    return text


def sync(args: list[str]) -> None:
    if args not in ([], ["--check"]):
        sys.exit("usage: dev.py sync [--check]")
    stale = []
    for path, regions in _generated_regions().items():
        text = path.read_text()
        updated = _replace_regions(text, regions, path)
        if updated == text:
            continue
        stale.append(path.name)
        if not args:
            path.write_text(updated)
            print(f"dev.py sync: updated {path.name}")
    if args and stale:
        sys.exit(f"dev.py sync --check: {' and '.join(stale)} do not match DISTRIBUTIONS: run python3 dev.py sync")
    if not stale:
        print("dev.py sync: tox.ini and pyproject.toml match DISTRIBUTIONS")


# A source file holds one idea; past this many lines it holds several (the lint environment runs `dev.py sizes`).
MAX_SOURCE_LINES = 600


def oversized_sources(packages: Path, limit: int = MAX_SOURCE_LINES) -> list[tuple[str, int]]:
    """The files under each distribution's ``src`` in ``packages`` longer than ``limit`` lines, with their lengths."""
    found = []
    for path in sorted(packages.glob("*/src/**/*")):
        if path.is_file() and path.suffix in (".py", ".pyi", ".js", ".capnp"):
            lines = len(path.read_text(errors="replace").splitlines())
            if lines > limit:
                found.append((str(path.relative_to(packages.parent)), lines))
    return found


def sizes(args: list[str]) -> None:
    if args:
        sys.exit("usage: dev.py sizes")
    found = oversized_sources(ROOT / "packages")
    if found:
        listed = "; ".join(f"{path} ({lines} lines)" for path, lines in found)
        sys.exit(f"dev.py sizes: over {MAX_SOURCE_LINES} lines, split each along its ideas: {listed}")
    print(f"dev.py sizes: every source file of packages/*/src is at most {MAX_SOURCE_LINES} lines")


COMMANDS = {"demo": demo, "test": test, "sync": sync, "sizes": sizes}


def main() -> None:
    if sys.version_info < (3, 10):  # noqa: UP036 - dev.py runs on whatever python3 the machine has
        sys.exit("dev.py needs Python 3.10 or newer")
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
