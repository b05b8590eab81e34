"""Progress bars over groups of futures: `progress` and the ``progress=`` option of `Client.map`/`get`/`dask_get`.

A bar is tqdm's (``tqdm.auto``: a widget in a Jupyter notebook, text in a terminal) when tqdm is installed,
otherwise one line on stderr rewritten in place. The futures' done callbacks (run in the client's agent
thread) only count; a display thread of the bar redraws it a few times a second, so the agent never writes
to a terminal or a notebook.
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time
from typing import Any, Iterable, List, Optional, TypeVar, Union

from scaler.client.task_waits import wait_in_task

ProgressOption = Union[bool, str, None]
_CHOICES = (True, False, None, "tqdm", "text")
_REFRESH_SECONDS = {"tqdm": 0.1, "text": 0.5}

FutureT = TypeVar("FutureT", bound=concurrent.futures.Future)


def progress(
    futures: Iterable[FutureT], *, description: str = "tasks", timeout: Optional[float] = None, style: str = "auto"
) -> List[FutureT]:
    """Show a bar while ``futures`` run; return them (as a list) once every one has ended.

    ``scaler.progress([client.submit(f, x) for x in xs])``, like Dask's ``distributed.progress``. ``style``:
    ``"auto"`` (tqdm when installed, else text), ``"tqdm"`` or ``"text"`` (one line on stderr).
    ``timeout``: `TimeoutError` if some have not ended by then (they go on running).
    """
    futures = list(futures)
    bar = ProgressBar(True if style == "auto" else style, description)
    try:
        bar.watch(futures)
        timeout = wait_in_task(futures, len(futures), timeout)  # inside a task, they may run meanwhile
        _, not_done = concurrent.futures.wait(futures, timeout)
    finally:
        bar.close()
    if not_done:
        raise TimeoutError(f"{len(not_done)} of {len(futures)} futures had not ended after {timeout:g}s")
    return futures


def start_progress(option: ProgressOption, description: str) -> Optional[ProgressBar]:
    """The bar a ``progress=`` option asks for: None for False (the default)."""
    if option is None or option is False:
        return None
    return ProgressBar(option, description)


class ProgressBar:
    """Counts the ends of the futures it watches and shows ``ended/total`` until `close`."""

    def __init__(self, option: ProgressOption, description: str) -> None:
        if option not in _CHOICES or isinstance(option, int) and not isinstance(option, bool):
            raise ValueError(f"progress must be True, False, 'tqdm' or 'text'; got {option!r}")
        style = option
        if style is True:
            style = "tqdm" if _tqdm_class() is not None else "text"
        self._lock = threading.Lock()  # guards the counts (callbacks run in the agent thread and the caller's)
        self._ended = 0
        self._total = 0
        self._closed = threading.Event()
        if style == "tqdm":
            tqdm = _tqdm_class()
            if tqdm is None:
                raise ImportError("progress='tqdm' needs tqdm: pip install tqdm (or scaler-client[progress])")
            self._view: Any = _TqdmView(tqdm, description)
        else:
            self._view = _TextView(description)
        self._refresh = _REFRESH_SECONDS[str(style)]
        self._thread: Optional[threading.Thread] = None  # started by the first watch: no futures, no bar

    def watch(self, futures: Iterable[concurrent.futures.Future]) -> None:
        """Count these futures in the total, and each one's end once it ends."""
        futures = list(futures)
        with self._lock:
            self._total += len(futures)
        if self._thread is None:
            self._thread = threading.Thread(target=self._display, name="ScalerProgress", daemon=True)
            self._thread.start()
        for future in futures:
            future.add_done_callback(self._future_ended)

    def close(self) -> None:
        """Stop the display thread and draw the final counts (nothing, if it never watched a future)."""
        self._closed.set()
        if self._thread is None:
            return
        self._thread.join(5.0)
        with self._lock:
            ended, total = self._ended, self._total
        self._view.finish(ended, total)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _future_ended(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._ended += 1

    def _display(self) -> None:
        while not self._closed.wait(self._refresh):
            with self._lock:
                ended, total = self._ended, self._total
            self._view.show(ended, total)


class _TqdmView:
    def __init__(self, tqdm: Any, description: str) -> None:
        self._tqdm = tqdm
        self._description = description
        self._bar: Any = None  # made once the total is known: a bar of total 0 would be drawn first

    def show(self, ended: int, total: int) -> None:
        bar = self._bar
        if bar is None:
            if not total:
                return
            bar = self._bar = self._tqdm(total=total, desc=self._description, unit="task")
        if bar.total != total or bar.n != ended:
            bar.total = total
            bar.n = ended
            bar.refresh()

    def finish(self, ended: int, total: int) -> None:
        self.show(ended, total)
        if self._bar is not None:
            self._bar.close()


class _TextView:
    """``map: 1,234/10,000 tasks (12%) 3.1s``, rewritten in place on stderr; a newline when it finishes."""

    def __init__(self, description: str) -> None:
        self._description = description
        self._started = time.monotonic()
        self._shown: Optional[tuple] = None

    def show(self, ended: int, total: int) -> None:
        if self._shown == (ended, total):
            return
        self._shown = (ended, total)
        self._write(ended, total, "\r")

    def finish(self, ended: int, total: int) -> None:
        self._write(ended, total, "\r")
        self._write_raw("\n")

    def _write(self, ended: int, total: int, start: str) -> None:
        percent = f" ({100 * ended // total}%)" if total else ""
        elapsed = time.monotonic() - self._started
        self._write_raw(f"{start}{self._description}: {ended:,}/{total:,} tasks{percent} {elapsed:.1f}s")

    @staticmethod
    def _write_raw(text: str) -> None:
        stream = sys.stderr
        if stream is None:  # pythonw: no console
            return
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # closed or broken: a bar must never fail the work it shows
            pass


def _tqdm_class() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm
