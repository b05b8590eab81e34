"""What `import scaler` gives, and what it must never pull in (the client installs and runs alone)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import scaler
import scaler.client
import scaler.protocol.errors

FORBIDDEN_AT_IMPORT = ["scaler.scheduler", "scaler.worker", "scaler.storage", "scaler.cluster", "psutil", "uvloop"]
POSIX_ONLY_MODULES = {"fcntl", "resource", "termios", "pwd", "grp", "posix", "pty", "tty"}


def test_public_names():
    from scaler import (  # noqa: F401
        Client,
        DisconnectedError,
        ObjectNotFoundError,
        ObjectReference,
        ObjectStorageRefusedError,
        ProtocolError,
        RemoteTaskError,
        ScalerFuture,
        Serializer,
        TaskCancelledError,
        TaskRejectedError,
        WorkerDiedError,
    )
    from scaler.client._version import __version__

    assert scaler.__version__ == __version__ == "0.2.0"
    assert set(scaler.__all__) == set(scaler._MODULE_OF)
    # every name but the combo, which needs the other components (the client alone says what to install: below)
    assert all(getattr(scaler, name) for name in scaler.__all__ if name != "SchedulerClusterCombo")
    assert scaler.Client is scaler.client.Client
    assert scaler.DisconnectedError is scaler.protocol.errors.DisconnectedError


def test_other_distributions_join_the_scaler_package():
    assert any(pathlib.Path(entry) == pathlib.Path(scaler.protocol.__file__).parent.parent for entry in scaler.__path__)


def test_scheduler_cluster_combo_says_what_to_install_when_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "scaler.cluster.combo", None)  # as if scaler-worker were not installed
    with pytest.raises(ImportError, match=r"pip install scaler \(or scaler-scheduler scaler-worker scaler-storage\)"):
        from scaler import SchedulerClusterCombo  # noqa: F401


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        scaler.NoSuchThing  # noqa: B018


def test_importing_the_client_imports_no_other_component():
    code = (
        "import sys, scaler, scaler.client\n"
        "from scaler import Client\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in ('psutil', 'uvloop') "
        f"or any(m == f or m.startswith(f + '.') for f in {FORBIDDEN_AT_IMPORT!r})]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_client_sources_use_no_posix_only_module():
    client_sources = pathlib.Path(scaler.client.__file__).parent.glob("*.py")
    compat_sources = (pathlib.Path(scaler.__file__).parent / "compat").glob("**/*.py")
    for source in [*client_sources, *compat_sources, pathlib.Path(scaler.__file__)]:
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {name.split(".")[0] for name in names} & POSIX_ONLY_MODULES, f"{source.name} imports {names}"


def test_a_serializer_of_the_user_refers_to_its_base_by_the_public_name():
    """The serializers live in scaler.protocol, but a pickled one names its base as users import it, which every
    release has: a serializer a client pickles loads on a worker of another version."""
    import pickletools

    import cloudpickle

    from scaler.client.serializer import DefaultSerializer, Serializer

    class Upper(Serializer):  # defined here, so pickled by value: its base by reference
        def serialize(self, obj):
            return str(obj).upper().encode()

        def deserialize(self, payload):
            return payload.decode()

    for pickled in (cloudpickle.dumps(Upper()), cloudpickle.dumps(DefaultSerializer())):
        names = [argument for opcode, argument, _ in pickletools.genops(pickled) if opcode.name.endswith("UNICODE")]
        assert "scaler.client.serializer" in names and "scaler.protocol.serializer" not in names
        assert type(cloudpickle.loads(pickled)).__mro__[-3] is Serializer  # (then ABC, object)
