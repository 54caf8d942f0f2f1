"""How an attempt ends, written once for the single-machine supervisor and a multi-machine agent's node group.

Ending an attempt is: read the tasks with the flight recorder while they still run (a hang, or a failure that left
peers waiting), let the tasks that may still finish on their own do so (after a success, or while a preempted group
saves), stop the rest (SIGTERM, or SIGKILL at once for a hung group on one machine; SIGKILL after the grace), wait for
their last output lines, and read the exit codes. :func:`ending_for` and :func:`stopping` (pure, table-tested in
tests/unit/test_attempt_ending.py) choose the steps; :func:`end_group` carries them out on a
:class:`~tfdist.launch.local.group.TaskGroup`; :func:`stopped_outcome` names how a stopped machine's share ended.

The two launchers differ where their situations differ, and the tables say so in one place: on one machine a
stop request cuts a success's wait short and a hung group is SIGKILLed at once (nothing can save); across machines
the workers of a successful round get the grace period as well (the leader may be on another machine and have
finished first), only "kill now" cuts a wait short (the agent obeys the rendezvous between rounds), and a round's
output is read to its end before the agent reports (what is unread when the agent exits is lost).
"""
from __future__ import annotations

import signal
import time
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Sequence

from tfdist.launch.flight import recorder as flight
from tfdist.launch.flight.recorder import others_running
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.rules import GroupAction, Verdict
from tfdist.launch.outcome import Cause, Outcome
from tfdist.launch.spec import Timeouts
from tfdist.protocol import PREEMPTED_EXIT_CODE

# How long a stopped group's output may take to be read to its end before a multi-machine agent goes on without it.
OUTPUT_DRAIN_S = 10.0
TRAINING_ROLES = ("chief", "worker")


class WaitCut(str, Enum):
    """What cuts the wait for tasks that may finish on their own short."""

    STOP_REQUEST = "stop-request"  # any stop request (the job is over anyway)
    KILL_NOW = "kill-now"  # only "kill now" (a second signal): a preempted group is saving


@dataclass(frozen=True)
class Ending:
    """The steps that end one attempt, in order: wait, stop, drain.

    Attributes:
        wait_roles: the tasks that may end on their own first (none: stop at once).
        wait_seconds: for up to this long.
        wait_cut: what cuts that wait short.
        grace: after ``first_signal``, how long the tasks get before SIGKILL.
        first_signal: SIGTERM (the runtime saves and exits 143), or SIGKILL (a hung group: nothing can save).
        drain: after the stop, how long the tasks' output may take to be read to its end.
        grace_if_untrained: the grace instead when, at the stop, no task has anything to save yet
            (:func:`~tfdist.launch.local.rules.nothing_to_save`); None: the same grace.
    """

    grace: float
    wait_roles: tuple[str, ...] = ()
    wait_seconds: float = 0.0
    wait_cut: WaitCut = WaitCut.STOP_REQUEST
    first_signal: int = signal.SIGTERM
    drain: float = 0.0
    grace_if_untrained: float | None = None

    def grace_for(self, *, nothing_to_save: bool) -> float:
        """The grace at the moment of the stop (whether anything is there to save is read then)."""
        return self.grace_if_untrained if nothing_to_save and self.grace_if_untrained is not None else self.grace


def stopping(timeouts: Timeouts, *, graceful: bool, drain: float = 0.0) -> Ending:
    """A stop from outside the group's rules (a stop request, a new round, the rendezvous, the job's end): the full
    grace for a coordinated save, else a short one (a peer failed or is gone: no collective can finish); short
    whenever nothing is there to save yet."""
    return Ending(grace=timeouts.grace if graceful else min(timeouts.failure_grace, timeouts.grace),
                  grace_if_untrained=timeouts.untrained_grace, drain=drain)


def finishing_roles(*, ps: bool, across_machines: bool) -> tuple[str, ...]:
    """The tasks that may end on their own after a success (waited for before the stop). An evaluator may be scoring
    the final model. Under ParameterServerStrategy the workers and parameter servers serve until stopped; on one
    machine the chief, the leader, has exited already (across machines it may be this machine's, still finishing)."""
    if ps:
        return ("chief", "evaluator") if across_machines else ("evaluator",)
    return ("chief", "worker", "evaluator")


