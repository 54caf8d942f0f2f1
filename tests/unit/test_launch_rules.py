"""The group rules and the restart rules as tables: snapshots in, verdicts out; no processes, no clock."""
from __future__ import annotations

import pytest

from tfdist.launch.outcome import Cause
from tfdist.launch.flight.thresholds import HangLimits
from tfdist.launch.local.rules import GroupAction, decide, hang_words, leader, nothing_to_save
from tfdist.protocol import HeartbeatRecord, TaskState
from tfdist.protocol.records import Phase, PhaseStats
from tfdist.launch.local.restart import RestartPolicy, TaskRestartPolicy
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.spec import LaunchSpec, Timeouts

HANG = 10.0
ROLE_MIXES = {
    "workers": dict(workers=2),
    "chief+workers": dict(workers=2, chief=True),
    "chief only": dict(workers=0, chief=True),
    "ps": dict(workers=2, ps=1, chief=True),
    "evaluator": dict(workers=2, evaluator=True),
    "everything": dict(workers=2, ps=2, chief=True, evaluator=True),
}


def spec_for(mix: str, **kw) -> LaunchSpec:
    return LaunchSpec(command=("x",), timeouts=Timeouts(hang=HANG), **ROLE_MIXES[mix], **kw)


def tasks_of(spec: LaunchSpec) -> list[tuple[str, int]]:
    roles = [("chief", int(spec.chief)), ("worker", spec.workers), ("ps", spec.ps), ("evaluator", int(spec.evaluator))]
    return [(role, i) for role, n in roles for i in range(n)]


def snap(spec: LaunchSpec, changes: dict[str, dict] | None = None, elapsed: float = 5.0) -> GroupSnapshot:
    """Every task of ``spec`` running and beating, with ``changes`` applied per task name."""
    views = []
    for role, index in tasks_of(spec):
        name = f"{role}:{index}"
        fields = dict(name=name, task_type=role, task_index=index, pid=100 + len(views),
                      heartbeat=HeartbeatRecord(step=3, time=0.0), heartbeat_age=0.1)
        fields.update((changes or {}).get(name, {}))
        views.append(TaskView(**fields))
    return GroupSnapshot(tasks=tuple(views), elapsed=elapsed)


def ended(code: int, at: float = 1.0, **kw) -> dict:
    return dict(exit_code=code, ended_at=at, **kw)


@pytest.mark.parametrize("mix", ROLE_MIXES)
def test_all_running_continues(mix):
    assert decide(snap(spec_for(mix)), spec_for(mix)).action is GroupAction.CONTINUE


@pytest.mark.parametrize("mix", ROLE_MIXES)
def test_leader_exit_0_succeeds_even_if_others_run(mix):
    spec = spec_for(mix)
    role, index = leader(spec)
    assert role == ("chief" if spec.chief else "worker") and index == 0
    verdict = decide(snap(spec, {f"{role}:0": ended(0)}), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.SUCCEED, Cause.SUCCEEDED, f"{role}:0")


@pytest.mark.parametrize("mix", [m for m in ROLE_MIXES if ROLE_MIXES[m].get("workers", 0) >= 2])
def test_non_leader_worker_exit_0_is_normal(mix):
    spec = spec_for(mix)
    assert decide(snap(spec, {"worker:1": ended(0)}), spec).action is GroupAction.CONTINUE


@pytest.mark.parametrize("mix", ROLE_MIXES)
@pytest.mark.parametrize("code", [1, 3, -9, -6, 42])
def test_trainer_failure_fails_the_attempt(mix, code):
    spec = spec_for(mix)
    victim = "worker:1" if spec.workers >= 2 and not spec.ps else "chief:0"
    verdict = decide(snap(spec, {victim: ended(code)}), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.FAIL, Cause.TASK_FAILED, victim)
    assert not verdict.transient


@pytest.mark.parametrize("mix", ["ps", "everything"])
@pytest.mark.parametrize("code", [0, 1, -9])
def test_parameter_server_exit_fails_the_attempt(mix, code):
    spec = spec_for(mix)
    verdict = decide(snap(spec, {"ps:0": ended(code)}), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.FAIL, Cause.TASK_FAILED, "ps:0")


