"""Hosts made of Linux network namespaces, for tests of a real network: a host that vanishes, a partition.

On loopback a process that dies closes its connections at once; on a network a host can vanish without a FIN
or a RST (power lost, a cable pulled, a firewall that drops). `Network` makes hosts that behave so: each
`Host` is a network namespace with its own address in `SUBNET` (a range of this project's own, used nowhere
but in the namespaces these tests make), joined to the others by a veth pair whose far end is a port of a
bridge in a namespace of its own (the switch). `Host.cut` sets the host's switch port down, as a pulled cable:
the host's packets, and the packets sent to it, are dropped without a word; `Host.restore` plugs it in again.
`Host.command` is a command line that runs a program on the host (``ip netns exec``); `Processes.start`
takes it as ``prefix`` and stops what it started as usual.

Traffic stays inside the namespaces: none has a route beyond `SUBNET`, and the test's own namespace takes no
part (programs on the hosts are observed through their output and log files). Making namespaces needs root
and iproute2's ``ip``: without them `Network` raises naming what is missing (never a silent skip). Every
namespace is named `PREFIX` + the test process's pid; `Network.close` removes them (the `network` fixture of
`conftest.py` does, whatever happens), and a new `Network` first removes those of test processes that are gone
(a run killed before it could), with any process still running in them.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import subprocess
from typing import Dict, List

PREFIX = "scaler-net-"  # + pid + "-" + host name
SUBNET = ipaddress.ip_network("198.18.27.0/24")  # RFC 2544's range for test networks: no real host is there
_SWITCH = "switch"
_IP_SECONDS = 10  # every ip command is bounded


def _ip(*arguments: str) -> str:
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=_IP_SECONDS)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(arguments)} failed: {result.stderr.strip()}")
    return result.stdout


def _ip_netns_tc(namespace: str, *arguments: str) -> None:
    _ip("netns", "exec", namespace, "tc", *arguments)


def missing_requirements() -> List[str]:
    """What making hosts needs that this machine lacks: root, iproute2."""
    missing = []
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        missing.append("root (network namespaces)")
    if shutil.which("ip") is None:
        missing.append("iproute2's ip (apt-get install iproute2; dev.py test installs it)")
    return missing


class Host:
    """One network namespace with one address on the network; ``port`` is its switch port."""

    def __init__(self, network: Network, name: str, address: str, port: str) -> None:
        self._network = network
        self.name = name
        self.namespace = f"{network.prefix}{name}"
        self.address = address
        self.port = port

    @property
    def command(self) -> List[str]:
        """The prefix that runs a command on this host."""
        return ["ip", "netns", "exec", self.namespace]

    def tcp(self, port: int) -> str:
        return f"tcp://{self.address}:{port}"

    def cut(self) -> None:
        """Pull the cable: nothing reaches the host or leaves it, and nobody is told (no FIN, no RST)."""
        _ip("-n", self._network.switch, "link", "set", self.port, "down")

    def restore(self) -> None:
        _ip("-n", self._network.switch, "link", "set", self.port, "up")

    def limit(self, rate: str) -> None:
        """What the host sends goes at most at ``rate`` (tc's units, e.g. "1gbit"), as on a real link."""
        _ip_netns_tc(self.namespace, "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "1mb",
                     "latency", "100ms")  # fmt: skip


class Network:
    """Hosts on one switch. Use as a context manager, or call `close`."""

    def __init__(self) -> None:
        missing = missing_requirements()
        if missing:
            raise RuntimeError(f"the network tests make hosts of network namespaces; they need {', '.join(missing)}")
        remove_leftovers()
        self.prefix = f"{PREFIX}{os.getpid()}-"
        self.switch = f"{self.prefix}{_SWITCH}"
        self.hosts: Dict[str, Host] = {}
        self._addresses = SUBNET.hosts()
        self._namespaces: List[str] = []
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "bridge", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "bridge", "up")

    def host(self, name: str) -> Host:
        """A new host, plugged into the switch."""
        if name in self.hosts or name == _SWITCH:
            raise ValueError(f"host {name} exists already")
        address = str(next(self._addresses))
        port = f"port{len(self.hosts)}"
        host = Host(self, name, address, port)
        self._add_namespace(host.namespace)
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("-n", self.switch, "link", "set", port, "master", "bridge", "up")
        _ip("-n", host.namespace, "address", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._namespaces.append(namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    def close(self) -> None:
        """Remove every namespace made here, ending what still runs in them (the tests stop their own first)."""
        for namespace in reversed(self._namespaces):
            _remove_namespace(namespace)
        self._namespaces = []

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _remove_namespace(namespace: str) -> None:
    pids = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=_IP_SECONDS
    ).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, timeout=_IP_SECONDS)


def remove_leftovers() -> None:
    """Remove the namespaces of test processes that are gone (a run killed before its clean-up)."""
    for line in _ip("netns", "list").splitlines():
        namespace = line.split()[0] if line.strip() else ""
        if not namespace.startswith(PREFIX):
            continue
        owner = namespace[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            _remove_namespace(namespace)
