"""The group rules, as a pure function of a snapshot: ``decide(snapshot, spec) -> Verdict``. No processes, no clock,
no I/O; table-tested in tests/unit/test_launch_rules.py.

Rules, in order (as Kubeflow's TFJob status rules and PyTorch's elastic agent use them):

1. A task that could not be started fails the attempt (``start-failed``; restarting would fail the same way).
2. The leader (the chief, else worker 0) exiting 0 means success. A per-machine agent without the leader succeeds
   when every local training task has exited 0.
3. The evaluator is outside the cluster: its failure is reported once, training goes on.
4. A worker or chief exiting 0 before the leader is normal. A parameter server exiting at all fails the attempt.
   Under ParameterServerStrategy a worker that exits otherwise (killed, crashed, 143) is restarted alone, in place
   (``restart-tasks``: same index, address and TF_CONFIG) while the rest keep running: the chief's ClusterCoordinator
   re-runs the failed worker's steps on the others and waits for it to come back at its address. A worker that lost
   its port is not (its address is taken: the group restarts on fresh ports). A parameter server or the chief
   failing still fails the attempt (the job restarts from its checkpoint), as TensorFlow documents. A worker the
   kernel reports stopped (SIGSTOP) and silent for ``timeouts.hang`` is restarted alone the same way: the chief's
   coordinator dropped it long before (gRPC keep-alive, ``tfdist.cluster.grpc_keepalive``), and nothing else would
   ever bring it back before the job ends.
5. A task exiting 143 was preempted and saved: the group saves too and restarts (``task-preempted``).
6. Any other exit fails the attempt. The root cause is, in this order: a task the kernel reports as stopped (``T``:
   its peers time out on it, TensorFlow's coordination service aborts them), a task a failed task's output names
   as unhealthy ("The following tasks are unhealthy ..."), else the task that ended first. It is a
   ``port-conflict`` when it lost its port, marked transient when it ran out of threads or processes, and marked
   ``after_training`` when every training task's training had finished (their ``fit`` returned) before it.
7. A training task (under ParameterServerStrategy: the chief, which alone runs steps) that sent heartbeats and then
   none for longer than its current phase's learned threshold is hung (:mod:`tfdist.launch.flight.thresholds`: a
   multiple of what that phase took so far in the job, with a floor; ``timeouts.hang`` for a phase not seen yet, a
   task that does not say its phase, and as the ceiling). When one task stalls its peers soon block in a collective and fall
   silent too: the culprit is a task the kernel reports as stopped, else the one silent for longest. A task that
   never sent a heartbeat is hung once it used no CPU time and wrote no output for as long (``quiet_for``, measured by
   :mod:`tfdist.launch.flight.watch`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tfdist.cluster import TaskId, leader_of
from tfdist.launch.flight.thresholds import HangCall, HangLimits
from tfdist.launch.outcome import Cause, describe_exit
from tfdist.protocol import PREEMPTED_EXIT_CODE
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.spec import LaunchSpec


class GroupAction(str, Enum):
    CONTINUE = "continue"
    SUCCEED = "succeed"
    FAIL = "fail"  # stop the group at once (a short grace) and end the attempt
    PREEMPTED = "preempted"  # let the training tasks finish their coordinated save, then stop the group
    RESTART_TASKS = "restart-tasks"  # restart ``Verdict.restart`` alone, in place; the others keep running


@dataclass(frozen=True)
class Verdict:
    action: GroupAction
    cause: Cause | None = None
    culprit: str | None = None  # the task the attempt's end started with
    detail: str = ""
    transient: bool = False
    notices: tuple[str, ...] = ()  # things to report that do not end the attempt
    after_training: bool = False  # it failed once every training task's training had finished
    restart: tuple[str, ...] = ()  # RESTART_TASKS: the tasks to restart alone, in the order they ended
    hang_after: float = 0.0  # HUNG: the threshold the culprit ran past (seconds)
    hang_learned: bool = False  # HUNG: that threshold was learned from the job's phases (not --hang-timeout)


CONTINUE = Verdict(GroupAction.CONTINUE)


def leader(spec: LaunchSpec) -> tuple[str, int]:
    """The task whose exit 0 makes the job succeed (the leader rule of :mod:`tfdist.cluster.roles`)."""
    training = {"chief": int(spec.chief), "worker": spec.workers}
    lead = leader_of(TaskId(role, i) for role, count in training.items() for i in range(count))
    return (lead.type, lead.index) if lead else ("worker", 0)


def decide(snapshot: GroupSnapshot, spec: LaunchSpec, limits: HangLimits | None = None) -> Verdict:
    """What the supervisor should do about ``snapshot``; ``limits``: the learned phase thresholds (None: every phase
    waits ``timeouts.hang``)."""
    unstartable = [t for t in snapshot.tasks if t.start_error is not None]
    if unstartable:
        task = unstartable[0]
        return Verdict(GroupAction.FAIL, Cause.START_FAILED, task.name, detail=task.start_error or "")
    lead = snapshot.find(*leader(spec))
    if lead is not None and lead.exit_code == 0:
        return Verdict(GroupAction.SUCCEED, Cause.SUCCEEDED, lead.name)
    notices = tuple(f"evaluator failed ({t.name} {describe_exit(t.exit_code)}); training goes on"
                    for t in snapshot.tasks if t.task_type == "evaluator" and t.exit_code not in (None, 0))
    ended = sorted((t for t in snapshot.tasks if t.exit_code is not None and t.task_type != "evaluator"),
                   key=lambda t: (t.ended_at if t.ended_at is not None else float("inf"), t.name))
    failed = [t for t in ended if t.exit_code != 0 or t.task_type == "ps"]
    tolerated = [t for t in failed if tolerated_alone(t, spec)]
    failed = [t for t in failed if t not in tolerated]
    if failed:
        first = failed[0]
        if first.exit_code == PREEMPTED_EXIT_CODE:
            return Verdict(GroupAction.PREEMPTED, Cause.TASK_PREEMPTED, first.name, notices=notices)
        culprit, blame = _blame(snapshot, failed)
        cause = Cause.PORT_CONFLICT if culprit.lost_port else Cause.TASK_FAILED
        detail = blame or ("parameter server exited" if culprit.task_type == "ps" and culprit.exit_code == 0 else "")
        return Verdict(GroupAction.FAIL, cause, culprit.name, detail=detail, transient=culprit.transient,
                       notices=notices, after_training=snapshot.training_finished and culprit.exit_code is not None)
    if lead is None:  # a per-machine agent whose machine does not run the leader
        trainers = [t for t in snapshot.tasks if t.is_trainer]
        if trainers and all(t.exit_code == 0 for t in trainers) and not spec.ps:
            return Verdict(GroupAction.SUCCEED, Cause.SUCCEEDED, trainers[0].name, notices=notices)
    found = _hung(snapshot, spec, limits or HangLimits())
    if found is not None:
        stuck, call = found
        how = "stopped (SIGSTOP)" if stuck.stopped else "silent"
        if call is None:  # never sent a heartbeat: the cheap watch saw it quiet
            detail = f"{how if stuck.stopped else 'quiet'} (no heartbeat nor CPU time nor output)"
        elif not call.threshold.learned:
            detail = f"{how}, no heartbeat for {spec.timeouts.hang:g}s"
        else:
            detail = f"{how}: {call.reason}"
        after = call.threshold.seconds if call is not None else spec.timeouts.hang
        return Verdict(GroupAction.FAIL, Cause.HUNG, stuck.name, detail=detail, notices=notices, hang_after=after,
                       hang_learned=call is not None and call.threshold.learned)
    frozen = [t for t in snapshot.tasks if hung_alone(t, spec)]
    if tolerated or frozen:
        first = (tolerated or frozen)[0]
        cause, detail = ((Cause.TASK_FAILED, describe_exit(first.exit_code)) if tolerated else
                         (Cause.HUNG, f"stopped (SIGSTOP) and silent for {spec.timeouts.hang:g}s"))
        return Verdict(GroupAction.RESTART_TASKS, cause, first.name, detail=detail, notices=notices,
                       restart=tuple(t.name for t in tolerated + frozen))
    return Verdict(GroupAction.CONTINUE, notices=notices) if notices else CONTINUE


def hang_words(verdict: Verdict) -> str:
    """What a hung verdict says after "made no progress for N s": ``stopped (SIGSTOP)`` when the threshold was
    ``--hang-timeout``; the learned threshold's reason in full (``silent: no step for 4.2 s; steps took ...``)."""
    return verdict.detail if verdict.hang_learned else verdict.detail.split(",")[0]


