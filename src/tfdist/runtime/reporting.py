"""How a task tells the launcher what happened: an error file with the traceback, and a heartbeat file.

The launcher passes both paths in the environment (``TFDIST_ERROR_FILE``, ``TFDIST_HEARTBEAT_FILE``). Importing
``tfdist.runtime`` installs the error hook, so a script needs no decorator for its traceback to reach the launcher's
root-cause report; :func:`record` is there for scripts that catch exceptions themselves.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
import traceback
from types import TracebackType
from typing import Any, Callable, TypeVar

from tfdist.constants import ERROR_FILE, HEARTBEAT_FILE

F = TypeVar("F", bound=Callable[..., Any])

FINISHED = "finished"  # second word of the heartbeat file once training has ended


def write_error_file(exc: BaseException, path: str | None = None) -> None:
    """Write ``exc`` as JSON (message, type, traceback, time, pid, host) where the launcher will look for it."""
    path = path or os.environ.get(ERROR_FILE)
    if not path:
        return
    record_ = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "timestamp": time.time(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(record_, handle)
        os.replace(tmp, path)
    except OSError:  # reporting must never hide the original failure
        pass


def record(fn: F) -> F:
    """Decorator: an exception escaping ``fn`` is written to the error file, then re-raised."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SystemExit:
            raise
        except BaseException as exc:
            write_error_file(exc)
            raise

    return wrapper  # type: ignore[return-value]


_previous_hook = sys.excepthook


def _hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if not isinstance(exc, (SystemExit, KeyboardInterrupt)):
        write_error_file(exc)
    _previous_hook(kind, exc, tb)


def install_error_hook() -> None:
    """Report uncaught exceptions to the launcher (no-op outside ``tfdist launch``)."""
    if os.environ.get(ERROR_FILE) and sys.excepthook is not _hook:
        sys.excepthook = _hook


class Heartbeat:
    """Touches the heartbeat file at most every ``min_interval`` seconds; the launcher's hang watchdog reads its
    modification time."""

    def __init__(self, path: str | None = None, min_interval: float | None = None) -> None:
        self.path = path if path is not None else os.environ.get(HEARTBEAT_FILE)
        if min_interval is None:
            min_interval = float(os.environ.get("TFDIST_HEARTBEAT_INTERVAL", "0.5"))
        self.min_interval = min_interval
        self._last = 0.0

    def beat(self, step: int | None = None, *, force: bool = False) -> None:
        if not self.path:
            return
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        self._write(f"{step if step is not None else ''}\n")

    def finished(self, step: int | None = None) -> None:
        """Training ended: the watchdog stops expecting beats (saving and evaluating after ``fit`` are silent)."""
        if self.path:
            self._write(f"{step if step is not None else ''} {FINISHED}\n")

    def _write(self, text: str) -> None:
        try:
            with open(self.path, "w", encoding="ascii") as handle:  # type: ignore[arg-type]
                handle.write(text)
        except OSError:
            pass
