"""The terminal ``scaler_top`` draws on: keys read one at a time without Enter, whole screens drawn in place.

POSIX terminals (also over SSH) through termios; Windows consoles through msvcrt. Drawing uses the VT escape
sequences every current terminal understands, on the alternate screen, which is left as it was on exit.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, List, Optional, Tuple

_ALTERNATE_SCREEN_ON, _ALTERNATE_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"
_CURSOR_OFF, _CURSOR_ON = "\x1b[?25l", "\x1b[?25h"
_HOME, _CLEAR_LINE_END, _CLEAR_SCREEN_END = "\x1b[H", "\x1b[K", "\x1b[J"


class Terminal:
    """Standard input in single-key mode and standard output as one screen, for the ``with`` block."""

    def __init__(self) -> None:
        self._input = sys.stdin
        self._output = sys.stdout
        self._saved: Optional[List[Any]] = None
        self._size = self._read_size()

    def __enter__(self) -> Terminal:
        if os.name == "posix":
            import termios
            import tty

            descriptor = self._input.fileno()
            self._saved = termios.tcgetattr(descriptor)
            tty.setcbreak(descriptor)  # keys arrive at once, unechoed; Ctrl-C still interrupts
        else:
            os.system("")  # noqa: S605, S607 - makes a Windows console interpret VT sequences
        self._output.write(_ALTERNATE_SCREEN_ON + _CURSOR_OFF)
        self._output.flush()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._output.write(_CURSOR_ON + _ALTERNATE_SCREEN_OFF)
        self._output.flush()
        if self._saved is not None:
            import termios

            termios.tcsetattr(self._input.fileno(), termios.TCSADRAIN, self._saved)

    @staticmethod
    def _read_size() -> Tuple[int, int]:
        size = shutil.get_terminal_size()
        return size.columns, size.lines

    def width(self) -> int:
        return self._size[0]

    def resized(self) -> bool:
        """Whether the terminal changed size since the last call (the screen must then be drawn again)."""
        size = self._read_size()
        changed, self._size = size != self._size, size
        return changed

    def draw(self, screen: str) -> None:
        """Replace the screen with ``screen``, cut to the terminal's height."""
        lines = screen.rstrip("\n").split("\n")[: self._size[1]]
        self._output.write(_HOME + "".join(line + _CLEAR_LINE_END + "\r\n" for line in lines[:-1]))
        self._output.write(lines[-1] + _CLEAR_LINE_END + _CLEAR_SCREEN_END)
        self._output.flush()

    def read_key(self, timeout: float) -> Optional[str]:
        """The next key pressed within ``timeout`` seconds, or None."""
        if os.name == "posix":
            import select

            descriptor = self._input.fileno()
            if not select.select([descriptor], [], [], timeout)[0]:
                return None
            data = os.read(descriptor, 1)
            return data.decode(errors="replace") if data else None
        import msvcrt  # type: ignore[import-not-found, unused-ignore]
        import time

        deadline = time.monotonic() + timeout
        while not msvcrt.kbhit():  # type: ignore[attr-defined, unused-ignore]
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
        return msvcrt.getwch()  # type: ignore[attr-defined, unused-ignore]
