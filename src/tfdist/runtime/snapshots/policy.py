"""Pure rules: which state a restarted group resumes from, how often to snapshot, whether a snapshot fits.

Table-tested in tests/unit/test_snapshot_policy.py; no TensorFlow, no files.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Sequence

SNAPSHOT, CHECKPOINT, SCRATCH = "snapshot", "checkpoint", "scratch"
# A file being written sits beside the two kept ones.
FILES_AT_ONCE = 3


@dataclass(frozen=True)
class Resume:
    """Where a restarted group resumes: ``source`` is snapshot, checkpoint or scratch."""

    source: str
    step: int

    def describe(self) -> str:
        if self.source == SCRATCH:
            return "tfdist: resume: from scratch (no snapshot or checkpoint)"
        return f"tfdist: resume: from {self.source} at step {self.step}"


def choose_resume(loadable: Sequence[Sequence[int]], checkpoint_step: int) -> Resume:
    """The newest state every replica can load.

    Args:
        loadable: per replica, the snapshot steps it verified whole (any order).
        checkpoint_step: the step the durable checkpoint restored (0: none); every replica reads the same one.

    A snapshot wins only when every replica has it and it is newer than the checkpoint: a step one replica lacks
    would leave the replicas on different steps (mixed), so it is never chosen.
    """
    common = set(loadable[0]) if loadable else set()
    for steps in loadable[1:]:
        common &= set(steps)
    best = max(common, default=-1)
    if best > checkpoint_step:
        return Resume(SNAPSHOT, best)
    if checkpoint_step > 0:
        return Resume(CHECKPOINT, checkpoint_step)
    return Resume(SCRATCH, 0)


def fits(snapshot_bytes: int, free_bytes: int) -> bool:
    """Whether the shared memory holds the kept snapshots and the one being written."""
    return FILES_AT_ONCE * snapshot_bytes <= free_bytes


def refusal(snapshot_bytes: int, free_bytes: int, where: str) -> str:
    return (f"tfdist: snapshots off: one snapshot takes {mib(snapshot_bytes)} and {FILES_AT_ONCE} must fit in {where}, "
            f"which has {mib(free_bytes)} free (free shared memory, or set TFDIST_SNAPSHOTS=0 to silence this)")


def mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


class Cadence:
    """Snapshot every ``every`` steps: fixed, or (``fixed=None``) the smallest interval whose host copy stays within
    ``budget`` of the step time, from the medians of recent measurements.

    The copy's cost is what the training thread waits for (the write into shared memory is in the background); a
    step's time is measured without the copy in it. An automatic cadence also keeps its whole cost within the budget:
    the start-up (the resume's agreement, claiming the folder) and every copy so far, against all the step time so
    far, so a copy is due only once training has paid for what snapshots already cost (``spent <= budget *
    trained``). That spaces out the first copies, taken before the interval is learnt, and puts the first one
    ``startup / budget`` seconds of training in. A fixed interval is the user's choice and is kept as given.
    """

    WINDOW = 32

    def __init__(self, fixed: int | None = None, budget: float = 0.02, max_every: int = 1000) -> None:
        self.fixed = fixed
        self.budget = budget
        self.max_every = max_every
        self.every = fixed or 1
        self.spent = 0.0  # training-thread seconds snapshots cost so far (start-up and copies)
        self.trained = 0.0  # step seconds seen so far
        self.startup = 0.0
        self.copies = 0
        self._copies: deque[float] = deque(maxlen=self.WINDOW)
        self._steps: deque[float] = deque(maxlen=self.WINDOW)

    def due(self, steps_since_last: int) -> bool:
        if steps_since_last < self.every:
            return False
        return self.fixed is not None or self.spent <= self.budget * self.trained

    def startup_took(self, seconds: float) -> None:
        self.startup += seconds
        self.spent += seconds

    def step_took(self, seconds: float) -> None:
        self._steps.append(seconds)
        self.trained += seconds
        self._update()

    def copy_took(self, seconds: float) -> None:
        self._copies.append(seconds)
        self.copies += 1
        self.spent += seconds
        self._update()

    def breakdown(self) -> str:
        """One line: what snapshots cost the training thread, against the step time it was measured on."""
        share = f" ({self.spent / self.trained:.1%})" if self.trained > 0 else ""
        copies = self.spent - self.startup
        each = f", {copies / self.copies * 1e3:.1f} ms each" if self.copies else ""
        every = f"every {self.every} step(s)" + (" (fixed)" if self.fixed is not None else "")
        return (f"tfdist: snapshots cost {self.spent:.3f}s of {self.trained:.3f}s of steps{share}: start-up "
                f"{self.startup:.3f}s, {self.copies} copies {copies:.3f}s{each}; {every}")

    def _update(self) -> None:
        if self.fixed is not None or len(self._copies) < 3 or len(self._steps) < 3:
            return  # measure the first copies before deciding
        self.every = interval_for(statistics.median(self._copies), statistics.median(self._steps), self.budget,
                                  self.max_every)


def interval_for(copy_seconds: float, step_seconds: float, budget: float, max_every: int = 1000) -> int:
    """The smallest N with ``copy / (N * step) <= budget``, within [1, max_every]."""
    if copy_seconds <= 0:
        return 1
    if step_seconds <= 0:
        return max_every
    return max(1, min(max_every, math.ceil(copy_seconds / (budget * step_seconds) - 1e-9)))