# Under ParameterServerStrategy a failed worker is restarted alone, in place; ps and chief failures end the attempt.
STOPPED = dict(stopped=True, heartbeat_age=HANG + 1)
PS_CASES = {  # name: (changes, expected action, culprit, tasks restarted alone)
    "worker killed": ({"worker:1": ended(-9)}, GroupAction.RESTART_TASKS, "worker:1", ("worker:1",)),
    "worker crashed": ({"worker:0": ended(1)}, GroupAction.RESTART_TASKS, "worker:0", ("worker:0",)),
    "worker preempted": ({"worker:1": ended(143)}, GroupAction.RESTART_TASKS, "worker:1", ("worker:1",)),
    "two workers, in the order they ended": ({"worker:0": ended(-9, at=2.0), "worker:1": ended(1, at=1.0)},
                                             GroupAction.RESTART_TASKS, "worker:1", ("worker:1", "worker:0")),
    "worker exit 0 is normal": ({"worker:1": ended(0)}, GroupAction.CONTINUE, None, ()),
    "worker lost its port": ({"worker:1": ended(1, lost_port=True)}, GroupAction.FAIL, "worker:1", ()),
    "chief killed": ({"chief:0": ended(-9)}, GroupAction.FAIL, "chief:0", ()),
    "chief preempted": ({"chief:0": ended(143)}, GroupAction.PREEMPTED, "chief:0", ()),
    "ps killed": ({"ps:0": ended(-9)}, GroupAction.FAIL, "ps:0", ()),
    "ps after a worker: the ps is the root cause": ({"worker:1": ended(-9, at=1.0), "ps:0": ended(-9, at=2.0)},
                                                    GroupAction.FAIL, "ps:0", ()),
    "chief success wins": ({"worker:1": ended(-9, at=1.0), "chief:0": ended(0, at=2.0)}, GroupAction.SUCCEED,
                           "chief:0", ()),
    "hung chief wins over a restart": ({"worker:1": ended(-9), "chief:0": dict(heartbeat_age=HANG + 1)},
                                       GroupAction.FAIL, "chief:0", ()),
    # A worker stopped (SIGSTOP) and silent for the hang timeout: the chief dropped it; restarted alone, in place.
    "worker stopped and silent": ({"worker:1": STOPPED}, GroupAction.RESTART_TASKS, "worker:1", ("worker:1",)),
    "worker stopped, no heartbeats, quiet": ({"worker:1": dict(STOPPED, heartbeat=None, heartbeat_age=None,
                                                               quiet_for=HANG + 1)},
                                             GroupAction.RESTART_TASKS, "worker:1", ("worker:1",)),
    "worker stopped, not yet for the timeout": ({"worker:1": dict(STOPPED, heartbeat_age=HANG - 1)},
                                                GroupAction.CONTINUE, None, ()),
    "worker silent but running (idle: the chief saving)": ({"worker:1": dict(heartbeat=None, heartbeat_age=None,
                                                                             quiet_for=HANG + 60)},
                                                           GroupAction.CONTINUE, None, ()),
    "exited workers first, then the stopped one": ({"worker:0": STOPPED, "worker:1": ended(-9)},
                                                   GroupAction.RESTART_TASKS, "worker:1", ("worker:1", "worker:0")),
    "a stopped worker is the root cause of a ps failure": ({"worker:1": STOPPED, "ps:0": ended(-6)},
                                                           GroupAction.FAIL, "worker:1", ()),
    "hung chief wins over a stopped worker": ({"worker:1": STOPPED, "chief:0": dict(heartbeat_age=HANG + 1)},
                                              GroupAction.FAIL, "chief:0", ()),
}


@pytest.mark.parametrize("mix", ["ps", "everything"])
@pytest.mark.parametrize("case", PS_CASES)
def test_parameter_server_jobs_restart_a_failed_worker_alone(mix, case):
    changes, action, culprit, restart = PS_CASES[case]
    spec = spec_for(mix)
    verdict = decide(snap(spec, changes), spec)
    assert (verdict.action, verdict.culprit, verdict.restart) == (action, culprit, restart)


