"""Learned hang thresholds: how long each phase of a task may run before the task is called hung, from what the
job's tasks said their finished phases took (``phase_stats`` in their heartbeats, :mod:`tfdist.protocol.records`).
Pure functions and immutable tables; the one file they persist to is read and written by :func:`load` and
:func:`save`. Table-tested in tests/unit/test_flight_thresholds.py.

The rule: a task in phase P is hung once it has sent no heartbeat for longer than

    min(--hang-timeout, max(FLOOR, FACTOR x the highest p99 of P seen in this job) + the heartbeat interval)

and, for a phase not seen yet (or a task that does not say its phase), for longer than ``--hang-timeout``, which is
also the ceiling. Why these numbers:

- ``FACTOR`` 5: NVIDIA's Resiliency Extension (``ft_launcher``) times its set-up, step and checkpoint phases by the
  longest observed interval times a safety factor of 5. A p99 (not the mean) already holds the slow tail (the steps
  that trace, the ones a loaded machine delays), so 5 x p99 is well clear of every healthy step seen so far.
- ``FLOOR`` 3 s: below a few seconds the threshold would measure the machine, not the task: a shared machine can
  delay a 40 ms step by a second or two (scheduling, a garbage collection, the first step after a restore that
  fills caches), and the launcher polls the heartbeat file's time, which a loaded disk may write late. 3 s plus
  the 0.5 s heartbeat interval calls a SIGSTOPped worker hung within about 4 s: inside the 10 s (or 25 steps) goal,
  and before TensorFlow's coordination service (10 s heartbeat timeout) aborts its healthy peers, which would blame
  the wrong task.
- The heartbeat interval: a task writes its heartbeat at once when it enters a phase of another kind, but at most
  every ``TFDIST_HEARTBEAT_INTERVAL`` while the kind stays the same, so a healthy run of steps may show a heartbeat
  one interval old plus one step: the interval is added, so the throttle never makes a hang.
- A process's first step waits ``--hang-timeout`` whatever was learned: it traces the step function, which a new
  process (a restart) does again, and no earlier step says how long that takes.
- What is learned is the highest p99 per phase, over every task and attempt of the job, kept in the run folder
  (``phases.json``) so that a restarted launcher of the same job (same command and job name) starts from it.
  Only finished phases are in the stats, so the phase that hangs never teaches itself a longer threshold.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from tfdist.protocol.records import HeartbeatRecord, Phase, PhaseStats
from tfdist.protocol.records import _phase_stats as read_phase_stats  # the one reader of untrusted phase stats

FACTOR = 5.0
FLOOR = 3.0  # seconds
DEFAULT_INTERVAL = 0.5  # TFDIST_HEARTBEAT_INTERVAL when it is not set (tfdist.runtime.reporting)
PHASES_FILE = "phases.json"
SCHEMA = "tfdist.phases"
SCHEMA_VERSION = 1

Learned = Mapping[Phase, PhaseStats]  # per phase: the highest p99, the longest, the most phases one task finished

# "no step for 2.1 s": what a phase that ran too long is called, and what its finished ones were.
_RUNNING = {Phase.STARTUP: "still starting (no first step) after", Phase.STEP: "no step for",
            Phase.BETWEEN: "between steps (callbacks, evaluation, saving) for", Phase.RESTORE: "restoring for"}
_FINISHED = {Phase.STARTUP: "start-ups", Phase.STEP: "steps", Phase.BETWEEN: "pauses between steps",
             Phase.RESTORE: "restores"}


@dataclass(frozen=True)
class Threshold:
    """How long a phase may run, and where that number came from (for the verdict)."""

    seconds: float
    source: str  # "steps took up to 71 ms (p99 62 ms)" or "not seen yet: --hang-timeout"
    learned: bool


def learn(learned: Learned, stats: Mapping[Phase, PhaseStats] | None) -> dict[Phase, PhaseStats]:
    """``learned`` with one task's ``phase_stats`` merged in: per phase the highest p99, longest and count."""
    merged = dict(learned)
    for phase, new in (stats or {}).items():
        old = merged.get(phase)
        merged[phase] = new if old is None else PhaseStats(n=max(old.n, new.n), p99=max(old.p99, new.p99),
                                                           max=max(old.max, new.max))
    return merged


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def threshold(phase: Phase | None, learned: Learned, *, ceiling: float, interval: float) -> Threshold:
    """The threshold of ``phase`` (None: the task does not say its phase) under ``ceiling`` (--hang-timeout, > 0)."""
    stats = learned.get(phase) if phase is not None else None
    if stats is None:
        why = "phase not seen yet" if phase is not None else "the task does not report its phase"
        return Threshold(ceiling, f"{why}: --hang-timeout", learned=False)
    seconds = max(FLOOR, FACTOR * stats.p99) + max(0.0, interval)
    source = (f"{_FINISHED[phase]} took up to {_duration(stats.max)} (p99 {_duration(stats.p99)}, "
              f"{stats.n} seen)")
    if seconds >= ceiling:
        return Threshold(ceiling, f"{source}; capped at --hang-timeout", learned=True)
    return Threshold(seconds, source, learned=True)


