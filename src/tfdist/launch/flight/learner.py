"""The launcher's memory of how long each phase of a job takes: fed with the heartbeats the supervisor polls, kept
in the run folder (``phases.json``, :func:`tfdist.launch.flight.thresholds.save`) so that it survives restarts of
the same job, and handed to the hang rule as :class:`~tfdist.launch.flight.thresholds.HangLimits`. The rule itself
is pure (:mod:`tfdist.launch.flight.thresholds`); this is the thin mechanism around it."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from tfdist.launch.flight import thresholds
from tfdist.protocol.records import HeartbeatRecord, Phase, PhaseStats
from tfdist.protocol.variables import HEARTBEAT_INTERVAL

if TYPE_CHECKING:
    from tfdist.launch.spec import LaunchSpec

SAVE_EVERY = 2.0  # seconds: a p99 that keeps growing at the start of a job is written at most this often


def heartbeat_interval(environ: Mapping[str, str]) -> float:
    """The tasks' ``TFDIST_HEARTBEAT_INTERVAL`` as the runtime reads it (its default when unset or not a number)."""
    try:
        value = float(environ.get(HEARTBEAT_INTERVAL, thresholds.DEFAULT_INTERVAL))
    except ValueError:
        return thresholds.DEFAULT_INTERVAL
    return value if value >= 0 else thresholds.DEFAULT_INTERVAL


class PhaseLearner:
    """Learns the job's phase durations (the highest p99 per phase) from heartbeats.

    Args:
        folder: the run folder (``--log-dir``); None: nothing is read or written.
        command, job_name: which job the file belongs to (another job's file in the same folder is ignored).
        interval: the tasks' heartbeat interval.
    """

    def __init__(self, folder: str | None, *, command: tuple[str, ...], job_name: str, interval: float) -> None:
        self.folder = folder
        self.command = command
        self.job_name = job_name
        self.interval = interval
        self.learned: dict[Phase, PhaseStats] = (
            thresholds.load(folder, command=command, job_name=job_name) if folder and os.path.isdir(folder) else {})
        self._unsaved = False
        self._saved_at = float("-inf")
        self.limits = thresholds.HangLimits(learned=dict(self.learned), interval=interval)

    @classmethod
    def for_launch(cls, spec: LaunchSpec, folder: str | None, environ: Mapping[str, str]) -> PhaseLearner:
        """The learner of ``spec``'s job in its run folder (the tasks' interval: ``environ`` under ``spec.env``)."""
        return cls(folder, command=(spec.command.target, *spec.command.args), job_name=spec.job_name,
                   interval=heartbeat_interval({**environ, **dict(spec.env)}))

    @staticmethod
    def stale_after(hang_timeout: float) -> float:
        """How long a task must be silent before the kernel is asked whether it is stopped (SIGSTOP): the shortest
        threshold any phase may have, so that a stopped task is named so when it is called hung."""
        return min(hang_timeout, thresholds.FLOOR)

    @property
    def step_lag(self) -> int:
        """How many steps a heartbeat's step may lag (see :func:`~tfdist.launch.flight.thresholds.step_lag`)."""
        return thresholds.step_lag(self.learned, self.interval)

    def observe(self, beats: Iterable[HeartbeatRecord | None], now: float | None = None) -> None:
        """Merge the ``phase_stats`` of ``beats``; write the file when something grew (at most every SAVE_EVERY)."""
        merged = self.learned
        for beat in beats:
            if beat is not None and beat.phase_stats:
                merged = thresholds.learn(merged, beat.phase_stats)
        if merged != self.learned:
            self.learned, self._unsaved = merged, True
            self.limits = thresholds.HangLimits(learned=dict(merged), interval=self.interval)
        now = time.monotonic() if now is None else now
        if self._unsaved and now - self._saved_at >= SAVE_EVERY:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Write what is unsaved (at the end of an attempt: the next one, or the next launch, starts from it)."""
        if not self._unsaved or not self.folder:
            return
        if thresholds.save(self.folder, self.learned, command=self.command, job_name=self.job_name):
            self._unsaved = False
        self._saved_at = time.monotonic() if now is None else now