def tolerated_alone(task: TaskView, spec: LaunchSpec) -> bool:
    """A task whose abnormal exit is restarted alone rather than ending the attempt: a ParameterServerStrategy
    worker (it only serves; the coordinator tolerates its loss) that did not lose its port."""
    return bool(spec.ps) and task.task_type == "worker" and task.exit_code not in (None, 0) and not task.lost_port


def hung_alone(task: TaskView, spec: LaunchSpec) -> bool:
    """A ParameterServerStrategy worker that the kernel reports stopped and that was silent (no heartbeat, or no CPU
    time nor output when it sends none) for ``timeouts.hang``: restarted alone, in place, as if it had exited. Only
    a stopped one: a worker that merely idles (the chief saving or evaluating) is as quiet as a deadlocked one."""
    silent = task.heartbeat_age if task.heartbeat_age is not None else task.quiet_for
    return (bool(spec.ps) and task.task_type == "worker" and task.running and task.stopped
            and spec.timeouts.hang > 0 and silent is not None and silent > spec.timeouts.hang)


def _blame(snapshot: GroupSnapshot, failed: list[TaskView]) -> tuple[TaskView, str]:
    """The root cause among ``failed`` (in the order they ended) and the tasks still running, and why, when it is
    not simply the first to end."""
    stopped = [t for t in snapshot.tasks if t.running and t.stopped]
    if stopped:
        return stopped[0], f"stopped (SIGSTOP); {failed[0].name} {describe_exit(failed[0].exit_code)} waiting for it"
    for task in failed:
        for name in task.blames:
            named = next((t for t in snapshot.tasks if t.name == name), None)
            if named is not None and named is not task:
                return named, f"{task.name} exited because TensorFlow found {name} unhealthy (no heartbeats)"
    return failed[0], ""