def test_a_stopped_worker_restarted_alone_is_reported_as_hung():
    spec = spec_for("ps")
    verdict = decide(snap(spec, {"worker:1": STOPPED}), spec)
    assert (verdict.cause, verdict.detail) == (Cause.HUNG, f"stopped (SIGSTOP) and silent for {HANG:g}s")
    off = LaunchSpec(command=("x",), timeouts=Timeouts(hang=0), **ROLE_MIXES["ps"])  # --hang-timeout 0: no hang watch, nothing restarted
    assert decide(snap(off, {"worker:1": STOPPED}), off).action is GroupAction.CONTINUE
    # Without parameter servers a stopped worker is a hang of the whole group (every peer waits in a collective).
    mwms = spec_for("workers")
    assert decide(snap(mwms, {"worker:1": STOPPED}), mwms).action is GroupAction.FAIL


def test_without_parameter_servers_a_failed_worker_still_fails_the_attempt():
    for mix in ("workers", "chief+workers", "evaluator"):
        spec = spec_for(mix)
        verdict = decide(snap(spec, {"worker:1": ended(-9)}), spec)
        assert (verdict.action, verdict.restart) == (GroupAction.FAIL, ())


def test_a_machine_of_a_parameter_server_job_without_the_chief_restarts_its_worker_alone():
    spec = LaunchSpec(command=("x",), workers=1, chief=True, ps=1, local_tasks=("worker:1",))
    view = TaskView(name="worker:1", task_type="worker", task_index=1, pid=5, exit_code=-9, ended_at=1.0)
    verdict = decide(GroupSnapshot(tasks=(view,)), spec)
    assert (verdict.action, verdict.restart) == (GroupAction.RESTART_TASKS, ("worker:1",))


@pytest.mark.parametrize("mix", ["evaluator", "everything"])
@pytest.mark.parametrize("code", [0, 9, -9])
def test_evaluator_never_stops_training(mix, code):
    spec = spec_for(mix)
    verdict = decide(snap(spec, {"evaluator:0": ended(code)}), spec)
    assert verdict.action is GroupAction.CONTINUE
    assert bool(verdict.notices) == (code != 0) and all("training goes on" in n for n in verdict.notices)


@pytest.mark.parametrize("mix", ROLE_MIXES)
def test_exit_143_is_a_task_preemption(mix):
    spec = spec_for(mix)
    victim = "worker:1" if spec.workers >= 2 and not spec.ps else "chief:0"
    verdict = decide(snap(spec, {victim: ended(143)}), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.PREEMPTED, Cause.TASK_PREEMPTED, victim)


def test_root_cause_is_the_task_that_ended_first():
    spec = spec_for("chief+workers")
    verdict = decide(snap(spec, {"worker:0": ended(1, at=3.0), "worker:1": ended(-9, at=1.0)}), spec)
    assert verdict.culprit == "worker:1"
    verdict = decide(snap(spec, {"worker:0": ended(143, at=1.0), "worker:1": ended(1, at=2.0)}), spec)
    assert verdict.cause is Cause.TASK_PREEMPTED, "the preemption came first; the other exit followed from it"


def test_leader_success_wins_over_a_later_failure_seen_at_the_same_poll():
    spec = spec_for("workers")
    verdict = decide(snap(spec, {"worker:0": ended(0, at=2.0), "worker:1": ended(1, at=2.5)}), spec)
    assert verdict.action is GroupAction.SUCCEED


@pytest.mark.parametrize("lost_port, transient, cause", [
    (True, False, Cause.PORT_CONFLICT), (False, True, Cause.TASK_FAILED), (False, False, Cause.TASK_FAILED)])
def test_port_and_transient_classification(lost_port, transient, cause):
    spec = spec_for("workers")
    verdict = decide(snap(spec, {"worker:1": ended(1, lost_port=lost_port, transient=transient)}), spec)
    assert verdict.cause is cause and verdict.transient is transient


