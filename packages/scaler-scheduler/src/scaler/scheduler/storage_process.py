"""The object storage server the scheduler starts when none answers at the default address (port + 1)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from typing import Sequence

from scaler.protocol.errors import ScalerError
from scaler.protocol.process_control import start_child
from scaler.protocol.security import NO_SECURITY, SecurityConfig


class StorageStartError(ScalerError):
    """No object storage server can be started here."""


def start_object_storage_process(
    address: str, security: SecurityConfig = NO_SECURITY, arguments: Sequence[str] = ()
) -> subprocess.Popen:
    """``python -m scaler.storage ADDRESS``, with the options of ``security`` and ``arguments`` (the storage
    server's own options: sizes, spilling, logging), which dies with this process
    (scaler-storage is not a dependency of the scheduler: it is needed only to start a storage server here)."""
    if importlib.util.find_spec("scaler.storage") is None:
        raise StorageStartError(
            f"no object storage server answers at {address} and scaler-storage is not installed to start one: "
            "pip install scaler-storage, or start scaler_object_storage_server and pass --object-storage-address"
        )
    command = [sys.executable, "-m", "scaler.storage", address, *security.to_arguments(), *arguments]
    return start_child(command, stdin=subprocess.DEVNULL)
