"""A few status lines pinned to the bottom of a terminal while the program's other output scrolls above them.

Plain ANSI rather than ``rich.live``: task output passes through byte for byte (rich would re-wrap long log lines,
re-decode their escape sequences and render each one, which costs on chatty TensorFlow logs), and one lock orders
the pump threads' lines, the launcher's messages and the redraws, so a line is never cut by a redraw.

How: the lines are drawn last with the cursor left at the end of the bottom one. Before anything else is written
the pinned rows are erased and the cursor goes back to the first of them, the new output
is written, and the pinned lines are drawn again below it. Pinned lines are cut to the terminal's width so that
each takes exactly one row and the cursor arithmetic holds.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, TextIO

ERASE_LINE = "\x1b[2K"
UP = "\x1b[1A"


def erase_rows(rows: int) -> str:
    """Erase the cursor's row and the ``rows - 1`` above it, leaving the cursor at the start of the topmost.

    Row by row rather than one "erase below" (``ESC[J``): tmux, for one, copies a screen erased from its top into
    the scrollback, which would leave a stale copy of the pinned lines there.
    """
    return "\r" + ERASE_LINE + (UP + ERASE_LINE) * max(0, rows - 1) if rows > 0 else ""


def same_terminal(a: TextIO, b: TextIO) -> bool:
    """Whether two streams write to the same terminal (then both must go through the pinned region)."""
    try:
        if not (a.isatty() and b.isatty()):
            return False
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
        return (sa.st_rdev, sa.st_ino) == (sb.st_rdev, sb.st_ino)
    except (OSError, ValueError, AttributeError):
        return False


class _Proxy:
    """Stands in for ``sys.stdout``/``sys.stderr``: whole lines, and a progress bar's ``\r``-ended redraws, go above
    the pinned region; the rest waits for its newline."""

    def __init__(self, pinned: "PinnedLines", target: TextIO) -> None:
        self._pinned = pinned
        self._target = target
        self._partial = ""

    def write(self, text: str) -> int:
        with self._pinned.lock:
            self._partial += text
            if "\n" in self._partial:
                complete, _, self._partial = self._partial.rpartition("\n")
                self._pinned.emit(complete + "\n", self._target)
            if self._partial.endswith("\r"):  # a progress bar's redraw: shown now, on the row it redraws
                self._pinned.emit(self._partial, self._target)
                self._partial = ""
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def drain(self) -> None:
        if self._partial:
            self._pinned.emit(self._partial + "\n", self._target)
            self._partial = ""

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding... of the real stream
        return getattr(self._target, name)


class PinnedLines:
    """Owns the bottom rows of the terminal behind ``tty``."""

    def __init__(self, tty: TextIO, *, width: int | None = None) -> None:
        self.tty = tty
        self.lock = threading.RLock()
        self._fixed_width = width
        self._lines: list[str] = []
        self._drawn = 0  # pinned rows now on the screen
        self._open = False  # the row above the pinned region holds a \r-ended redraw, which the next output replaces
        self._proxies: list[tuple[str, TextIO, _Proxy]] = []

    def width(self) -> int:
        if self._fixed_width:
            return self._fixed_width
        try:
            return os.get_terminal_size(self.tty.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80

    # -- drawing (callers hold the lock) --------------------------------------------------------------------
    def _erase(self) -> str:
        text, self._drawn = erase_rows(self._drawn), 0
        if self._open:  # back onto the redraw's row: the next output writes over it, as on a plain terminal
            text += UP + "\r" + ERASE_LINE
            self._open = False
        return text

    def _drawing(self) -> str:
        self._drawn = len(self._lines)
        limit = max(1, self.width() - 1)
        return "\n".join(line[:limit] for line in self._lines)

    def _write_tty(self, text: str) -> None:
        try:
            self.tty.write(text)
            self.tty.flush()
        except (BrokenPipeError, ValueError):
            pass

    def set_lines(self, lines: list[str]) -> None:
        """Replace the pinned lines and draw them."""
        with self.lock:
            erase = self._erase()
            self._lines = list(lines)
            self._write_tty(erase + self._drawing())

    def emit(self, text: str, target: TextIO) -> None:
        """Write whole lines of other output above the pinned region (one write when it goes to the same stream).
        Text ending in ``\r`` (a progress bar) keeps its row open: the next output starts on that row."""
        with self.lock:
            erase = self._erase()
            if text.endswith("\r"):
                text, self._open = text[:-1] + "\n", True
            if target is self.tty:
                self._write_tty(erase + text + self._drawing())
                return
            self._write_tty(erase)
            try:
                target.write(text)
                target.flush()
            except (BrokenPipeError, ValueError):
                pass
            self._write_tty(self._drawing())

    # -- taking over sys.stdout / sys.stderr ----------------------------------------------------------------
    def install(self) -> None:
        """Route ``sys.stderr`` (and ``sys.stdout`` when it is the same terminal) through the pinned region."""
        with self.lock:
            self._proxies.append(("stderr", sys.stderr, _Proxy(self, sys.stderr)))
            if same_terminal(sys.stdout, self.tty):
                self._proxies.append(("stdout", sys.stdout, _Proxy(self, sys.stdout)))
            for name, _, proxy in self._proxies:
                setattr(sys, name, proxy)

    def close(self, *, keep: bool = True) -> None:
        """Give the streams back, leaving the last pinned lines on the screen above the cursor (or erasing them)."""
        with self.lock:
            for name, original, proxy in self._proxies:
                proxy.drain()
                if getattr(sys, name) is proxy:
                    setattr(sys, name, original)
            self._proxies = []
            if self._drawn:
                self._write_tty("\n" if keep else self._erase())
            self._drawn = 0
            self._lines = []
