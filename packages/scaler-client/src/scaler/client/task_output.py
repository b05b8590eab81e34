"""What tasks print, shown in the client (``Client(stream_output=True)``): each line on the client's own
stdout or stderr, as the worker sent it, prefixed with its task (``[task 0a1b2c3d] ``)."""

from __future__ import annotations

import sys
from typing import Dict, List, Tuple

from scaler.protocol.ids import show
from scaler.protocol.messages import OutputStream, TaskOutput


class OutputPrinter:
    """Prints the `TaskOutput` the scheduler forwards; remembers which task's line is not finished yet."""

    def __init__(self) -> None:
        self._mid_line: Dict[Tuple[bytes, int], bool] = {}  # (task, stream) whose last text ended mid-line

    def print(self, outputs: List[TaskOutput]) -> None:
        for output in outputs:
            stream = sys.stderr if output.stream == OutputStream.STDERR else sys.stdout
            key = (output.task_id, output.stream)
            prefix = f"[task {show(output.task_id)}] "
            lines = output.text.splitlines(keepends=True)
            parts = []
            for index, line in enumerate(lines):
                if index or not self._mid_line.get(key):
                    parts.append(prefix)
                parts.append(line)
            if lines and not lines[-1].endswith(("\n", "\r")):
                self._mid_line[key] = True
            else:
                self._mid_line.pop(key, None)
            try:
                stream.write("".join(parts))
                stream.flush()
            except (OSError, ValueError):  # the user closed or replaced the stream: nothing to show it on
                pass
