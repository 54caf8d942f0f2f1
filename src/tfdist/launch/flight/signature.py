"""What makes two hangs the same hang: the same stalled task, at the same step, in the same innermost frames (when
the flight recorder read its stacks both times). A hang that repeats so is deterministic ("a deterministic hang
would usually just hang again", as Ray Train's hang detector puts it): the restart policy stops the job instead of
retrying it to the end of the budget. Pure functions; table-tested in tests/unit/test_flight_signature.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tfdist.launch.flight.classify import main_thread
from tfdist.launch.flight.evidence import TaskEvidence

INNERMOST = 3  # frames compared: where the task waits and the two calls that led there


@dataclass(frozen=True)
class HangSignature:
    """One hang: the task the watchdog or the flight recorder named, its last heartbeat step, and the innermost
    frames of its main thread (``file:line function``; empty when no stacks were read)."""

    task: str
    step: int | None
    frames: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        """``worker:1 at step 42, in hang_job.py:88 `on_train_batch_end```"""
        at = f"at step {self.step}" if self.step is not None else "before its first step"
        where = f", in {self.frames[0]}" if self.frames else ""
        return f"{self.task} {at}{where}"


def signature_of(task: str, tasks: Sequence[TaskEvidence], *,
                 step: int | None = None) -> HangSignature:
    """The signature of a hang whose stalled task is ``task``, from the flight recorder's evidence (``tasks``; may
    be empty: ``step`` is then the watchdog's)."""
    seen = next((t for t in tasks if t.name == task), None)
    if seen is None:
        return HangSignature(task, step)
    main = main_thread(seen.threads)
    frames = tuple(f"{f.where} `{f.function}`" for f in (main.frames[:INNERMOST] if main else ()))
    return HangSignature(task, seen.step if seen.step is not None else step, frames)


def same_hang(before: HangSignature | None, after: HangSignature | None, *, step_lag: int = 0) -> bool:
    """Whether two hangs are the same. Steps come from heartbeats, which may lag the true step by ``step_lag``
    steps (:func:`tfdist.launch.flight.thresholds.step_lag`); frames are compared when both hangs have them, and
    are required when neither knows a step (a hang before the first step)."""
    if before is None or after is None or before.task != after.task:
        return False
    if before.frames and after.frames and before.frames != after.frames:
        return False
    if before.step is None or after.step is None:
        return before.step is None and after.step is None and bool(before.frames) and bool(after.frames)
    return abs(before.step - after.step) <= step_lag