def ending_for(verdict: Verdict, timeouts: Timeouts, *, ps: bool = False, across_machines: bool = False) -> Ending:
    """The steps that end an attempt the rules ended (``verdict.action`` is not CONTINUE).

    ``ps``: a ParameterServerStrategy job (its workers serve until stopped, like the parameter servers).
    ``across_machines``: a node group of a multi-machine job (see the module docstring for the differences).
    """
    if across_machines:
        drain = OUTPUT_DRAIN_S
        if verdict.action is GroupAction.SUCCEED:  # the others finish their last step, then print and exit
            return replace(stopping(timeouts, graceful=False, drain=drain),
                           wait_roles=finishing_roles(ps=ps, across_machines=True),
                           wait_seconds=timeouts.after_success + timeouts.grace, wait_cut=WaitCut.KILL_NOW)
        if verdict.action is GroupAction.PREEMPTED:  # the others are saving too
            return replace(stopping(timeouts, graceful=True, drain=drain), wait_roles=("worker",),
                           wait_seconds=timeouts.grace, wait_cut=WaitCut.KILL_NOW)
        return stopping(timeouts, graceful=False, drain=drain)
    if verdict.action is GroupAction.SUCCEED:
        return Ending(grace=min(timeouts.after_success_grace, timeouts.grace),
                      wait_roles=finishing_roles(ps=ps, across_machines=False), wait_seconds=timeouts.after_success)
    if verdict.action is GroupAction.PREEMPTED:
        return Ending(grace=timeouts.grace, wait_roles=TRAINING_ROLES, wait_seconds=timeouts.grace,
                      wait_cut=WaitCut.KILL_NOW)
    if verdict.cause is Cause.HUNG:
        return Ending(grace=timeouts.grace, first_signal=signal.SIGKILL)
    return Ending(grace=min(timeouts.failure_grace, timeouts.grace))


def wants_flight_record(verdict: Verdict, *, others_running: bool) -> bool:
    """Read every task's stacks before the stop: a hang, or a failure that left training peers waiting on it."""
    return verdict.cause is Cause.HUNG or (verdict.cause is Cause.TASK_FAILED and others_running)


def stopped_outcome(exit_codes: Sequence[int | None]) -> Outcome:
    """How a stopped machine's share ended: ``preempted`` when every task saved (143) or had finished (0)."""
    codes = list(exit_codes)
    return Outcome.PREEMPTED if codes and all(c in (PREEMPTED_EXIT_CODE, 0) for c in codes) else Outcome.STOPPED


# -- the mechanism -----------------------------------------------------------------------------------------------
def record_flight(group: TaskGroup, verdict: Verdict, *, run_id: str, folder: str | None,
                  others_elsewhere: bool = False) -> tuple[flight.HangReport, str | None] | None:
    """The flight recorder on ``group`` when :func:`wants_flight_record`, before anything is stopped, else None.
    ``others_elsewhere``: training peers run on other machines (a multi-machine round): any failure may leave them
    waiting."""
    if not wants_flight_record(verdict, others_running=others_elsewhere or others_running(group)):
        return None
    return flight.record(flight.targets_of(group), run_id=run_id, attempt=group.attempt, folder=folder,
                         reason=flight.HANG if verdict.cause is Cause.HUNG else flight.TASK_FAILED,
                         watchdog_task=verdict.culprit)


def end_group(group: TaskGroup, ending: Ending, *, poll: float, stop_requested: Callable[[], bool] = lambda: False,
              kill_now: Callable[[], bool] = lambda: False,
              nothing_to_save: Callable[[], bool] = lambda: False) -> list[int | None]:
    """Carry out ``ending`` on ``group``; returns every task's exit code (all have exited).

    ``stop_requested`` / ``kill_now``: a stop was asked for / "kill now" (a second signal); ``nothing_to_save``: read
    at the stop, chooses ``ending.grace_if_untrained``."""
    if ending.wait_roles and ending.wait_seconds > 0:
        cut = stop_requested if ending.wait_cut is WaitCut.STOP_REQUEST else kill_now
        group.wait_for(ending.wait_roles, ending.wait_seconds, poll=poll, interrupted=cut)
    group.stop(ending.grace_for(nothing_to_save=nothing_to_save()), first_signal=ending.first_signal,
               kill_now=kill_now)
    if ending.drain > 0:
        # Every task has exited: its output is relayed once its pipes are drained. stop() waits 2 s per pump; a
        # loaded machine may need longer.
        deadline = time.monotonic() + ending.drain
        for pump in (pump for proc in group.procs for pump in proc.pumps):
            pump.join(timeout=max(0.0, deadline - time.monotonic()))
    return [proc.poll() for proc in group.procs]
