"""``scaler_up CLUSTER.toml``: a whole cluster on this host from one TOML file, as one supervised tree.

The file holds the sections the programs read with ``--config`` (README, "Running a cluster from the shell"):
``[scheduler]`` (required: its ``address``), and any of ``[object_storage_server]``, ``[ui]``, ``[cluster]``,
``[native_worker_manager]``, ``[slurm_worker_manager]``, with ``[security]`` for all of them. Each section present
is one program, started as ``python -m ... --config CLUSTER.toml``, so it reads its own section as it would
alone; the addresses a section leaves out follow the scheduler's (the storage server at its port + 1, the web
monitor subscribing at its port + 2, the workers and managers connecting to it), and the scheduler is told the
web monitor's page (``--dashboard-link``), which its clients read (``Client.dashboard_link``).

`plan` decides what to start (pure: tested without processes); `main` starts it in order (storage, scheduler,
web monitor, then workers and managers), each once the one before listens, prints where each serves, and
supervises: SIGTERM or SIGINT (Ctrl-C) stops every program, the last started first. A program that exits on its
own is reported with its exit code and stops the tree (exit status 1): the daemons do not stop on a peer's
error, so one that exits is broken (an address taken, a configuration refused) and a tree without it would
serve half a cluster; the workers themselves are restarted by ``scaler_cluster``, as everywhere.
"""

from __future__ import annotations

import argparse
import importlib.util
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from scaler.cluster.cluster import exit_cause
from scaler.cluster.starting import (
    START_TIMEOUT_SECONDS,
    ClusterStartError,
    dashboard_link,
    dashboard_place,
    start_program,
    stop_all,
)
from scaler.protocol.addresses import address_in_use, default_monitor_address, default_storage_address
from scaler.protocol.command_line import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

PROGRAM = "scaler_up"
STOP_TIMEOUT_SECONDS = 15.0
_POLL_SECONDS = 0.1  # while waiting for a program to listen
_DEFAULT_UI_PORT = 8081  # scaler_ui's


@dataclass
class Component:
    """One program of the tree: what it is, how to start it, and the address it listens at (None: none)."""

    name: str
    arguments: List[str]  # of ``python -m``
    listens: Optional[str] = None  # tcp://HOST:PORT or ipc://PATH: it serves once a process listens there
    shows: str = ""  # what to print once it serves
    process: Optional[subprocess.Popen] = field(default=None, repr=False)


def plan(document: Dict[str, Any], path: str) -> List[Component]:
    """The programs of ``document`` (the TOML file at ``path``), in the order they start."""
    unknown = sorted(set(document) - set(_SECTIONS) - {"security"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(f'[{name}]' for name in unknown)}: "
                          f"{PROGRAM} starts {', '.join(f'[{name}]' for name in _SECTIONS)}")  # fmt: skip
    scheduler = _section(document, "scheduler", path)
    if scheduler is None or not scheduler.get("address"):
        raise ConfigError(f"{path}: [scheduler] with its address is required")
    address = str(scheduler["address"])
    config = ["--config", path]
    components: List[Component] = []
    storage = _section(document, "object_storage_server", path)
    storage_address = str(scheduler.get("object-storage-address") or default_storage_address(address))
    scheduler_options: List[str] = []
    if storage is not None:
        storage_address = str(storage.get("address") or storage_address)
        components.append(Component("object storage server", ["scaler.storage", *config, storage_address],
                                    storage_address, f"object storage server at {storage_address}"))  # fmt: skip
        if not scheduler.get("object-storage-address"):
            scheduler_options += ["--object-storage-address", storage_address]
    monitor = str(scheduler.get("monitor-address") or default_monitor_address(address))
    ui = _section(document, "ui", path)
    link = ""
    if ui is not None:
        host, port = dashboard_place(f"{ui.get('host', '127.0.0.1')}:{ui.get('port', _DEFAULT_UI_PORT)}")
        link = dashboard_link(host, port)
        if not scheduler.get("dashboard-link"):
            scheduler_options += ["--dashboard-link", link]
    shows = f"scheduler at {address} (monitor {monitor}, object storage {storage_address})"
    components.append(
        Component("scheduler", ["scaler.scheduler.cli", *config, address, *scheduler_options], address, shows)
    )
    if ui is not None:
        ui_arguments = ["scaler.monitor.ui", *config, str(ui.get("address") or monitor), "--port", str(port)]
        components.append(Component("web monitor", ui_arguments, f"tcp://{host}:{port}", f"dashboard at {link}"))
    for section, what, module in _WORKERS:
        options = _section(document, section, path)
        if options is not None:
            arguments = [*module, *config, str(options.get("address") or address)]
            components.append(Component(what, arguments, None, f"{what} of {options.get('address') or address}"))
    return components


_DISTRIBUTIONS = {"scaler.storage": "scaler-storage", "scaler.scheduler": "scaler-scheduler",
                  "scaler.monitor": "scaler-monitor", "scaler.cluster": "scaler-worker",
                  "scaler.worker_manager": "scaler-worker"}  # fmt: skip
