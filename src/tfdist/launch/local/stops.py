"""Stop requests, handled in one place whatever the launcher is doing (starting, training, handing off to spares,
waiting out a back-off, stopping). The handlers only set flags, so a signal can never leave a stop half-way; the
supervisor checks the flags wherever it waits.

The first SIGTERM/SIGHUP asks for a graceful stop (tasks with a save handler save, then the launcher exits 143); the
first SIGINT the same (exit 130). A second signal of any kind means "kill now": the grace period is cut short and
every task SIGKILLed. The announcement says which tasks save (those whose heartbeat says they have a save handler).

The same requests serve a multi-machine agent and the host-file driver: :meth:`StopRequests.forward` hands the first
signal to the rendezvous server they host (from a thread, never from the handler), and a second Ctrl-C abandons
them at their next check (:meth:`StopRequests.abandon_on_second_ctrl_c`).
"""
from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Callable

from tfdist.launch.outcome import Cause

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_FIRST = "\0first-signal"  # placeholder for the first signal's announcement


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False


def saving_words(savers: list[str], others: list[str]) -> str:
    """Who saves when the group is stopped: the tasks that said they have a save handler (pure)."""
    if not savers:
        return "no task has a save handler: nothing is saved"
    text = f"{', '.join(savers)} save{'s' if len(savers) == 1 else ''} first"
    return text + (f"; {', '.join(others)} cannot" if others else "")


class StopRequests:
    def __init__(self) -> None:
        self.cause: Cause | None = None
        self.signal: int | None = None
        self.kill_now = False
        self.second_signal: int | None = None  # the signal that asked to kill now
        self._lock = threading.Lock()
        self._previous: dict[int, object] = {}
        self._forwarding = threading.Event()  # set: stop forwarding (restore)
        self._unannounced: list[str] = []
        # Who saves on the way out, in words (the supervisor knows, from the tasks' heartbeats).
        self.saving: Callable[[], str] = lambda: "tasks with a save handler save first"
        self.terminal: Callable[[], bool] = _stdin_is_terminal

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
        self._forwarding.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def forward(self, to: Callable[[int], None], *, every: float = 0.05) -> None:
        """Call ``to(signal)`` once, from a thread, when a signal asks for a stop (a rendezvous server hosted here
        is told at once, whatever the main thread is waiting on). Ends with :meth:`restore`."""
        def loop() -> None:
            while not self._forwarding.wait(every):
                if self.signal is not None:
                    to(self.signal)
                    return
        threading.Thread(target=loop, name="stop-forward", daemon=True).start()

    def abandon_on_second_ctrl_c(self, say: Callable[[str], None] | None = None) -> None:
        """Raise KeyboardInterrupt when a second SIGINT asked to kill now (the agent's and the driver's way out).
        ``say``: first tell the console what the signals asked for, as the supervisor does (:meth:`announcements`)."""
        for message in self.announcements() if say is not None else ():
            say(message)
        if self.second_signal == signal.SIGINT:
            raise KeyboardInterrupt

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.cause is None:
            self.signal = signum
            self.cause = Cause.INTERRUPTED if signum == signal.SIGINT else Cause.PREEMPTED
            self._unannounced.append(_FIRST)  # worded when announced: never build strings inside a handler
        elif not self.kill_now:
            self.kill_now = True
            self.second_signal = signum
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
        return [self._first_words() if message is _FIRST else message for message in taken]

    def _first_words(self) -> str:
        name = signal.Signals(self.signal).name if self.signal is not None else "a stop request"
        # Ctrl-C is only pressed on a terminal; a scheduler's SIGTERM (or a SIGINT from a script) is not answered so.
        again = ("press Ctrl-C again to kill now" if self.signal == signal.SIGINT and self.terminal()
                 else f"a second {name} kills them now")
        return f"got {name}: stopping all tasks ({self.saving()}; {again})"
