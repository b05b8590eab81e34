"""What `python3 dev.py test` does about the machine before it runs anything (dev.py's `plan_system`): the
Debian packages and root the selected tox environments need, installed as root or named at once otherwise."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Set

ROOT = Path(__file__).resolve().parent.parent


def _dev() -> Any:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("dev", module)  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


dev = _dev()
COMMAND = "python3 dev.py test"


def _present(there: Set[str]) -> Callable[[str], bool]:
    return lambda path: path in there


def _everything() -> Set[str]:
    files = {path for packages in dev.SYSTEM_PACKAGES.values() for paths in packages.values() for path in paths}
    return files | {dev.MUNGE_KEY}


def test_environments_that_need_nothing_from_the_machine_run_anywhere() -> None:
    plan = dev.plan_system(["py311-worker", "lint", "crossversion"], _present(set()), False, False, COMMAND)
    assert plan == dev.SystemPlan()


def test_as_root_with_apt_the_missing_packages_are_installed_and_munges_key_made() -> None:
    there = _everything() - {"chromedriver", "/usr/sbin/ip", dev.MUNGE_KEY}
    plan = dev.plan_system(dev.CI_ENVS, _present(there), True, True, COMMAND)
    assert plan == dev.SystemPlan(["chromium-driver", "iproute2"], make_munge_key=True)
    assert dev.plan_system(dev.CI_ENVS, _present(_everything()), True, True, COMMAND) == dev.SystemPlan()


def test_without_root_it_stops_naming_the_packages_root_and_the_commands() -> None:
    plan = dev.plan_system(dev.CI_ENVS, _present({"chromium", "chromedriver"}), False, True, COMMAND)
    assert plan.packages == [] and not plan.make_munge_key
    assert "py311-system needs the Debian packages slurm-wlm, munge, iproute2" in plan.problem
    assert "apt-get install -y slurm-wlm munge iproute2" in plan.problem
    assert "root, for Slurm's daemons" in plan.problem and f"`sudo {COMMAND}`" in plan.problem
    # everything installed, but not root: root is still needed (Slurm's daemons, network namespaces)
    plan = dev.plan_system(["py312-system"], _present(_everything()), False, True, COMMAND)
    assert "py312-system needs root" in plan.problem and "apt-get" not in plan.problem
    # the integration suite without them runs anywhere
    assert dev.plan_system(["py312-integration"], _present(set()), False, False, COMMAND) == dev.SystemPlan()


def test_as_root_without_apt_it_names_the_packages() -> None:
    plan = dev.plan_system(["py311-system"], _present(set()), True, False, COMMAND)
    assert "No apt-get here" in plan.problem and "chromium, chromium-driver, slurm-wlm, munge, iproute2" in plan.problem


def test_a_source_file_over_the_limit_is_named_with_its_length(tmp_path: Path) -> None:
    source = tmp_path / "packages" / "scaler-x" / "src" / "scaler" / "x"
    source.mkdir(parents=True)
    (source / "fits.py").write_text("x = 1\n" * dev.MAX_SOURCE_LINES)
    (source / "long.py").write_text("x = 1\n" * (dev.MAX_SOURCE_LINES + 1))
    tests = tmp_path / "packages" / "scaler-x" / "tests"
    tests.mkdir()
    (tests / "test_long.py").write_text("x = 1\n" * (dev.MAX_SOURCE_LINES + 1))  # tests are not sources
    assert dev.oversized_sources(tmp_path / "packages") == [
        ("packages/scaler-x/src/scaler/x/long.py", dev.MAX_SOURCE_LINES + 1)
    ]
