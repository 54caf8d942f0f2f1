"""The terminal's side of the tasks' output: prefixed lines from many tasks serialised onto the launcher's stdout and
stderr (an :class:`~tfdist.launch.seams.OutputSink`, which process code writes to instead of printing)."""
from __future__ import annotations

import os
import sys
import threading
from typing import IO

from tfdist.launch.console.tflog import console_level, hidden


def to_terminal(line: str) -> None:
    """The terminal's :data:`~tfdist.launch.seams.Say`: one launcher line on stderr, at once."""
    print(line, file=sys.stderr, flush=True)


def terminal_streams() -> tuple[IO[str], IO[str]]:
    """This process's stdout and stderr as they are now: where output relayed as it comes goes (the host-file
    driver's agents)."""
    return sys.stdout, sys.stderr


class Console:
    """Serialises prefixed lines from many tasks onto the launcher's stdout/stderr."""

    def __init__(self, enabled: bool = True, out: IO[str] | None = None, err: IO[str] | None = None,
                 tf_log_level: int | None = None) -> None:
        self.enabled = enabled
        self.out = out
        self.err = err
        # TensorFlow's C++ lines below the tasks' TF_CPP_MIN_LOG_LEVEL stay in the log files only (see tflog).
        self.tf_log_level = console_level(os.environ) if tf_log_level is None else tf_log_level
        self._lock = threading.Lock()

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None:
        if not self.enabled or hidden(line, self.tf_log_level):
            return
        stream = (self.err or sys.stderr) if to_stderr else (self.out or sys.stdout)
        with self._lock:
            try:
                stream.write(f"{prefix} {line}")
                stream.flush()
            except (OSError, ValueError):
                self.enabled = False

    def notice(self, line: str) -> None:
        """A launcher message about the output itself: always on stderr, even when task output is not shown."""
        with self._lock:
            try:
                (self.err or sys.stderr).write(line + "\n")
                (self.err or sys.stderr).flush()
            except (OSError, ValueError):
                pass
