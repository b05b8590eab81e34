"""Check the `soamapi-stubs` distribution against this fake's soamapi: ``python -m soamapi_fake.stubtest``.

Runs mypy's stubtest (mypy and the stubs must be installed) with the fake importable as ``soamapi``: every name
the stubs promise must exist here with a compatible signature, and the other way round, so the stubs and the
fake the tests run against stay one API. The lint tox environment runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from soamapi_fake import shim_path


def main() -> int:
    path = os.pathsep.join(filter(None, [shim_path(), os.environ.get("PYTHONPATH")]))
    allowlist = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stubtest_allowlist.txt")
    command = [sys.executable, "-m", "mypy.stubtest", "soamapi", "soamapiversion", "--allowlist", allowlist]
    command += sys.argv[1:]
    return subprocess.call(command, env={**os.environ, "PYTHONPATH": path})


if __name__ == "__main__":
    sys.exit(main())
