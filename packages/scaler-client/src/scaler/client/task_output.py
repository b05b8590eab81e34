"""What tasks print, shown in the client (``Client(stream_output=True)``): each line on the client's own
stdout or stderr, as the worker sent it, prefixed with its task (``[task 0a1b2c3d] ``).

A task's text never drives the terminal: every control character but newline and tab (the other C0 controls,
DEL, the C1 controls; so ESC and every sequence it starts: colours, cursor moves, OSC window titles and
hyperlinks, and carriage returns that overwrite a line) is shown escaped, as ``\\x1b``."""

from __future__ import annotations

import re
import sys
from typing import Dict, List, Tuple

from scaler.protocol.ids import show
from scaler.protocol.messages import OutputStream, TaskOutput

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINES = re.compile("[^\n]*\n|[^\n]+")


def shown(text: str) -> str:
    """``text`` with its control characters (but newline and tab) written as ``\\xNN``: readable, inert."""
    return _CONTROLS.sub(lambda control: f"\\x{ord(control.group()):02x}", text)


class OutputPrinter:
    """Prints the `TaskOutput` the scheduler forwards; remembers which task's line is not finished yet."""

    def __init__(self) -> None:
        self._mid_line: Dict[Tuple[bytes, int], bool] = {}  # (task, stream) whose last text ended mid-line

    def print(self, outputs: List[TaskOutput]) -> None:
        for output in outputs:
            stream = sys.stderr if output.stream == OutputStream.STDERR else sys.stdout
            key = (output.task_id, output.stream)
            prefix = f"[task {show(output.task_id)}] "
            lines = _LINES.findall(shown(output.text))
            parts = []
            for index, line in enumerate(lines):
                if index or not self._mid_line.get(key):
                    parts.append(prefix)
                parts.append(line)
            if lines and not lines[-1].endswith("\n"):
                self._mid_line[key] = True
            else:
                self._mid_line.pop(key, None)
            try:
                stream.write("".join(parts))
                stream.flush()
            except (OSError, ValueError):  # the user closed or replaced the stream: nothing to show it on
                pass