def test_start_failure_comes_first():
    spec = spec_for("workers")
    verdict = decide(snap(spec, {"worker:1": dict(start_error="cannot start /x: Exec format error", pid=None,
                                                  heartbeat=None, heartbeat_age=None)}), spec)
    assert (verdict.action, verdict.cause, verdict.detail) == (GroupAction.FAIL, Cause.START_FAILED,
                                                              "cannot start /x: Exec format error")


@pytest.mark.parametrize("mix", ROLE_MIXES)
def test_silent_trainer_is_hung_stopped_one_preferred(mix):
    spec = spec_for(mix)
    trainers = [f"{r}:{i}" for r, i in tasks_of(spec) if r in ("chief", "worker")]
    watched = ["chief:0"] if spec.ps else trainers
    changes = {name: dict(heartbeat_age=HANG + 5) for name in watched}
    if len(watched) > 1:
        changes[watched[-1]] = dict(heartbeat_age=HANG + 1, stopped=True)
    verdict = decide(snap(spec, changes), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.FAIL, Cause.HUNG, watched[-1])
    assert verdict.detail.startswith("stopped" if len(watched) > 1 else "silent")


def test_hang_rules_exceptions():
    spec = spec_for("ps")
    silent = dict(heartbeat_age=HANG + 5)
    assert decide(snap(spec, {"worker:0": silent, "ps:0": silent}), spec).action is GroupAction.CONTINUE, \
        "under ParameterServerStrategy only the chief runs steps"
    spec = spec_for("workers")
    finished = dict(heartbeat_age=HANG + 5, heartbeat=HeartbeatRecord(step=9, time=0.0, state=TaskState.FINISHED))
    assert decide(snap(spec, {"worker:1": finished}), spec).action is GroupAction.CONTINUE, "saving after fit is silent"
    never = dict(heartbeat=None, heartbeat_age=None, quiet_for=HANG - 1)
    assert decide(snap(spec, {"worker:1": never}, elapsed=1e6), spec).action is GroupAction.CONTINUE, \
        "a script without heartbeats is hung only when it has been quiet for the timeout"
    off = LaunchSpec(command=("x",), workers=2, timeouts=Timeouts(hang=0))
    assert decide(snap(off, {"worker:1": silent}), off).action is GroupAction.CONTINUE


@pytest.mark.parametrize("stopped", [False, True])
def test_a_script_without_heartbeats_is_hung_when_quiet_for_the_timeout(stopped):
    spec = spec_for("workers")
    quiet = dict(heartbeat=None, heartbeat_age=None, quiet_for=HANG + 1, stopped=stopped)
    busy = dict(heartbeat=None, heartbeat_age=None, quiet_for=0.0)
    verdict = decide(snap(spec, {"worker:0": busy, "worker:1": quiet}), spec)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.FAIL, Cause.HUNG, "worker:1")
    assert verdict.detail == ("stopped (SIGSTOP)" if stopped else "quiet") + " (no heartbeat nor CPU time nor output)"


LEARNED_STEPS = HangLimits(learned={Phase.STEP: PhaseStats(n=118, p99=0.062, max=0.071)}, interval=0.5)


def _in_phase(phase: Phase, age: float, **kw) -> dict:
    return dict(heartbeat=HeartbeatRecord(step=3, time=0.0, phase=phase, phase_since=0.0,
                                          phase_stats=LEARNED_STEPS.learned), heartbeat_age=age, **kw)


@pytest.mark.parametrize("stopped", [False, True])
def test_a_learned_step_threshold_calls_a_stalled_step_hung_long_before_the_timeout(stopped):
    spec = LaunchSpec(command=("x",), workers=2, timeouts=Timeouts(hang=300))
    stalled = {"worker:0": _in_phase(Phase.STEP, 3.0), "worker:1": _in_phase(Phase.STEP, 4.0, stopped=stopped)}
    verdict = decide(snap(spec, stalled), spec, LEARNED_STEPS)
    assert (verdict.action, verdict.cause, verdict.culprit) == (GroupAction.FAIL, Cause.HUNG, "worker:1")
    assert verdict.hang_learned and verdict.hang_after == pytest.approx(3.5)
    assert verdict.detail == (("stopped (SIGSTOP)" if stopped else "silent") + ": no step for 4.0 s; steps took up to "
                              "71 ms (p99 62 ms, 118 seen); threshold 3.5 s")
    assert hang_words(verdict) == verdict.detail
    assert decide(snap(spec, stalled), spec).action is GroupAction.CONTINUE, "nothing learned: --hang-timeout"


