"""Code and set-up on the workers, by Dask's names (docs/interfaces.md, "Coming from Dask"): `upload_file`,
`run`, `restart` and `get_worker_logs`. Each is one `WorkerCall` (protocol 1.8) that the scheduler sends to every
worker it serves, and answers once each of them answered or left; `Client` has them from `DaskCalls`.

Who sees what: an uploaded file is saved on every worker, and every processor there imports from it, whichever
client's task it runs (as with Dask); it is placed after what is installed, so it never shadows an installed
module. The scheduler keeps it for the workers that join later while its client stays connected; the workers
keep it until they exit.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle

from scaler.client.client_events import AskWorkers
from scaler.client.remote_errors import RemoteTraceback
from scaler.client.shared_connection import ClientView
from scaler.protocol.ids import show
from scaler.protocol.messages import WorkerCall, WorkerCallAnswer, WorkerCallKind, WorkerCallResult
from scaler.protocol.version import WORKER_CALLS_VERSION, require_scheduler

MAX_CALL_BYTES = 16 * 1024 * 1024  # an uploaded file, or a run's pickled function and arguments
UPLOAD_SUFFIXES = (".py", ".zip", ".whl")
_ANSWER_MARGIN_SECONDS = 5.0  # beyond the client's timeout: the scheduler waits for the slowest worker first
_ON_ERROR = ("raise", "return", "ignore")


class WorkerCallsOnClient:
    _agent: Any
    _timeout: float
    clear: Callable[[], None]

    def upload_file(self, filename: str, load: bool = True) -> None:
        """Send a ``.py`` module, or a ``.zip`` or ``.whl`` of packages, to every worker: their processors import
        it, also those of workers that join later (while this client stays connected) and processors started
        later. Uploading a file of the same name again replaces it; each worker then starts a fresh processor once
        no task runs there, so the tasks that start after this call returns import the new version. At most
        16 MiB. ``load`` is Dask's and changes nothing: the workers import the module when a task does (an
        error in it is that task's)."""
        name = os.path.basename(filename)
        if not name.endswith(UPLOAD_SUFFIXES):
            raise ValueError(f"upload_file takes a .py, .zip or .whl file, not {filename!r}")
        if not os.path.isfile(filename):
            raise FileNotFoundError(f"upload_file: no file {filename!r}")
        if os.path.getsize(filename) > MAX_CALL_BYTES:
            size = os.path.getsize(filename)
            raise ValueError(f"upload_file: {filename!r} is {size:,} bytes, more than the limit of {MAX_CALL_BYTES:,}")
        with open(filename, "rb") as file:
            data = file.read()
        _raise_first(self._call_workers(WorkerCall(0, WorkerCallKind.UPLOAD, b"", name, data), "upload_file"))

    def run(self, function: Callable[..., Any], *args: Any, on_error: str = "raise", **kwargs: Any) -> Dict[str, Any]:
        """Call ``function(*args, **kwargs)`` once on every worker, in its agent process (not in a processor,
        whose state a restart or a memory kill ends; for that, ``--preload``), on a thread of its own: a dict of
        the results by worker ID, the keys of ``scheduler_info()["workers"]``. ``on_error``: ``"raise"`` a failing
        worker's exception (the first, with its traceback as ``__cause__``), ``"return"`` it in place of the
        result, ``"ignore"`` leave that worker out (a value over 1 MiB pickled is such a failure: data goes through
        tasks). `TimeoutError` if the workers do not all answer within the client's ``timeout_seconds``."""
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(_ON_ERROR)}, not {on_error!r}")
        payload = cloudpickle.dumps((function, args, kwargs))
        if len(payload) > MAX_CALL_BYTES:
            raise ValueError(f"run: the function and its arguments pickle to {len(payload):,} bytes, more than "
                             f"{MAX_CALL_BYTES:,}: pass large data through scatter")  # fmt: skip
        results = self._call_workers(WorkerCall(0, WorkerCallKind.RUN, b"", "", payload), "run")
        if on_error == "raise":
            _raise_first(results)
        answers: Dict[str, Any] = {}
        for result in results:
            if result.success:
                answers[show(result.worker_id)] = cloudpickle.loads(result.payload)
            elif on_error == "return":
                answers[show(result.worker_id)] = _exception(result)
        return answers

    def get_worker_logs(self, n: Optional[int] = None) -> Dict[str, List[Tuple[str, str]]]:
        """Each worker's recent log lines (its last ``n``, of the 500 it keeps), oldest first, as ``(level, line)``,
        by worker ID, as Dask's; the lines of its agent process as its log shows them (at its
        ``--logging-level``)."""
        if n is not None and n < 0:
            raise ValueError(f"n must not be negative, not {n}")
        results = self._call_workers(WorkerCall(0, WorkerCallKind.LOGS), "get_worker_logs")
        _raise_first(results)
        logs = {show(result.worker_id): cloudpickle.loads(result.payload) for result in results}
        return {worker: (lines if n is None else lines[max(0, len(lines) - n) :]) for worker, lines in logs.items()}

    def restart(self) -> None:
        """Fresh processors on every worker, as Dask's ``restart``: first every task of this client is cancelled
        and its objects deleted (its futures end cancelled, as `clear` does), then every worker replaces its
        processor at once; a task of another client that ran there runs again (the scheduler counts it a death
        of its processor, up to ``--max-task-deaths``); queued tasks wait for the fresh processors. The client
        stays connected, and the uploaded files stay."""
        self.clear()
        _raise_first(self._call_workers(WorkerCall(0, WorkerCallKind.RESTART, b"", "", b""), "restart"))

    def _call_workers(self, call: WorkerCall, what: str) -> List[WorkerCallResult]:
        if isinstance(self._agent, ClientView):
            raise RuntimeError(f"{what} is called by a Client outside a task, not by one inside a task")
        require_scheduler(self._agent.scheduler_version, WORKER_CALLS_VERSION, what)
        reply = self._agent.ask(AskWorkers, call)
        try:
            answer: WorkerCallAnswer = reply.result(timeout=self._timeout + _ANSWER_MARGIN_SECONDS)
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError on 3.10
            raise TimeoutError(f"{what}: the workers did not all answer within {self._timeout:g}s") from None
        return sorted(answer.results, key=lambda result: result.worker_id)


def _raise_first(results: List[WorkerCallResult]) -> None:
    for result in results:
        if not result.success:
            raise _exception(result)


def _exception(result: WorkerCallResult) -> BaseException:
    """A worker's failure as the exception it raised (its traceback as ``__cause__``), else a `RuntimeError`
    that names the worker and says what went wrong."""
    where = f"on worker {show(result.worker_id)}" if result.worker_id else "at the scheduler"
    if result.payload:
        try:
            error = cloudpickle.loads(result.payload)
        except Exception:  # noqa: BLE001 - its class is not importable here: said in words below
            pass
        else:
            if isinstance(error, BaseException):
                error.__cause__ = RemoteTraceback(f"{where}:\n{result.error}")
                return error
    return RuntimeError(f"{where}: {result.error or 'failed'}")