def _hung(snapshot: GroupSnapshot, spec: LaunchSpec, limits: HangLimits) -> tuple[TaskView, HangCall | None] | None:
    """The hung task to blame, with the call that found it (None: it never sent a heartbeat and the cheap watch saw
    it quiet for ``timeouts.hang``)."""
    timeout = spec.timeouts.hang
    if timeout <= 0:
        return None
    watched = ("chief",) if spec.ps else ("chief", "worker")
    found: list[tuple[TaskView, HangCall | None]] = []
    for task in snapshot.tasks:
        if task.task_type not in watched or not task.running:
            continue
        if task.heartbeat_age is not None:
            call = limits.hung(task.heartbeat, task.heartbeat_age, ceiling=timeout)
            if call is not None:
                found.append((task, call))
        elif task.quiet_for is not None and task.quiet_for > timeout:
            found.append((task, None))
    if not found:
        return None
    # When one task stalls its peers soon wait for it: a stopped one is the likelier cause, else the longest silent.
    return max(found, key=lambda item: (item[0].stopped, item[0].heartbeat_age or item[0].quiet_for or 0.0))


def nothing_to_save(snapshot: GroupSnapshot, spec: LaunchSpec) -> bool:
    """A stop may skip the grace period: no task has sent a heartbeat and the attempt is young enough that a script
    using tfdist.runtime would not have started training (scripts without it never send one: after
    ``timeouts.spares_after`` they get the full grace)."""
    return not snapshot.any_heartbeat and snapshot.elapsed < spec.timeouts.spares_after