@dataclass(frozen=True)
class HangCall:
    """A task called hung: after how long (``threshold``), and why, in words (``reason``)."""

    threshold: Threshold
    reason: str  # "no step for 4.2 s; steps took up to 71 ms (p99 62 ms, 118 seen); threshold 3.8 s"


def hung(beat: HeartbeatRecord | None, silent_for: float, learned: Learned, *, ceiling: float,
         interval: float) -> HangCall | None:
    """Whether a task whose last heartbeat is ``beat``, written ``silent_for`` seconds ago, is hung; None while it is
    not (or the watchdog is off: ``ceiling`` <= 0; or its training finished: saving and evaluating send no beats)."""
    if ceiling <= 0 or (beat is not None and beat.finished):
        return None
    phase = beat.phase if beat is not None else None
    if beat is not None and phase is Phase.STEP and Phase.STEP not in (beat.phase_stats or {}):
        # This process has finished no step yet: its first traces the step function (seconds, minutes under XLA),
        # however short the steps of earlier attempts were.
        limit = Threshold(ceiling, "the first step of this process (it traces): --hang-timeout", learned=False)
    else:
        limit = threshold(phase, learned, ceiling=ceiling, interval=interval)
    if silent_for <= limit.seconds:
        return None
    running = _RUNNING[phase] if phase is not None else "no heartbeat for"
    return HangCall(limit, f"{running} {silent_for:.1f} s; {limit.source}; threshold {limit.seconds:.1f} s")


@dataclass(frozen=True)
class HangLimits:
    """What the hang rule of :func:`tfdist.launch.local.rules.decide` knows beyond ``--hang-timeout``: the learned
    phases and the tasks' heartbeat interval. The default learned nothing: every phase waits ``--hang-timeout``."""

    learned: Learned = field(default_factory=dict)
    interval: float = DEFAULT_INTERVAL

    def hung(self, beat: HeartbeatRecord | None, silent_for: float, *, ceiling: float) -> HangCall | None:
        return hung(beat, silent_for, self.learned, ceiling=ceiling, interval=self.interval)


def step_lag(learned: Learned, interval: float) -> int:
    """How many steps a heartbeat's step may lag the task's true step (a run of steps within one interval writes
    once): what two reports of the same hang may differ by."""
    stats = learned.get(Phase.STEP)
    if stats is None or interval <= 0:
        return 0
    return int(interval / stats.p99) + 1 if stats.p99 > 0 else 0


# -- the file in the run folder ---------------------------------------------------------------------------------------
def _job_key(command: tuple[str, ...], job_name: str) -> list[str]:
    return [job_name, *command]


def to_json(learned: Learned, *, command: tuple[str, ...], job_name: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "job": _job_key(command, job_name),
            "phases": {phase.value: {"n": s.n, "p99": s.p99, "max": s.max} for phase, s in learned.items()}}


def from_json(data: Any, *, command: tuple[str, ...], job_name: str) -> dict[Phase, PhaseStats]:
    """What a ``phases.json`` holds for this job; empty for another job's file, another schema, or bad data."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("schema_version") != SCHEMA_VERSION:
        return {}
    if data.get("job") != _job_key(command, job_name):
        return {}
    return read_phase_stats(data.get("phases")) or {}


def load(folder: str, *, command: tuple[str, ...], job_name: str) -> dict[Phase, PhaseStats]:
    """The learned phases of an earlier launch of this job in ``folder``; empty when there is none or it is bad."""
    try:
        with open(os.path.join(folder, PHASES_FILE), encoding="utf-8") as handle:
            data = json.loads(handle.read(1 << 16))
    except (OSError, ValueError):
        return {}
    return from_json(data, command=command, job_name=job_name)


def save(folder: str, learned: Learned, *, command: tuple[str, ...], job_name: str) -> bool:
    """Write ``learned`` atomically into ``folder``; False when it cannot (the watchdog goes on without)."""
    path = os.path.join(folder, PHASES_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(to_json(learned, command=command, job_name=job_name), handle)
        os.replace(tmp, path)
    except OSError:
        return False
    return True