@pytest.mark.parametrize("phase", [Phase.BETWEEN, Phase.STARTUP, Phase.RESTORE])
def test_a_phase_not_seen_yet_waits_the_hang_timeout(phase):
    spec = LaunchSpec(command=("x",), workers=2, timeouts=Timeouts(hang=300))
    verdict = decide(snap(spec, {"worker:1": _in_phase(phase, 60.0)}), spec, LEARNED_STEPS)
    assert verdict.action is GroupAction.CONTINUE
    verdict = decide(snap(spec, {"worker:1": _in_phase(phase, 301.0)}), spec, LEARNED_STEPS)
    assert (verdict.cause, verdict.hang_learned, hang_words(verdict)) == (Cause.HUNG, False, "silent")


def test_agent_without_the_leader_succeeds_when_its_trainers_are_done():
    spec = LaunchSpec(command=("x",), workers=4, local_tasks=("worker:2", "worker:3"))
    local = [TaskView(name=f"worker:{i}", task_type="worker", task_index=i, pid=i, exit_code=0, ended_at=1.0)
             for i in (2, 3)]
    assert decide(GroupSnapshot(tasks=tuple(local)), spec).action is GroupAction.SUCCEED
    running = (local[0], TaskView(name="worker:3", task_type="worker", task_index=3, pid=3))
    assert decide(GroupSnapshot(tasks=running), spec).action is GroupAction.CONTINUE


def test_nothing_to_save_before_the_first_heartbeat_only():
    spec = spec_for("workers")
    quiet = {n: dict(heartbeat=None, heartbeat_age=None) for n in ("worker:0", "worker:1")}
    assert nothing_to_save(snap(spec, quiet, elapsed=3), spec)
    assert not nothing_to_save(snap(spec, elapsed=3), spec)
    assert not nothing_to_save(snap(spec, quiet, elapsed=spec.timeouts.spares_after + 1), spec), \
        "a script without heartbeats that has run a while may have something to save"


# -- RestartPolicy ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cause", [Cause.SUCCEEDED, Cause.PREEMPTED, Cause.INTERRUPTED, Cause.START_FAILED])
def test_final_causes_never_restart(cause):
    assert not RestartPolicy(max_restarts=5).after(cause, 0.0).restart


@pytest.mark.parametrize("cause", [Cause.TASK_FAILED, Cause.HUNG])
def test_failures_use_the_budget_with_doubling_backoff(cause):
    policy = RestartPolicy(max_restarts=3, backoff=1.0, backoff_max=3.0)
    decisions = [policy.after(cause, float(t)) for t in range(4)]
    assert [d.restart for d in decisions] == [True, True, True, False]
    assert [d.delay for d in decisions[:3]] == [1.0, 2.0, 3.0]
    assert all(d.counted for d in decisions[:3]) and "(3/3)" in decisions[2].message


def test_budget_zero_and_window():
    assert not RestartPolicy(max_restarts=0).after(Cause.TASK_FAILED, 0.0).restart
    policy = RestartPolicy(max_restarts=1, window=10.0)
    assert policy.after(Cause.TASK_FAILED, 0.0).restart
    assert not policy.after(Cause.TASK_FAILED, 5.0).restart, "within the window"
    assert policy.after(Cause.TASK_FAILED, 11.0).restart, "the first restart expired"


def test_preemptions_are_free_up_to_their_cap():
    policy = RestartPolicy(max_restarts=0, max_preemptions=2)
    decisions = [policy.after(Cause.TASK_PREEMPTED, 0.0) for _ in range(3)]
    assert [d.restart for d in decisions] == [True, True, False]
    assert not any(d.counted for d in decisions) and decisions[0].delay == 0.0


