"""Stop requests, handled in one place whatever the launcher is doing (starting, training, handing off to spares,
waiting out a back-off, stopping). The handlers only set flags, so a signal can never leave a stop half-way; the
supervisor checks the flags wherever it waits.

The first SIGTERM/SIGHUP asks for a graceful stop (tasks save, exit 143); the first SIGINT the same (exit 130). A
second signal of any kind means "kill now": the grace period is cut short and every task SIGKILLed.
"""
from __future__ import annotations

import signal
import threading
from types import FrameType

from tfdist.launch.outcome import Cause

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequests:
    def __init__(self) -> None:
        self.cause: Cause | None = None
        self.signal: int | None = None
        self.kill_now = False
        self._lock = threading.Lock()
        self._previous: dict[int, object] = {}
        self._unannounced: list[str] = []

    @property
    def requested(self) -> bool:
        return self.cause is not None

    def install(self) -> None:
        for sig in HANDLED:
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread (an agent or a test driving the supervisor from a thread)
                pass

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.cause is None:
            self.signal = signum
            self.cause = Cause.INTERRUPTED if signum == signal.SIGINT else Cause.PREEMPTED
            self._unannounced.append(f"got {signal.Signals(signum).name}: stopping all tasks (they save first; "
                                     f"press Ctrl-C again to kill now)")
        elif not self.kill_now:
            self.kill_now = True
            self._unannounced.append(f"got {signal.Signals(signum).name} again: killing every task now")

    def request(self, cause: Cause, message: str) -> None:
        """Ask for a stop from code (an agent's other thread): same path as a signal."""
        with self._lock:
            if self.cause is None:
                self.cause = cause
                self._unannounced.append(message)

    def announcements(self) -> list[str]:
        """Messages for the console, once each (printed by the supervisor, never inside a handler)."""
        taken, self._unannounced = self._unannounced, []
        return taken
