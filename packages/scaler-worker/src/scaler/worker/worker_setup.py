"""Code and set-up on a worker (docs/interfaces.md, "Coming from Dask"), the I/O of it: where the files that
clients upload go (`Client.upload_file`) and how the agent saves one, how it runs a `Client.run` function, the
recent log lines it keeps for `Client.get_worker_logs`, and what each processor does as it starts (the uploaded
files on its path, then the ``--preload``).

Uploaded files live in a directory of the worker's own (private, made as it starts, before its ID is told
anyone: nobody else can have made it first), removed when it exits; a processor puts the directory
and each uploaded archive (``.zip``, ``.whl``) at the *end* of its ``sys.path``, so an uploaded module never
shadows one installed on the host. Every processor of the worker, whichever client's task it runs, imports from
there. Keep this module's imports light: every processor start imports it.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import tempfile
import traceback
from typing import Deque, Dict, List, Optional, Tuple

UPLOADS_ENVIRONMENT_VARIABLE = "SCALER_UPLOADS_DIRECTORY"  # the processor's, set by the agent
PRELOAD_ENVIRONMENT_VARIABLE = "SCALER_PRELOAD"
UPLOAD_SUFFIXES = (".py", ".zip", ".whl")
ARCHIVE_SUFFIXES = (".zip", ".whl")
RUN_RESULT_BYTES = 1024 * 1024  # a Client.run function's pickled value: small answers (data goes through tasks)
ERROR_CHARACTERS = 64 * 1024  # of a failed run's traceback
LOG_LINES = 500  # the recent log lines a worker keeps, each cut to LOG_LINE_CHARACTERS
LOG_LINE_CHARACTERS = 1000
PRELOAD_FAILED_EXIT = 213  # a processor's exit code when its --preload failed (the agent then exits, refused)


def uploads_directory(worker_id: str) -> str:
    """The directory of the files uploaded to the worker ``worker_id`` (its ID as text)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in worker_id)
    return os.path.join(tempfile.gettempdir(), f"scaler-uploads-{safe}")


def processor_environment(uploads: str, preload: str) -> Dict[str, str]:
    """What a processor is told of its set-up, in its environment."""
    return {UPLOADS_ENVIRONMENT_VARIABLE: uploads, **({PRELOAD_ENVIRONMENT_VARIABLE: preload} if preload else {})}


def upload_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot be an uploaded file's name (None: it can)."""
    if not name or name != os.path.basename(name) or name.startswith("."):
        return f"{name!r} is not a file name (no directory, not hidden)"
    if not name.endswith(UPLOAD_SUFFIXES):
        return f"{name!r} is not a .py, .zip or .whl file"
    return None


def save_upload(directory: str, name: str, data: bytes) -> Optional[str]:
    """Save an uploaded file in ``directory`` (whole or not at all: a processor never reads half of it); the
    problem, if it could not be."""
    problem = upload_name_problem(name)
    if problem is not None:
        return problem
    try:
        partial = os.path.join(directory, f".{name}.{os.getpid()}.partial")
        with open(partial, "wb") as file:
            file.write(data)
        os.replace(partial, os.path.join(directory, name))
    except OSError as error:
        return f"cannot save {name!r} in {directory}: {error}"
    return None


def add_uploads_to_path(directory: str) -> None:
    """The uploaded files importable here: the directory (its ``.py`` files) and each archive in it, appended to
    ``sys.path`` (never ahead of what is installed)."""
    entries: List[str] = [directory]
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(ARCHIVE_SUFFIXES))
        entries += [os.path.join(directory, name) for name in names]
    except OSError:  # nothing uploaded yet
        pass
    for entry in entries:
        if entry not in sys.path:
            sys.path.append(entry)


def run_function(uploads: str, payload: bytes) -> Tuple[bool, bytes, str]:
    """A `Client.run` call in the agent: (success, the cloudpickled value or exception, the traceback)."""
    import cloudpickle

    add_uploads_to_path(uploads)
    try:
        function, args, kwargs = cloudpickle.loads(payload)
        value = cloudpickle.dumps(function(*args, **kwargs))
        if len(value) > RUN_RESULT_BYTES:
            raise ValueError(f"the result pickles to {len(value):,} bytes, more than run's {RUN_RESULT_BYTES:,}")
        return True, value, ""
    except BaseException as error:  # noqa: BLE001 - the caller's error, raised in the client
        text = traceback.format_exc()[-ERROR_CHARACTERS:]
        try:
            pickled = cloudpickle.dumps(error)
        except Exception:  # noqa: BLE001 - its text says it all
            pickled = b""
        return False, pickled, text


def preload_problem(preload: str) -> Optional[str]:
    """Why ``preload`` cannot be run here, as far as can be told without running it (None: it may be): a script
    that is not there, a module that is not installed."""
    if preload.endswith(".py") or os.sep in preload:
        return None if os.path.isfile(preload) else f"--preload {preload!r}: no such script"
    import importlib.util

    top = preload.split(".")[0]
    try:
        found = top.isidentifier() and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"--preload {preload!r}: no module {top!r} is installed here"


class RecentLogs(logging.Handler):
    """The worker process's last `LOG_LINES` log lines, as its log shows them, for `Client.get_worker_logs`."""

    def __init__(self) -> None:
        from scaler.protocol.command_line import LOG_DATE_FORMAT, LOG_FORMAT

        super().__init__()
        self.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATE_FORMAT))
        self.lines: Deque[Tuple[str, str]] = collections.deque(maxlen=LOG_LINES)  # (level, line), oldest first

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append((record.levelname, self.format(record)[:LOG_LINE_CHARACTERS]))
        except Exception:  # noqa: BLE001 - logging's own rule: a record that cannot be formatted is not fatal
            self.handleError(record)


def prepare_processor() -> None:
    """In a processor as it starts, before its first task: the uploaded files on its path, then its preload (a
    module imported by name, or a script run by path). A preload that fails prints its traceback and ends the
    processor with `PRELOAD_FAILED_EXIT`: the worker then exits, naming it, rather than run tasks without it."""
    uploads = os.environ.get(UPLOADS_ENVIRONMENT_VARIABLE)
    if uploads:
        add_uploads_to_path(uploads)
    preload = os.environ.get(PRELOAD_ENVIRONMENT_VARIABLE)
    if not preload:
        return
    try:
        if preload.endswith(".py") or os.sep in preload:
            import runpy

            runpy.run_path(preload, run_name="__scaler_preload__")
        else:
            import importlib

            importlib.import_module(preload)
    except BaseException:  # noqa: BLE001 - whatever it is, the worker must not run tasks without its preload
        print(f"Scaler processor: --preload {preload!r} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        os._exit(PRELOAD_FAILED_EXIT)
