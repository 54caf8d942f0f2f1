"""What the restart rules compare between attempts beyond :class:`~tfdist.launch.outcome.Attempt`: the signature of
each attempt's hang (:mod:`tfdist.launch.flight.signature`) and whether a training step advanced in it. Thin
bookkeeping for the supervisor; the rules are :func:`~tfdist.launch.flight.signature.same_hang` and
:class:`~tfdist.launch.local.restart.RestartPolicy` (pure)."""
from __future__ import annotations

from tfdist.launch.flight.report import HangReport
from tfdist.launch.flight.signature import HangSignature, same_hang, signature_of
from tfdist.launch.local.rules import Verdict
from tfdist.launch.local.snapshot import GroupSnapshot
from tfdist.launch.outcome import Cause


class AttemptMemory:
    def __init__(self) -> None:
        self.hangs: dict[int, HangSignature] = {}
        self.progress: dict[int, bool] = {}
        self.heartbeats_seen = False  # some attempt's training task sent a heartbeat: progress can be judged

    def hung(self, attempt: int, verdict: Verdict, report: HangReport | None, snapshot: GroupSnapshot | None) -> None:
        """When ``verdict`` ended ``attempt`` as hung: its signature names the flight recorder's culprit (else the
        watchdog's task), with the recorder's stacks when there is a ``report``, and the step of the watchdog's last
        ``snapshot``."""
        if verdict.cause is not Cause.HUNG or verdict.culprit is None or snapshot is None:
            return
        stalled = (report.verdict.culprit if report is not None else None) or verdict.culprit
        view = next((t for t in snapshot.tasks if t.name == stalled), None)
        step = view.heartbeat.step if view is not None and view.heartbeat is not None else None
        self.hangs[attempt] = signature_of(stalled, report.tasks if report is not None else (), step=step)

    def ended(self, attempt: int, snapshot: GroupSnapshot) -> None:
        """Whether a training step advanced in ``attempt`` (its last snapshot, every task exited)."""
        trainers = snapshot.beating
        self.heartbeats_seen = self.heartbeats_seen or any(t.heartbeat is not None for t in trainers)
        self.progress[attempt] = any(t.progressed for t in trainers)

    def progressed(self, attempt: int) -> bool | None:
        """None for the first attempt (not a restart) and for a job that never sent a heartbeat (unknown)."""
        if attempt == 0 or not self.heartbeats_seen:
            return None
        return self.progress.get(attempt)

    def restart_facts(self, attempt: int, step_lag: int) -> dict[str, object]:
        """What :meth:`RestartPolicy.after <tfdist.launch.local.restart.RestartPolicy.after>` takes from here."""
        return {"repeated_hang": self.repeated_hang(attempt, step_lag=step_lag),
                "progressed": self.progressed(attempt)}

    def repeated_hang(self, attempt: int, *, step_lag: int) -> str | None:
        """The hang in words when ``attempt`` hung as the attempt before it did; else None."""
        before, after = self.hangs.get(attempt - 1), self.hangs.get(attempt)
        return after.words if after is not None and same_hang(before, after, step_lag=step_lag) else None
