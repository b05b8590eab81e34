"""Build the peers the cross-version tests run against, each in a virtualenv of its own (run by tox).

    python tests/crossversion/build_peers.py DIRECTORY

- ``DIRECTORY/previous``: the last release of releases.toml, built from ``git archive <commit>`` of this
  repository (no tag needed, no network but the package registry for its third-party dependencies);
- ``DIRECTORY/next-major``: the current sources, changed only to claim protocol version 2.0: a peer that
  the version rule (same major: compatible) must refuse.

Each gets scaler-protocol, -client, -scheduler, -storage and -worker, installed as wheels.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ["scaler-protocol", "scaler-client", "scaler-scheduler", "scaler-storage", "scaler-worker"]
VERSION_MODULE = "packages/scaler-protocol/src/scaler/protocol/version.py"


def previous_release() -> dict:
    with (ROOT / "releases.toml").open("rb") as file:
        return tomllib.load(file)["release"][-1]


def _archive(commit: str, target: Path) -> None:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "packages"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(target, filter="data")


def _install(sources: Path, environment: Path) -> None:
    if environment.exists():
        shutil.rmtree(environment)
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "hatchling"], check=True)
    packages = [str(sources / "packages" / name) for name in DISTRIBUTIONS]
    subprocess.run([*pip, "--no-build-isolation", *packages], check=True)


def main(directory: str) -> None:
    base = Path(directory)
    release = previous_release()
    sources = base / "sources-previous"
    shutil.rmtree(sources, ignore_errors=True)
    _archive(release["commit"], sources)
    _install(sources, base / "previous")
    print(f"build_peers: release {release['version']} (commit {release['commit'][:10]}) in {base / 'previous'}")

    sources = base / "sources-next-major"
    shutil.rmtree(sources, ignore_errors=True)
    shutil.copytree(ROOT / "packages", sources / "packages", ignore=shutil.ignore_patterns("tests", "__pycache__"))
    module = sources / VERSION_MODULE
    text, count = re.subn(r"PROTOCOL_VERSION = Version\(major=\d+, minor=\d+\)",
                          "PROTOCOL_VERSION = Version(major=2, minor=0)", module.read_text())  # fmt: skip
    if count != 1:
        sys.exit(f"build_peers: {VERSION_MODULE} no longer sets PROTOCOL_VERSION as Version(major=.., minor=..)")
    module.write_text(text)
    _install(sources, base / "next-major")
    print(f"build_peers: the current sources claiming protocol 2.0 in {base / 'next-major'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
