"""When an attempt's warm spares start: a pure rule over the group's snapshot and the attempt's pace. No processes,
no clock (the caller passes ``now``); table-tested in tests/unit/test_spare_timing.py.

A spare imports TensorFlow (and the script's libraries) while the attempt trains: about 4.7 CPU-seconds each on a
small machine, so two spares took 9 CPU-seconds from the short digits job's ``fit`` (3 epochs x 30 steps, 3.4 s
alone), making it 1.3-2.6x slower. They pay back only when a fault comes while they wait, so they are started only
when the attempt has enough training left for that to be worth it:

1. A task that says how far its training goes (``total_steps``: Keras ``fit`` with epochs x steps per epoch) is
   timed from the moment every training task had run steps (:class:`Pace`): once ``PACE_WINDOW`` has passed and
   the step moved, the steps left at the pace seen so far must take at least ``worth`` seconds
   (``Timeouts.spares_worth``, 20 s). A shorter attempt never starts spares; a fault in it restarts cold.
2. An attempt whose length is unknown (a custom loop, a dataset of unknown size) starts them as soon as every
   training task has run steps: its imports no longer compete with the group's start, restore and traced first step.
3. Tasks that send no heartbeats, or that are still starting after ``spares_after`` seconds (a long first compile),
   get them after ``spares_after``, as before.
"""
from __future__ import annotations

from dataclasses import dataclass

from tfdist.launch.local.snapshot import GroupSnapshot

PACE_WINDOW = 1.0  # seconds of steps before the pace is trusted (a few heartbeats at the default 0.5 s interval)


@dataclass(frozen=True)
class Pace:
    """When (the caller's clock) every training task of the attempt had first run steps, and the step then."""

    since: float
    step: int


def pace_of(previous: Pace | None, snapshot: GroupSnapshot, now: float) -> Pace | None:
    """The attempt's pace mark: kept once set, set at the first snapshot in which every trainer has run steps."""
    if previous is not None:
        return previous
    if snapshot.trainers_progressed and snapshot.step is not None:
        return Pace(since=now, step=snapshot.step)
    return None


def total_steps(snapshot: GroupSnapshot) -> int | None:
    """How far the training tasks' training goes (the largest ``total_steps`` they report), None when unknown."""
    totals = [t.heartbeat.total_steps for t in snapshot.beating
              if t.heartbeat is not None and t.heartbeat.total_steps is not None]
    return max(totals) if totals else None


def seconds_left(snapshot: GroupSnapshot, pace: Pace | None, now: float) -> float | None:
    """Training seconds left at the pace seen since ``pace``; None while unknown (no total, no pace yet, or no
    step since the mark)."""
    total, step = total_steps(snapshot), snapshot.step
    if total is None or step is None or pace is None or now - pace.since < PACE_WINDOW or step <= pace.step:
        return None
    steps_per_second = (step - pace.step) / (now - pace.since)
    return max(0, total - step) / steps_per_second


def spares_due(snapshot: GroupSnapshot, pace: Pace | None, now: float, *, spares_after: float, worth: float) -> bool:
    """Whether the attempt's warm spares should start now (the rules of this module, in order)."""
    if snapshot.trainers_progressed:
        if total_steps(snapshot) is None:
            return True
        left = seconds_left(snapshot, pace, now)
        return left is not None and left >= worth
    return snapshot.elapsed > spares_after