def test_port_conflicts_have_their_own_small_cap_then_use_the_budget():
    policy = RestartPolicy(max_restarts=1, max_port_retries=2, backoff=5.0)
    decisions = [policy.after(Cause.PORT_CONFLICT, 0.0) for _ in range(4)]
    assert [(d.restart, d.counted) for d in decisions] == [(True, False), (True, False), (True, True), (False, False)]
    assert decisions[0].delay == 0.0 and decisions[2].delay == 5.0


def test_fixed_ports_do_not_retry_a_port_conflict_for_free():
    policy = RestartPolicy(max_restarts=0, fixed_ports=True)
    assert not policy.after(Cause.PORT_CONFLICT, 0.0).restart


def test_transient_failures_say_so():
    decision = RestartPolicy(max_restarts=1).after(Cause.TASK_FAILED, 0.0, transient=True)
    assert decision.restart and "looked transient" in decision.message


def test_the_same_hang_twice_stops_the_job_and_a_hang_once_restarts():
    policy = RestartPolicy(max_restarts=5)
    again = "worker:1 at step 42, in train.py:88 `on_train_batch_end`"
    stop = policy.after(Cause.HUNG, 0.0, repeated_hang=again)
    assert not stop.restart and f"the same hang ({again}) in two attempts in a row" in stop.message
    assert policy.after(Cause.HUNG, 0.0).restart
    assert policy.after(Cause.TASK_FAILED, 0.0, repeated_hang=again).restart, "a crash is judged by its exception"


@pytest.mark.parametrize("progress, restarts, message", [
    # Three restarts in a row without progress stop the job, with budget to spare.
    ([False, False, False], [True, True, False], "3 restarts in a row made no progress"),
    # Progress in between starts the count again.
    ([False, False, True, False, False], [True, True, True, True, True], "2 in a row without progress"),
    # Unknown progress (no heartbeats, or the first attempt) is not counted.
    ([None, None, None, None], [True, True, True, True], "(4/10)"),
])
def test_restarts_without_progress_are_counted_apart(progress, restarts, message):
    policy = RestartPolicy(max_restarts=10)
    decisions = [policy.after(cause, float(t), progressed=p) for t, (p, cause) in
                 enumerate(zip(progress, [Cause.TASK_FAILED, Cause.HUNG] * 3))]
    assert [d.restart for d in decisions] == restarts
    assert message in decisions[-1].message


# -- TaskRestartPolicy (a task restarted alone) ----------------------------------------------------------------------
def test_each_task_has_its_own_budget_and_back_off():
    policy = TaskRestartPolicy(max_restarts=2, backoff=1.0, backoff_max=1.5)
    first = [policy.after("worker:0", float(t)) for t in range(3)]
    assert [(d.restart, d.delay, d.counted) for d in first] == [(True, 1.0, True), (True, 1.5, True), (False, 0.0, False)]
    assert "restarting worker:0 alone, in place (1/2) in 1.0s" in first[0].message
    assert first[2].message == "worker:0 used its 2 restart(s)"
    other = policy.after("worker:1", 3.0)
    assert (other.restart, other.delay) == (True, 1.0), "another worker's budget is untouched"


def test_a_task_budget_expires_with_the_window():
    policy = TaskRestartPolicy(max_restarts=1, window=10.0)
    assert policy.after("worker:1", 0.0).restart
    refused = policy.after("worker:1", 5.0)
    assert not refused.restart and refused.message == "worker:1 used its 1 restart(s) within 10s"
    assert policy.after("worker:1", 11.0).restart


def test_no_budget_no_restart_alone_but_a_preempted_task_restarts_uncounted():
    policy = TaskRestartPolicy(max_restarts=0, max_preemptions=1)
    assert not policy.after("worker:1", 0.0).restart
    preempted = policy.after("worker:1", 0.0, preempted=True)
    assert (preempted.restart, preempted.counted, preempted.delay) == (True, False, 0.0)
    assert not policy.after("worker:1", 0.0, preempted=True).restart, "preemptions have their own cap"
