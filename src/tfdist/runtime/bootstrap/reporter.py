"""What the bootstrap tells the launcher, whatever it learnt it from: Keras callbacks (:mod:`.keras_hooks`), the
step of a custom loop's optimizer (:mod:`.loops`), the script raising or returning. Imports no TensorFlow.

States, as the launcher reads them from the heartbeat record: ``training`` once steps run, ``finished`` once
``fit`` returned, or at an exit with status 0, so the live view shows ``done`` rather than ``exited`` and the launcher
knows that a failure came after training ended (and does not train again). An exit with another status before a
``fit`` returned (``sys.exit(3)`` on missing data, a bad flag, ``SystemExit("message")``, a custom loop that gives
up) is a failure: nothing is written, so the launcher retries it. (A script ending cleanly, or ``sys.exit(0)``, with
no training at all is ``finished`` too, as torchrun and the launcher itself count status 0: a success, shown
``done``.) The status is seen where the script exits through ``sys.exit``, ``exit()`` or ``quit()`` (argparse's
errors and absl's ``app.run`` do); a ``raise SystemExit(N)`` written out cannot be seen from an exit handler and
counts as status 0.
"""
from __future__ import annotations

import atexit
import builtins
import os
import sys
import threading
import weakref
from types import TracebackType
from typing import Any, Callable

from tfdist.protocol.records import Phase
from tfdist.runtime.reporting import Heartbeat, write_error_file


