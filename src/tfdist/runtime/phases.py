"""Which phase this task is in, since when, and what its finished phases took (issue 36): the launcher learns each
phase's durations from the heartbeat and calls a task hung when its current phase runs far past them.

One :class:`PhaseClock` per process (:func:`process_phases`), shared by every writer of the heartbeat: the task
bootstrap's callbacks and custom-loop watcher, and ``tfdist.runtime``'s callbacks. Imports no TensorFlow and does
no I/O; the writer asks :meth:`PhaseClock.report` for the record's fields when it writes one.

The phases (:class:`tfdist.protocol.Phase`), as Keras' hooks delimit them:

- ``startup``: from the process start (a warm spare's: when it is given its task) to the end of its first step (the first step traces and compiles the
  training function: it is start-up work, and would be a thousand-fold outlier among the steps);
- ``restore``: a fit's restore (``BackupAndRestore``, in-memory snapshots), up to the end of its first step, which
  traces again;
- ``step``: each training batch, from the end of the one before (or the epoch's start) to its own end;
- ``between``: from the end of an epoch's last batch (or a validation's start) to the next epoch's start: the
  callbacks at an epoch's end, evaluation, saving; and after a fit, up to the end of the next fit's first step.

Cost per step: one clock read (the caller's) and a write into a fixed ring of the last :data:`WINDOW` durations; the
99th percentile is computed only when a heartbeat is written, and only when a duration was added since.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

from tfdist.protocol.records import Phase, PhaseStats

WINDOW = 512  # durations kept per phase: the p99 follows the recent steps, in constant memory (a power of two)
_SLOT = WINDOW - 1  # n & _SLOT: the ring's slot for the n-th duration
_STEP = Phase.STEP  # an enum member read per step: a module global is a cheaper lookup than the class attribute


class _Durations:
    """The last :data:`WINDOW` durations of one phase, their count and the longest ever."""

    __slots__ = ("ring", "n", "longest")

    def __init__(self) -> None:
        self.ring = [0.0] * WINDOW
        self.n = 0
        self.longest = 0.0

    def add(self, seconds: float) -> None:
        self.ring[self.n & _SLOT] = seconds
        self.n += 1
        if seconds > self.longest:
            self.longest = seconds

    def stats(self) -> PhaseStats:
        kept = sorted(self.ring[:self.n] if self.n < WINDOW else self.ring)
        p99 = kept[max(0, math.ceil(0.99 * len(kept)) - 1)]  # nearest rank
        return PhaseStats(n=self.n, p99=p99, max=self.longest)


class PhaseClock:
    """The phase this process is in and the durations of those it finished.

    Args:
        started: the monotonic time the current (start-up) phase began; default: the process's start.
        clock: a monotonic clock in seconds, the one :class:`tfdist.runtime.progress.Progress` reads (tests inject
            their own); the wall-clock time of ``phase_since`` is
            derived from it with one offset taken now, so a step costs one clock read.
    """

    def __init__(self, started: float | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        now = clock()
        self._wall_offset = time.time() - now
        self.phase = Phase.STARTUP
        self.since = started if started is not None else now - _process_age()
        self._durations: dict[Phase, _Durations] = {}
        self._open = self._durations_of(Phase.STARTUP)  # the current phase's durations
        self._stats: dict[Phase, PhaseStats] | None = None
        self._counted = -1  # the durations' total count when _stats was computed
        # False once steps are only seen by polling (a custom loop): then the time between two looks holds whatever the
        # loop did besides stepping (an epoch's checkpoint save, an evaluation), which would pass for a long step, and
        # its first such pause for a hang. Such a task says no phase: the launcher waits --hang-timeout, as before.
        self.delimited = True

    def enter(self, phase: Phase, now: float | None = None) -> bool:
        """The task starts ``phase`` (now, or at monotonic ``now``): the phase it was in has finished. True when
        that changed the kind: the caller writes a heartbeat at once."""
        if phase is self.phase:
            return False
        self._finish(self.clock() if now is None else now)
        self.phase = phase
        self._open = self._durations_of(phase)
        return True

    def step_done(self, now: float) -> bool:
        """A step ended at monotonic ``now`` and the next begins. True when the kind changed (the first step).
        Called per training step: the ring write is inlined."""
        if self.phase is not _STEP:
            return self.enter(_STEP, now)
        durations = self._open
        seconds = now - self.since
        durations.ring[durations.n & _SLOT] = seconds
        durations.n += 1
        if seconds > durations.longest:
            durations.longest = seconds
        self.since = now
        return False

    def steps_done(self, count: int, now: float) -> bool:
        """``count`` steps ended by ``now`` since the last look (a custom loop, seen by polling its optimizer): each is
        counted with their mean duration. True when the kind changed. From now on the heartbeat says no phase
        (:attr:`delimited`)."""
        self.delimited = False
        if self.phase is not _STEP or count <= 0:
            return self.enter(_STEP, now)
        durations = self._open
        mean = (now - self.since) / count
        for _ in range(min(count, WINDOW)):
            durations.add(mean)
        durations.n += max(0, count - WINDOW)
        self.since = now
        return False

    def _durations_of(self, phase: Phase) -> _Durations:
        durations = self._durations.get(phase)
        if durations is None:
            durations = self._durations[phase] = _Durations()
        return durations

    def _finish(self, now: float) -> None:
        self._open.add(max(0.0, now - self.since))
        self.since = now

    def report(self) -> tuple[Phase | None, float | None, dict[Phase, PhaseStats] | None]:
        """The heartbeat's ``phase``, ``phase_since`` (wall clock) and ``phase_stats``; none of them where the phases
        are not delimited (:attr:`delimited`)."""
        if not self.delimited:
            return None, None, None
        counted = sum(d.n for d in self._durations.values())
        if counted != self._counted:
            self._stats = {phase: d.stats() for phase, d in self._durations.items() if d.n} or None
            self._counted = counted
        return self.phase, self._wall_offset + self.since, self._stats


def _process_age() -> float:
    """Seconds since this process started (Linux: from /proc; elsewhere 0, the bootstrap starts within
    milliseconds of the interpreter)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            started_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


