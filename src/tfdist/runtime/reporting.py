"""How a task tells the launcher what happened: an error record with the traceback, and a heartbeat record.

The records and their files are defined in :mod:`tfdist.protocol` (writer and reader side by side); the
launcher passes both paths in the environment. Importing ``tfdist.runtime`` installs the error hook, so a script needs
no decorator for its traceback to reach the launcher's root-cause report; :func:`record` is there for scripts that
catch exceptions themselves.
"""
from __future__ import annotations

import functools
import os
import sys
import time
from types import TracebackType
from typing import Any, Callable, TypeVar

from tfdist import protocol as P
from tfdist.runtime.phases import PhaseClock, process_phases

F = TypeVar("F", bound=Callable[..., Any])


def write_error_file(exc: BaseException, path: str | None = None) -> None:
    """Write ``exc`` as an error record where the launcher will look for it (no-op outside ``tfdist launch``)."""
    path = path or os.environ.get(P.ERROR_FILE)
    if path:
        P.write_error(path, P.ErrorRecord.from_exception(exc))


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
    if os.environ.get(P.ERROR_FILE) and sys.excepthook is not _hook:
        sys.excepthook = _hook


class Heartbeat:
    """Writes the heartbeat record at most every ``min_interval`` seconds; the launcher's hang watchdog reads the
    file's modification time and phase (``phases``: this process's, :mod:`tfdist.runtime.phases`), the live view its
    step, loss and total."""

    def __init__(self, path: str | None = None, min_interval: float | None = None,
                 total_steps: int | None = None, phases: PhaseClock | None = None) -> None:
        self.path = path if path is not None else os.environ.get(P.HEARTBEAT_FILE)
        if min_interval is None:
            min_interval = float(os.environ.get(P.HEARTBEAT_INTERVAL, "0.5"))
        self.min_interval = min_interval
        self.total_steps = total_steps
        self.saves: bool | None = None  # True once a save handler for SIGTERM is installed in this task
        self.phases = phases if phases is not None else process_phases()
        self._last = float("-inf")
        self._modules_written = False

    def due(self) -> bool:
        """Whether a beat now would be written (callers can skip computing its values otherwise)."""
        return bool(self.path) and time.monotonic() - self._last >= self.min_interval

    def beat(self, step: int | None = None, *, force: bool = False, loss: float | None = None,
             examples: int | None = None) -> None:
        if not self.path or not (force or self.due()):
            return
        self._last = time.monotonic()
        self._write(step, P.TaskState.TRAINING, loss, examples)

    def finished(self, step: int | None = None, *, loss: float | None = None, examples: int | None = None) -> None:
        """Training ended: the watchdog stops expecting beats (saving and evaluating after ``fit`` are silent)."""
        if self.path:
            self._write(step, P.TaskState.FINISHED, loss, examples)

    def _write(self, step: int | None, state: P.TaskState, loss: float | None, examples: int | None) -> None:
        if loss is not None and loss != loss:  # NaN has no JSON spelling
            loss = None
        phase, since, stats = self.phases.report()
        written = P.write_heartbeat(self.path, P.HeartbeatRecord(  # type: ignore[arg-type]
            step=step, time=time.time(), state=state, loss=loss, total_steps=self.total_steps, examples=examples,
            saves=self.saves, phase=phase, phase_since=since, phase_stats=stats))
        if written and not self._modules_written:
            # Training has started, so every library the script needs is imported: the launcher's warm spares
            # import the same ones ahead, and a restarted task skips those imports too.
            self._modules_written = True
            P.write_modules(self.path, P.loaded_library_modules(sys.modules))  # type: ignore[arg-type]