class Reporter:
    """One per task process.

    Args:
        heartbeat: the writer; None: one for ``TFDIST_HEARTBEAT_FILE``, made at first use (a warm spare gets its
            task's environment only after the bootstrap started).
        read_step: how to read an optimizer's step (tests pass their own; the default reads ``iterations``).
    """

    def __init__(self, heartbeat: Heartbeat | None = None,
                 read_step: Callable[[Any], int | None] | None = None) -> None:
        self._heartbeat = heartbeat
        self._read_step = read_step or optimizer_step
        self._lock = threading.Lock()
        self.fits = 0  # Keras fits running now: while one runs, its callback reports and the loop watcher is quiet
        self.fits_ended = 0  # Keras fits that returned in this process
        self.runtime_reports = False  # the script uses tfdist.runtime's own progress callback
        self.failed = False
        self.ended = False  # a fit returned and no other runs: training has finished
        self.reported = False  # this reporter wrote the heartbeat (not only tfdist.runtime)
        self.saves_on_stop = False  # a save handler is installed (a BackupAndRestore got the preemption handler)
        self.progress: Any = None  # the Keras fit's tfdist.runtime.progress.Progress
        self.exit_status: int | None = None  # what sys.exit (or exit()/quit()) was last asked to exit with
        self.step: int | None = None
        self.loss: float | None = None
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._first_seen: int | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def heartbeat(self) -> Heartbeat:
        if self._heartbeat is None:
            self._heartbeat = Heartbeat()
        return self._heartbeat

    # -- the process ---------------------------------------------------------------------------------------------
    def install(self) -> None:
        """Hook the script's end: an uncaught exception marks the task failed and is written as the error record
        (the path is read now: a warm spare learns it after start-up), a clean exit marks it finished. The task's
        start-up phase begins now."""
        from tfdist.runtime import phases

        phases.start_task()
        previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self.failed = True
                write_error_file(exc)
            previous(kind, exc, tb)

        sys.excepthook = hook
        sys.exit = self._recording_exit(sys.exit)
        for name in ("exit", "quit"):  # site's Quitter objects raise SystemExit themselves
            if callable(getattr(builtins, name, None)):
                setattr(builtins, name, self._recording_exit(getattr(builtins, name)))
        atexit.register(self.at_exit)

    def _recording_exit(self, exit_function: Callable[..., Any]) -> Callable[..., Any]:
        def exit(status: object = None) -> Any:  # noqa: A001 - stands in for sys.exit
            if threading.current_thread() is threading.main_thread():  # elsewhere it ends that thread only
                self.exit_status = exit_status(status)
            return exit_function(status)

        exit.__doc__ = exit_function.__doc__
        return exit

    def at_exit(self) -> None:
        """An exit with status 0 ends the task's training: say so, unless someone else (``tfdist.runtime``) wrote
        the heartbeat, or a ``fit`` already said it. Any other exit leaves the record as it is (see the module)."""
        self._stop.set()
        path = self.heartbeat.path
        if self.failed or not path or self.ended or (self.exit_status or 0) != 0:
            return
        if not self.fits and not self.runtime_reports:  # a custom loop's last steps, since the last look
            steps = [s for s in (self._read_step(o) for o in list(self._optimizers)) if s is not None]
            if steps and (self.step is not None or max(steps) != self._first_seen):
                self.step, self.reported = max(steps), True
        if self.reported or not os.path.exists(path):
            self.finished()

    # -- Keras fit (driven by the callback in keras_hooks) -------------------------------------------------------
    def fit_begin(self, step: int, *, steps_per_call: int = 1, total_steps: int | None = None,
                  steps_per_epoch: int | None = None) -> Any:
        """A ``fit`` begins; ``step`` is its optimizer's step (where a restore left it), ``total_steps`` its epochs x
        steps. Steps are counted over the whole process: a later ``fit`` (TensorFlow's multi-worker tutorial trains,
        saves, reloads and trains again) goes on from the steps already run, and its total is theirs plus its own, so
        the step never goes back (the launcher's progress and repeat rules read it) and ``step/total`` of the live
        view belong together. Its optimizer's own step is not used there: a reloaded model carries the earlier
        training's, a new one starts at 0."""
        from tfdist.runtime.progress import Progress

        if self.fits_ended and self.step is not None:
            step, total_steps = self.step, (self.step + total_steps if total_steps is not None else None)
        with self._lock:
            self.fits += 1
        self.ended = False
        self.exit_status = None  # a sys.exit the script caught before it trained is not how it ends
        self.reported = True
        self.progress = Progress(heartbeat=self.heartbeat)
        self.progress.begin(step, steps_per_call=steps_per_call, total_steps=total_steps,
                            steps_per_epoch=steps_per_epoch)
        self.step = step
        return self.progress

    def fit_end(self) -> None:
        progress = self.progress
        if progress is not None:
            self.step = progress.step
            from tfdist.runtime.progress import as_float

            self.loss = as_float(progress.loss)
            progress.end()  # writes "finished": the watchdog stops expecting beats
        with self._lock:
            self.fits = max(0, self.fits - 1)
            self.ended = self.fits == 0
            self.fits_ended += 1

    def keep_alive(self) -> None:
        """A standalone ``evaluate`` runs: the task is alive, in whatever state its training is."""
        hb = self.heartbeat
        if self.fits == 0 and not self.ended and self.step is not None and hb.due():
            hb.beat(self.step)

    def evaluating(self) -> None:
        """A standalone ``evaluate`` begins (between a custom loop's steps): the ``between`` phase."""
        if self.fits == 0 and self.heartbeat.path and self.heartbeat.phases.enter(Phase.BETWEEN):
            self.heartbeat.beat(self.step, force=True)

    def finished(self) -> None:
        self.heartbeat.finished(self.step, loss=self.loss)

    # -- custom loops ----------------------------------------------------------------------------------------------
    def watch_optimizer(self, optimizer: Any) -> None:
        """A Keras optimizer was created: a custom loop's steps show in its ``iterations``."""
        self._optimizers.add(optimizer)
        with self._lock:
            if self._watcher is None:
                # Run at exit before the handlers TensorFlow registered since start-up (its strategy's), while the
                # optimizer's step can still be read: atexit runs the last registered first.
                atexit.unregister(self.at_exit)
                atexit.register(self.at_exit)
                self._watcher = threading.Thread(target=self._watch_loop, name="tfdist-bootstrap-steps", daemon=True)
                self._watcher.start()

    def _watch_loop(self) -> None:
        while not self._stop.wait(self.heartbeat.min_interval if self.heartbeat.min_interval > 0 else 0.5):
            self.poll_loop()

    def poll_loop(self) -> None:
        """One look at the optimizers' steps; beats when a step moved since the first look (a loop that has not
        started, or a hung one, sends nothing: the hang watchdog sees the silence)."""
        if self.fits or self.runtime_reports or not self.heartbeat.path:
            return
        steps = [s for s in (self._read_step(o) for o in list(self._optimizers)) if s is not None]
        if not steps:
            return
        step = max(steps)
        if self._first_seen is None:
            self._first_seen = step
            return
        if step != self._first_seen and step != self.step:
            phases = self.heartbeat.phases  # the beat below is written at once, whether the kind changed or not
            phases.steps_done(step - (self._first_seen if self.step is None else self.step), phases.clock())
            self.step = step
            self.reported = True
            self.exit_status = None  # steps after a sys.exit the script caught: that exit is not how it ends
            self.heartbeat.beat(step, force=True)


def exit_status(status: object) -> int:
    """The process status ``sys.exit(status)`` ends with: None is 0, an integer itself (as the C exit() keeps its
    low byte), anything else (a message) is 1."""
    if status is None:
        return 0
    return status & 0xFF if isinstance(status, int) else 1


def optimizer_step(optimizer: Any) -> int | None:
    """An optimizer's ``iterations`` (None while it has none yet, or where it cannot be read)."""
    try:
        iterations = optimizer.iterations
        return int(iterations.numpy()) if iterations is not None else None
    except Exception:  # noqa: BLE001 - a variable not created yet, a strategy that cannot read it from here
        return None