_process: dict[str, PhaseClock] = {}


def start_task() -> PhaseClock:
    """This process's task starts now (the task bootstrap, which a warm spare runs once it is given its task: its
    start-up counts from then, not from the spare's own start); a new clock replaces any there was."""
    clock = _process["clock"] = PhaseClock(started=time.perf_counter())
    return clock


def process_phases() -> PhaseClock:
    """This process's phase clock (made at first use, counting from the process's start)."""
    clock = _process.get("clock")
    if clock is None:
        clock = _process["clock"] = PhaseClock()
    return clock


def resuming(backup_dir: object = None) -> bool:
    """Whether a fit starting now reads state back: the launcher restarted this task's group, or ``backup_dir`` (a
    ``BackupAndRestore``'s) holds a backup."""
    from tfdist.protocol.variables import RESTART_COUNT

    if os.environ.get(RESTART_COUNT, "0").strip() not in ("", "0"):
        return True
    try:
        return isinstance(backup_dir, str) and any(os.scandir(backup_dir))
    except OSError:
        return False


def marks_restore(callback: Any, phases: PhaseClock, entered: Callable[[], None]) -> Any:
    """``callback`` (a ``BackupAndRestore``, a snapshot callback: what restores in ``on_train_begin``) with its
    restore counted as the ``restore`` phase when there is something to read back; ``entered`` writes the heartbeat
    that says so. The restore phase lasts to the end of the fit's first step, which traces again."""
    begin = getattr(callback, "on_train_begin", None)
    if begin is None or getattr(begin, "_tfdist_marks_restore", False):
        return callback

    def on_train_begin(logs: Any = None) -> None:
        backup_dir = getattr(callback, "backup_dir", getattr(callback, "_backup_dir", None))
        if phases.phase is not Phase.RESTORE and resuming(backup_dir) and phases.enter(Phase.RESTORE):
            entered()
        begin(logs)

    on_train_begin._tfdist_marks_restore = True  # type: ignore[attr-defined]
    callback.on_train_begin = on_train_begin
    return callback
