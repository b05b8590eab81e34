"""What a task prints, captured in its processor and sent to the agent in batches (``Client(stream_output=True)``).

While a task that asked for it runs, ``sys.stdout`` and ``sys.stderr`` are writers of an `OutputCapture`: what
it prints is appended to a list of `TaskOutputText` (text written in a row to the same stream of the same task
is joined), which a thread of the processor sends every `FLUSH_SECONDS`, sooner when it holds `FLUSH_BYTES`,
and the processor once more when the task ends, before its result. (Text printed by a thread of the task
after it ended reaches the agent, which drops it.) Output written below Python (by C code or a subprocess, to
the file descriptors 1 and 2) is not captured: it goes to the worker's own output.

Nothing of this exists in a processor until a task asks for it: no thread, no writer.
"""

from __future__ import annotations

import io
import threading
from typing import Any, Callable, List, Optional, Tuple

from scaler.protocol.messages import OutputStream
from scaler.worker.processor_protocol import TaskOutputText

FLUSH_SECONDS = 0.1
FLUSH_BYTES = 64 * 1024


class OutputCapture:
    def __init__(self, send: Callable[[Any], None]) -> None:
        self._send = send  # the Pipe's send: any thread may call it
        self._lock = threading.Lock()  # guards _pending and _size
        self._pending: List[TaskOutputText] = []
        self._size = 0
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def streams(self, task_id: bytes) -> Tuple[_Writer, _Writer]:
        """The ``sys.stdout`` and ``sys.stderr`` of the task ``task_id``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._send_periodically, name="task-output", daemon=True)
            self._thread.start()
        return _Writer(self, task_id, OutputStream.STDOUT), _Writer(self, task_id, OutputStream.STDERR)

    def write(self, task_id: bytes, stream: int, text: str) -> None:
        with self._lock:
            pending = self._pending
            last = pending[-1] if pending else None
            if last is not None and last.task_id == task_id and last.stream == stream:
                pending[-1] = last._replace(text=last.text + text)
            else:
                pending.append(TaskOutputText(task_id, stream, text))
            self._size += len(text)
            full = self._size >= FLUSH_BYTES
        if full:
            self._wake.set()

    def flush(self) -> None:
        """Send what was printed and not sent yet (raises OSError when the agent is gone)."""
        with self._lock:
            pending, self._pending, self._size = self._pending, [], 0
        if pending:
            self._send(pending)

    def _send_periodically(self) -> None:
        while True:
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            try:
                self.flush()
            except (OSError, ValueError):  # the agent is gone: the processor ends with it
                return


class _Writer(io.TextIOBase):
    """A task's ``sys.stdout`` or ``sys.stderr``: text written goes to its `OutputCapture`."""

    def __init__(self, capture: OutputCapture, task_id: bytes, stream: int) -> None:
        super().__init__()
        self._capture = capture
        self._task_id = task_id
        self._stream = stream

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self._capture.write(self._task_id, self._stream, text)
        return len(text)
