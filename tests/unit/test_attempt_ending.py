"""The attempt-ending rules shared by the single-machine supervisor and a multi-machine node group
(tfdist.launch.local.ending), table-tested without processes."""
from __future__ import annotations

import signal

import pytest

from tfdist.launch.local.ending import (OUTPUT_DRAIN_S, Ending, WaitCut, ending_for, stopped_outcome, stopping,
                                        wants_flight_record)
from tfdist.launch.local.rules import GroupAction, Verdict
from tfdist.launch.outcome import Cause, Outcome
from tfdist.launch.spec import Timeouts

T = Timeouts(grace=30.0, failure_grace=0.1, untrained_grace=1.0, after_success=10.0, after_success_grace=2.0)
SUCCEED = Verdict(GroupAction.SUCCEED, Cause.SUCCEEDED, "worker:0")
PREEMPTED = Verdict(GroupAction.PREEMPTED, Cause.TASK_PREEMPTED, "worker:1")
HUNG = Verdict(GroupAction.FAIL, Cause.HUNG, "worker:1", detail="no heartbeat for 60s")
FAILED = Verdict(GroupAction.FAIL, Cause.TASK_FAILED, "worker:1")
START_FAILED = Verdict(GroupAction.FAIL, Cause.START_FAILED, "worker:0")
PORT = Verdict(GroupAction.FAIL, Cause.PORT_CONFLICT, "worker:0")
UNTRAINED = 1.0

ONE_MACHINE = [
    # verdict, ps job, the expected steps
    (SUCCEED, False, Ending(grace=2.0, wait_roles=("chief", "worker", "evaluator"), wait_seconds=10.0)),
    (SUCCEED, True, Ending(grace=2.0, wait_roles=("evaluator",), wait_seconds=10.0)),
    (PREEMPTED, False, Ending(grace=30.0, wait_roles=("chief", "worker"), wait_seconds=30.0,
                              wait_cut=WaitCut.KILL_NOW)),
    (HUNG, False, Ending(grace=30.0, first_signal=signal.SIGKILL)),
    (FAILED, False, Ending(grace=0.1)),
    (START_FAILED, False, Ending(grace=0.1)),
    (PORT, True, Ending(grace=0.1)),
]


@pytest.mark.parametrize("verdict,ps,expected", ONE_MACHINE)
def test_one_machine(verdict, ps, expected):
    assert ending_for(verdict, T, ps=ps) == expected


ACROSS_MACHINES = [
    # after a success: after_success for the last step plus the grace to print and exit, then a short stop
    (SUCCEED, False, Ending(grace=0.1, wait_roles=("chief", "worker", "evaluator"), wait_seconds=40.0,
                            wait_cut=WaitCut.KILL_NOW, drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
    # under ParameterServerStrategy the workers and parameter servers serve until stopped
    (SUCCEED, True, Ending(grace=0.1, wait_roles=("chief", "evaluator"), wait_seconds=40.0,
                           wait_cut=WaitCut.KILL_NOW, drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
    (PREEMPTED, None, Ending(grace=30.0, wait_roles=("worker",), wait_seconds=30.0, wait_cut=WaitCut.KILL_NOW,
                             drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
    # a hung machine is stopped like a failed one: SIGTERM and a short grace (its peers elsewhere decide the rest)
    (HUNG, None, Ending(grace=0.1, drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
    (FAILED, None, Ending(grace=0.1, drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
    (START_FAILED, None, Ending(grace=0.1, drain=OUTPUT_DRAIN_S, grace_if_untrained=UNTRAINED)),
]


@pytest.mark.parametrize("verdict,ps,expected", ACROSS_MACHINES)
def test_across_machines(verdict, ps, expected):
    for job_has_ps in ((False, True) if ps is None else (ps,)):  # None: the same with or without parameter servers
        assert ending_for(verdict, T, across_machines=True, ps=job_has_ps) == expected


@pytest.mark.parametrize("graceful,nothing_to_save,grace", [
    (True, False, 30.0), (False, False, 0.1), (True, True, UNTRAINED), (False, True, UNTRAINED)])
def test_a_stop_from_outside(graceful, nothing_to_save, grace):
    ending = stopping(T, graceful=graceful, drain=3.0)
    assert ending.grace_for(nothing_to_save=nothing_to_save) == grace
    assert (ending.wait_roles, ending.first_signal, ending.drain) == ((), signal.SIGTERM, 3.0)


def test_a_short_grace_period_bounds_the_failure_grace():
    assert stopping(Timeouts(grace=0.05, failure_grace=0.1), graceful=False).grace == 0.05
    assert ending_for(FAILED, Timeouts(grace=0.05, failure_grace=0.1)).grace == 0.05
    assert ending_for(SUCCEED, Timeouts(grace=1.0, after_success_grace=2.0)).grace == 1.0


def test_an_ending_without_an_untrained_grace_keeps_its_grace():
    assert Ending(grace=5.0).grace_for(nothing_to_save=True) == 5.0


@pytest.mark.parametrize("verdict,others_running,wanted", [
    (HUNG, False, True), (HUNG, True, True), (FAILED, True, True), (FAILED, False, False),
    (START_FAILED, True, False), (PORT, True, False), (SUCCEED, True, False), (PREEMPTED, True, False)])
def test_when_the_flight_recorder_reads_the_tasks(verdict, others_running, wanted):
    assert wants_flight_record(verdict, others_running=others_running) is wanted


@pytest.mark.parametrize("codes,outcome", [
    ([143, 143], Outcome.PREEMPTED), ([0, 143], Outcome.PREEMPTED), ([0], Outcome.PREEMPTED),
    ([143, -9], Outcome.STOPPED), ([1], Outcome.STOPPED), ([], Outcome.STOPPED), ([None], Outcome.STOPPED)])
def test_how_a_stopped_machine_share_ended(codes, outcome):
    assert stopped_outcome(codes) is outcome