_SECTIONS = ("object_storage_server", "scheduler", "ui", "cluster", "native_worker_manager", "slurm_worker_manager")
_WORKERS = (
    ("cluster", "workers (scaler_cluster)", ["scaler.cluster.cluster_main"]),
    ("native_worker_manager", "native worker manager", ["scaler.worker_manager.manager_cli", "native"]),
    ("slurm_worker_manager", "Slurm worker manager", ["scaler.worker_manager.manager_cli", "slurm"]),
)


def _section(document: Dict[str, Any], name: str, path: str) -> Optional[Dict[str, Any]]:
    content = document.get(name)
    if content is not None and not isinstance(content, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    return content


# ----------------------------------------------------------------------------------------------------- the shell


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Start a whole Scaler cluster on this host from one TOML file (the sections of the programs' "
        "--config: [scheduler], [object_storage_server], [ui], [cluster], [native_worker_manager], "
        "[slurm_worker_manager], [security]) and keep it as one tree: SIGTERM or Ctrl-C stops it all, and a program "
        "that exits stops the rest.",
    )
    parser.add_argument("config", metavar="CLUSTER.toml", help="the cluster's configuration file")
    args = parser.parse_args(argv)
    try:
        with open(args.config, "rb") as file:
            components = plan(tomllib.load(file), args.config)
    except OSError as error:
        parser.error(f"cannot read {args.config}: {error.strerror}")
    except tomllib.TOMLDecodeError as error:
        parser.error(f"{args.config} is not valid TOML: {error}")
    except (ConfigError, ValueError) as error:
        parser.error(str(error))
    return Tree(components).run()


class Tree:
    def __init__(self, components: List[Component]) -> None:
        self._components = components
        self._stop_signal: Optional[int] = None
        self._selector = selectors.DefaultSelector()
        self._wakeup = socket.socketpair()

    def run(self) -> int:
        self._install_signal_handlers()
        try:
            for component in self._components:
                if self._stop_signal is not None:
                    return 0
                self._start(component)
            _say("running; SIGTERM or Ctrl-C stops every program")
            return self._supervise()
        except ClusterStartError as error:
            print(f"{PROGRAM}: error: {error}", file=sys.stderr, flush=True)
            return 1
        finally:
            stop_all([c.process for c in self._components if c.process is not None], STOP_TIMEOUT_SECONDS)
            self._remove_signal_handlers()
            if self._stop_signal is not None:
                _say(f"received {signal.Signals(self._stop_signal).name}: stopped every program")

    def _start(self, component: Component) -> None:
        package = ".".join(component.arguments[0].split(".")[:2])  # scaler.scheduler, ...
        if importlib.util.find_spec(package) is None:
            distribution = _DISTRIBUTIONS[package]
            raise ClusterStartError(f"the {component.name} needs {distribution}: pip install {distribution}")
        if component.listens is not None and address_in_use(component.listens):
            raise ClusterStartError(f"cannot start the {component.name} at {component.listens}: the address is in use")
        component.process = process = start_program(*component.arguments)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while component.listens is not None and not address_in_use(component.listens):
            if process.poll() is not None:
                raise ClusterStartError(f"the {component.name} exited with code {process.returncode} while starting")
            if time.monotonic() > deadline or self._wait(_POLL_SECONDS):
                if self._stop_signal is not None:
                    return
                raise ClusterStartError(f"the {component.name} did not listen at {component.listens} in time")
        _say(f"{component.shows} (pid {process.pid})")

    def _supervise(self) -> int:
        while self._stop_signal is None:
            for component in self._components:
                process = component.process
                if process is not None and process.poll() is not None:
                    print(f"{PROGRAM}: the {component.name} (pid {process.pid}) {exit_cause(process.returncode)}; "
                          "stopping the others", file=sys.stderr, flush=True)  # fmt: skip
                    return 1
            self._wait(None)
        return 0

    # ------------------------------------------------------------------------------------------ signals

    def _install_signal_handlers(self) -> None:
        reader, writer = self._wakeup
        reader.setblocking(False)
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, lambda sig, frame: None)  # a handler (not SIG_IGN): a child's end wakes us
        self._selector.register(reader, selectors.EVENT_READ)

    def _remove_signal_handlers(self) -> None:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        self._selector.close()
        for sock in self._wakeup:
            sock.close()

    def _on_stop_signal(self, sig: int, frame: Any) -> None:
        if self._stop_signal is None:
            self._stop_signal = sig

    def _wait(self, timeout: Optional[float]) -> bool:
        """Until a signal comes (True: a stop signal came) or ``timeout`` passes."""
        if self._selector.select(timeout):
            try:
                while self._wakeup[0].recv(4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
        return self._stop_signal is not None


def _say(line: str) -> None:
    print(f"{PROGRAM}: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
