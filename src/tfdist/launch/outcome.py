"""What happened in a launch, as data: each attempt's cause, and the root cause of a failure."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from enum import Enum

from tfdist.launch.clues import FailureSite, failure_site
from tfdist.protocol import ErrorRecord
from tfdist.status import ExitStatus


class Cause(str, Enum):
    """Why an attempt ended."""

    SUCCEEDED = "succeeded"
    TASK_FAILED = "task-failed"  # a task exited non-zero or was killed by a signal
    HUNG = "hung"  # a task stopped sending heartbeats
    PORT_CONFLICT = "port-conflict"  # a task could not bind its port: retried with fresh ports
    PREEMPTED = "preempted"  # the launcher was asked to stop (SIGTERM)
    TASK_PREEMPTED = "task-preempted"  # a task got SIGTERM, the group saved and exited 143: restart, not a failure
    INTERRUPTED = "interrupted"  # Ctrl-C
    START_FAILED = "start-failed"  # the program could not be started at all


class Outcome(str, Enum):
    """How one machine's share of a round ended, as its agent reports it to the rendezvous (the wire carries the
    value: ``messages.OUTCOMES``)."""

    SUCCEEDED = "succeeded"  # the workers here exited 0
    FAILED = "failed"  # a worker here failed or hung: the round stops at once
    PREEMPTED = "preempted"  # the workers here saved and exited (143) or had finished: a graceful stop
    STOPPED = "stopped"  # stopped before they could all save


class RunState(str, Enum):
    """Where a launch is now (the live view's header); once it is over, its :class:`Cause` says how it ended."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"  # the attempt ended or a stop was asked for: the tasks are being stopped
    RESTARTING = "restarting"  # between attempts (the back-off)
    FINISHING = "finishing"  # across machines: the job is over, this machine's tasks may still end on their own


def describe_exit(code: int | None) -> str:
    """``exit code 1`` or ``killed by SIGKILL`` (Popen reports death by signal as a negative code)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass(frozen=True)
class TaskFailure:
    """The task an attempt's failure started with."""

    task: str
    pid: int
    exit_code: int | None
    log_path: str
    stderr_tail: tuple[str, ...] = ()
    error: ErrorRecord | None = None  # the runtime's error record, when the script raised
    start_error: str | None = None  # it could not be started at all: the program and the reason

    @property
    def headline(self) -> str:
        if self.start_error:
            return f"{self.task} {self.start_error}"
        text = f"{self.task} (pid {self.pid}) {describe_exit(self.exit_code)}"
        if self.error:
            text += f": {self.error.type}: {self.error.message}"
        return text

    @property
    def traceback(self) -> str:
        if self.error and self.error.traceback:
            return self.error.traceback
        return "".join(self.stderr_tail)

    @property
    def site(self) -> FailureSite | None:
        """Where the script raised and what (from its error record, else its stderr), when that can be told."""
        return failure_site(self.traceback)


@dataclass(frozen=True)
class Attempt:
    """One start of the whole group."""

    number: int  # 0 for the first start
    cause: Cause
    duration_s: float
    failure: TaskFailure | None = None
    step_reached: int | None = None
    detail: str = ""
    transient: bool = False  # failed the way a machine short of threads or processes does: worth a retry
    hang_report: str = ""  # the flight recorder's report, written before the group was stopped
    hang_verdict: tuple[str, ...] = ()  # its verdict: which task stopped first and where, then the others
    after_training: bool = False  # failed once every training task's training (fit) had finished


@dataclass
class LaunchResult:
    """All attempts of a launch and how it ended."""

    run_id: str
    log_dir: str
    attempts: list[Attempt] = field(default_factory=list)
    stopped_by: Cause | None = None  # PREEMPTED or INTERRUPTED when a stop came between attempts (the back-off)

    @property
    def final(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def cause(self) -> Cause | None:
        """How the launch ended."""
        if self.stopped_by is not None:
            return self.stopped_by
        return self.final.cause if self.final else None

    @property
    def succeeded(self) -> bool:
        return self.cause is Cause.SUCCEEDED

    @property
    def exit_status(self) -> ExitStatus:
        return {Cause.SUCCEEDED: ExitStatus.SUCCESS, Cause.PREEMPTED: ExitStatus.PREEMPTED,
                Cause.INTERRUPTED: ExitStatus.CTRL_C}.get(self.cause, ExitStatus.TASK_FAILED)  # type: ignore[arg-type]

    @property
    def restarts(self) -> int:
        return max(0, len(self.attempts) - 1)


def repeated_failure(attempts: list[Attempt]) -> str | None:
    """``ZeroDivisionError at train.py:63`` when the last two attempts failed with the same exception at the same
    ``file:line`` (a deterministic failure: another restart would fail the same way); else None."""
    if len(attempts) < 2:
        return None
    previous, last = attempts[-2], attempts[-1]
    if Cause.TASK_FAILED not in (previous.cause, last.cause) or previous.cause is not last.cause:
        return None
    sites = [a.failure.site if a.failure else None for a in (previous, last)]
    if sites[0] is None or sites[0] != sites[1]:
        return None
    return f"{sites[1].exception} at {sites[1].where}"  # type: ignore[union-attr]


def render_report(result: LaunchResult) -> str:
    """The root-cause report printed last when a launch did not succeed (plain text, paste-friendly)."""
    lines = [f"tfdist: job {result.run_id} did not succeed after {len(result.attempts)} attempt(s); "
             f"logs in {result.log_dir}", "attempts:"]
    for attempt in result.attempts:
        who = ""
        if attempt.failure is not None:
            who = f" {attempt.failure.task}: " + (attempt.failure.start_error or describe_exit(attempt.failure.exit_code))
        step = f", step {attempt.step_reached}" if attempt.step_reached is not None else ""
        detail = f" ({attempt.detail})" if attempt.detail else ""
        if attempt.transient:
            detail += " (looked transient" + (", retried)" if attempt is not result.final else ")")
        lines.append(f"  #{attempt.number}: {attempt.cause.value}{who}{detail}, {attempt.duration_s:.1f}s{step}")
    final = result.final
    if final is not None and final.hang_report:
        lines.append(f"flight recorder (attempt #{final.number}): " + "\n  ".join(final.hang_verdict))
        lines.append(f"  stacks, steps and output of every task: {final.hang_report}")
    if final is not None and final.failure is not None:
        failure = final.failure
        lines.append(f"root cause (attempt #{final.number}): {failure.headline}")
        site = failure.site
        if final.after_training:
            where = f", in {site.where}" if site else ""
            lines.append(f"  {failure.task} failed after training finished{where}")
        lines.append(f"  log: {failure.log_path}")
        tb = failure.traceback.rstrip()
        if tb:
            lines.append("  last lines of its stderr:" if not failure.error else "  traceback:")
            lines.extend("    " + line for line in tb.splitlines()[-25:])
    return os.linesep.join(lines)


def render_success(result: LaunchResult, *, headline: bool = True) -> str:
    """The closing line of a successful launch (``headline``: False where the live view printed its own summary),
    naming attempts that failed in a way that looked transient."""
    lines = [f"tfdist: job {result.run_id} succeeded after {result.restarts} restart(s)"] if headline else []
    for attempt in (a for a in result.attempts if a.transient):
        who = attempt.failure.headline if attempt.failure else attempt.cause.value
        lines.append(f"tfdist: attempt #{attempt.number} failed in a way that looked transient ({who}); retried")
    return os.linesep.join(lines)
