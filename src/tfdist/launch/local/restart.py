"""Whether, and when, a group that ended is started again: a pure policy with the clock passed in.

- ``task-preempted`` (a task saved and exited 143) restarts at once without using the budget, up to
  ``max_preemptions``.
- ``port-conflict`` (a task lost its port to another program between our check and its bind) restarts at once on
  fresh ports, up to ``max_port_retries``, then counts as a failure. With fixed ports (--port-base) a retry would
  collide again: it is a failure at once.
- Any other failure uses the budget: at most ``max_restarts`` within ``window`` seconds (0: ever), after a back-off
  that starts at ``backoff`` and doubles with each restart that still counts (within ``window``), capped at
  ``backoff_max``: a job that ran well for longer than the window starts again from ``backoff``.
- A failure after training finished (every training task's ``fit`` had returned) does not restart unless allowed
  (``--restart-after-training``): a restart would train everything again.
- The same exception at the same ``file:line`` in two attempts in a row is deterministic: no more restarts. So is
  the same hang in two attempts in a row (same stalled task, step and innermost frames,
  :func:`tfdist.launch.flight.signature.same_hang`): a deterministic hang would just hang again.
- Restarts whose attempt made no progress (no training step advanced) are counted apart: ``max_no_progress`` of
  them in a row (3, as NVIDIA's ``ft_launcher``) stop the job, whatever is left of the budget. Only for a job
  whose tasks send heartbeats: without them progress is unknown and not counted.
- Success, a stop asked for (SIGTERM/SIGINT) and a program that cannot start never restart.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tfdist.launch.outcome import Cause

FINAL_CAUSES = frozenset({Cause.SUCCEEDED, Cause.PREEMPTED, Cause.INTERRUPTED, Cause.START_FAILED})


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay: float = 0.0
    counted: bool = False  # used the restart budget
    message: str = ""


def _recent(history: list[float], now: float, window: float) -> list[float]:
    """The restarts of ``history`` that count against the budget at ``now`` (all of them when ``window`` is 0)."""
    return [t for t in history if window <= 0 or now - t < window]


def _backoff(base: float, cap: float, doublings: int) -> float:
    """The wait before a restart: ``base`` doubled ``doublings`` times, at most ``cap``; none when ``base`` is 0."""
    return 0.0 if base <= 0 else min(cap, base * 2 ** doublings)


@dataclass
class RestartPolicy:
    max_restarts: int = 0
    window: float = 0.0
    backoff: float = 0.0
    backoff_max: float = 30.0
    max_preemptions: int = 20
    max_port_retries: int = 2
    max_no_progress: int = 3
    fixed_ports: bool = False
    restarts: list[float] = field(default_factory=list)  # when each counted restart happened
    preemptions: int = 0
    port_retries: int = 0
    no_progress: int = 0  # restarts in a row whose attempt advanced no step

    def after(self, cause: Cause, now: float, *, transient: bool = False, after_training: str | None = None,
              repeated: str | None = None, repeated_hang: str | None = None,
              progressed: bool | None = None) -> RestartDecision:
        """What to do after an attempt ended with ``cause`` at time ``now``; records the restart it allows.

        ``after_training``: the attempt failed after training finished (the failure's ``task ... in file:line``);
        ``repeated``: it failed exactly as the attempt before (the exception and its ``file:line``);
        ``repeated_hang``: it hung exactly as the attempt before (the hang in words);
        ``progressed``: whether a training step advanced in it, None when unknown (no heartbeats, the first
        attempt)."""
        if cause in FINAL_CAUSES:
            return RestartDecision(False)
        if after_training is not None:
            return RestartDecision(False, message=f"{after_training}, after training finished: not restarting, which "
                                                  "would train again (--restart-after-training to do it)")
        if cause is Cause.TASK_PREEMPTED and self.preemptions < self.max_preemptions:
            self.preemptions += 1
            return RestartDecision(True, message="restarting the preempted group from its checkpoint (not counted as "
                                                 "a failure)")
        if cause is Cause.PORT_CONFLICT and not self.fixed_ports and self.port_retries < self.max_port_retries:
            self.port_retries += 1
            return RestartDecision(True, message="a task lost its port to another program: retrying with fresh "
                                                 f"ports ({self.port_retries}/{self.max_port_retries})")
        recent = _recent(self.restarts, now, self.window)
        if len(recent) >= self.max_restarts:
            return RestartDecision(False)
        if repeated is not None and cause is Cause.TASK_FAILED:
            return RestartDecision(False, message=f"the same {repeated} in two attempts in a row: a deterministic "
                                                  "failure, not restarting")
        if repeated_hang is not None and cause is Cause.HUNG:
            return RestartDecision(False, message=f"the same hang ({repeated_hang}) in two attempts in a row: a "
                                                  "deterministic hang would hang again, not restarting")
        if progressed is not None:
            self.no_progress = 0 if progressed else self.no_progress + 1
        if self.no_progress >= self.max_no_progress > 0:
            return RestartDecision(False, message=f"{self.no_progress} restarts in a row made no progress (no "
                                                  "training step advanced): not restarting")
        self.restarts.append(now)
        delay = _backoff(self.backoff, self.backoff_max, len(recent))  # the restarts that still count, as a task's
        why = "the failure looked transient; " if transient else ""
        stalled = f", {self.no_progress} in a row without progress" if self.no_progress else ""
        return RestartDecision(True, delay=delay, counted=True,
                               message=f"{why}restarting the group ({len(recent) + 1}/{self.max_restarts}{stalled})"
                                       + (f" in {delay:.1f}s" if delay else ""))


@dataclass
class TaskRestartPolicy:
    """Whether, and when, one task restarted alone (a ParameterServerStrategy worker, see ``rules.tolerated_alone``)
    is started again: each task has its own budget (``max_restarts`` within ``window``) and its own doubling back-off,
    so one flapping worker cannot use up another's. A task that saved and exited 143 (preempted) restarts at once,
    not counted, up to ``max_preemptions``. A task whose budget is spent is refused: the caller then ends the attempt
    as any other failure, and the group's own :class:`RestartPolicy` decides."""

    max_restarts: int = 0
    window: float = 0.0
    backoff: float = 0.0
    backoff_max: float = 30.0
    max_preemptions: int = 20
    restarts: dict[str, list[float]] = field(default_factory=dict)  # per task: when each counted restart happened
    preemptions: dict[str, int] = field(default_factory=dict)

    def after(self, task: str, now: float, *, preempted: bool = False) -> RestartDecision:
        """What to do after ``task`` exited abnormally at time ``now`` (``preempted``: it exited 143); records the
        restart it allows."""
        if preempted and self.preemptions.get(task, 0) < self.max_preemptions:
            self.preemptions[task] = self.preemptions.get(task, 0) + 1
            return RestartDecision(True, message=f"restarting {task} alone, in place (preempted: not counted as a "
                                                 "failure); the other tasks keep running")
        history = self.restarts.setdefault(task, [])
        recent = _recent(history, now, self.window)
        if len(recent) >= self.max_restarts:
            return RestartDecision(False, message=f"{task} used its {self.max_restarts} restart(s)"
                                                  + (f" within {self.window:g}s" if self.window > 0 else ""))
        history.append(now)
        delay = _backoff(self.backoff, self.backoff_max, len(recent))
        return RestartDecision(True, delay=delay, counted=True,
                               message=f"restarting {task} alone, in place ({len(recent) + 1}/{self.max_restarts})"
                                       + (f" in {delay:.1f}s" if delay else "") + "; the other tasks keep running")
