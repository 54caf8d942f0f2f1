"""This machine's workers for one round of a multi-machine job, on the single-machine launcher's own parts.

The round's cluster comes from the rendezvous; the tasks are planned by ``taskenv.plan_tasks`` from a spec whose
``cluster`` is that layout and whose ``local_tasks`` are this machine's, run by :class:`~tfdist.launch.local.group.TaskGroup`
(start, poll into a snapshot, stop) and judged by the same pure rules, :func:`tfdist.launch.local.rules.decide` (the
leader rule, an agent without the leader succeeding when its own workers exit 0, preemption, hangs, port races).
What is left here is the translation into the outcomes an agent reports; the round is ended by the single-machine
launcher's own path (:mod:`tfdist.launch.local.ending`). Output lines are prefixed with the
machine's node rank: ``[node1 worker:3] ...``.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from tfdist import constants as C
from tfdist.cluster import TaskId
from tfdist.launch.flight.learner import PhaseLearner
from tfdist.launch.local import judging, rules
from tfdist.launch.local.ending import (OUTPUT_DRAIN_S, Ending, WaitCut, end_group, ending_for, finishing_roles,
                                        record_flight, stopped_outcome, stopping)
from tfdist.launch.outcome import Outcome
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.restart import TaskRestartPolicy
from tfdist.launch.local.task_restarts import InPlaceRestarts
from tfdist.launch.console.task_output import Console, to_terminal
from tfdist.protocol import PREEMPTED_EXIT_CODE, Command, TaskPlan, read_modules
from tfdist.launch.spec import LaunchSpec, Timeouts
from tfdist.launch.local.taskenv import assign_gpus, plan_tasks, shared_env, visible_gpus
from tfdist.launch.local.layout import ClusterLayout
from tfdist.launch.console.tflog import LEVEL_VARIABLE
from tfdist.launch.process.spare_pool import SparePool
from tfdist.launch.seams import Say
from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.launch.flight.report import HangReport


@dataclass(frozen=True)
class TaskOptions:
    """The single-machine flags that shape each local task, with the meaning they have on one machine.

    Attributes:
        job_name: ``--job-name``, the label of logs and metrics (None: the job id).
        thread_caps: ``--thread-caps``: this machine's cores shared among its own workers.
        nccl_debug: ``--nccl-debug``: ``NCCL_DEBUG=INFO`` for every task.
        metrics_port: ``--metrics-port``: worker ``i`` (its index in the whole job) serves on this + ``i``.
        metrics_host: ``--metrics-host``.
        tf_log_level: ``--tf-log-level`` as ``TF_CPP_MIN_LOG_LEVEL`` (None: the tasks inherit this process').
        show_output: print the tasks' output here (``--tee``, or no ``--log-dir``); the log files get it anyway.
        flight_recorder: read the tasks before a failed round stops them (``--no-flight-recorder``: never).
        firewall: ``--firewall``: this machine's task ports admit only the round's machines (launch/firewall/).
    """

    job_name: str | None = None
    thread_caps: bool = False
    nccl_debug: bool = False
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    tf_log_level: int | None = None
    show_output: bool = True
    flight_recorder: bool = True
    firewall: bool = False


class NodeConsole(Console):
    """Console lines prefixed ``[node<rank> worker:<i>]`` instead of ``[worker:<i>]``."""

    def __init__(self, node_rank: int, *, enabled: bool = True, tf_log_level: int | None = None) -> None:
        super().__init__(enabled=enabled, tf_log_level=tf_log_level)
        self.node = f"node{node_rank}"

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None:
        super().write(f"[{self.node} {prefix.strip('[]')}]", line, to_stderr=to_stderr)


class RoundGroup(Protocol):
    """What an agent needs of its machine's share of a round: :class:`NodeGroup`, or a test's stand-in
    (tests/unit/elastic/agent/test_agent_in_process.py)."""

    plans: Sequence[TaskPlan]
    spare_env: Mapping[str, str]
    reported_training: bool
    spares_filled: bool
    flight: tuple[HangReport, str | None] | None  # the flight recorder's report on a failure, the watchdog's task

    def start(self) -> None: ...
    def read_tasks(self) -> list[TaskEvidence]: ...
    def describe(self) -> str: ...
    def training(self) -> bool: ...
    def progressed(self) -> bool: ...
    def preload(self) -> list[str]: ...
    def step(self) -> int | None: ...
    def outcome(self) -> tuple[Outcome, str] | None: ...
    def end(self) -> None: ...
    def finish(self, seconds: float) -> Outcome: ...
    def stop(self, *, graceful: bool) -> Outcome: ...


class NodeGroup:
    """Workers ``first_index .. first_index + slots - 1`` of the cluster ``workers``, on this machine."""

    def __init__(self, *, command: Command, workers: tuple[str, ...], first_index: int, slots: int,
                 node_rank: int, round_: int, job: str, log_dir: str, env: Mapping[str, str], legacy_keras: bool,
                 max_restarts: int, timeouts: Timeouts, gpus_per_task: int | None = None,
                 spares: SparePool | None = None, base_env: Mapping[str, str] | None = None,
                 snapshot_dir: str | None = None, options: TaskOptions = TaskOptions(),
                 kill_now: Callable[[], bool] = lambda: False,
                 roles: tuple[ClusterLayout, tuple[str, ...]] | None = None, restart_window: float = 0.0,
                 backoff: float = 0.0, say: Say | None = None, phases_folder: str | None = None) -> None:
        # phases_folder: where the job's learned phase durations live (the agent's run folder), so that every round
        # (and a restarted agent) starts from what earlier rounds learned; None: this round learns alone.
        # roles: the whole cluster and this machine's tasks, placed by round_roles (--chief/--ps/--evaluator).
        layout, local = roles or (ClusterLayout(worker=workers),
                                  tuple(f"worker:{i}" for i in range(first_index, first_index + slots)))
        local_workers = sum(name.startswith("worker:") for name in local)
        # workers=this machine's: thread caps share its cores among its own tasks (the layout is the cluster); the
        # job's chief and parameter servers decide the leader and the rules, as on one machine.
        self.options = options
        self.spec = LaunchSpec(command=command, workers=local_workers if roles else slots,
                               chief=bool(layout.chief), ps=len(layout.ps), evaluator=bool(layout.evaluator),
                               job_name=options.job_name or job,
                               max_restarts=max_restarts,
                               env=tuple(env.items()), timeouts=timeouts, cluster=layout, local_tasks=local,
                               warm_spares=False, thread_caps=options.thread_caps, nccl_debug=options.nccl_debug,
                               metrics_port=options.metrics_port, metrics_host=options.metrics_host)
        environ = dict(os.environ if base_env is None else base_env)
        if options.tf_log_level is not None:
            environ[LEVEL_VARIABLE] = str(options.tf_log_level)
        plans = [p for p in plan_tasks(self.spec, layout, run_id=f"{job}-r{round_}", attempt=round_,
                                       log_dir=log_dir, legacy_keras=legacy_keras, environ=environ,
                                       snapshot_dir=snapshot_dir)
                 if p.name in local]
        # This machine's GPUs are shared among this machine's workers (by local position, not global index).
        gpu_map = assign_gpus([TaskId(p.task_type, p.task_index) for p in plans], visible_gpus(environ), gpus_per_task)
        if gpu_map and C.CUDA_VISIBLE_DEVICES not in env:
            plans = [dataclasses.replace(p, extra_env={**p.extra_env, C.CUDA_VISIBLE_DEVICES:
                                                      gpu_map[TaskId(p.task_type, p.task_index)]}) for p in plans]
        self.plans = plans
        self.phases = PhaseLearner.for_launch(self.spec, phases_folder, environ)  # the learned hang thresholds
        self.group = TaskGroup(plans, attempt=round_, attempt_dir=log_dir, base_env=environ,
                               console=NodeConsole(node_rank, enabled=options.show_output,
                                                   tf_log_level=options.tf_log_level), spares=spares)
        self.spare_env = {**environ, **shared_env(self.spec, legacy_keras, environ)}  # what a warm spare imports with
        self.reported_training = False
        self.spares_filled = False
        self._ending: Ending | None = None  # how the round ends, once outcome() found it ended
        self.kill_now = kill_now  # the agent was told to kill now (a second signal): waits and graces are cut short
        self.flight: tuple[HangReport, str | None] | None = None  # (HangReport, the watchdog's task): for the rendezvous
        # A ParameterServerStrategy worker that fails is restarted here, alone (rules.tolerated_alone): the round and
        # the other machines go on. Its budget is --max-restarts per task within this round.
        self.in_place = InPlaceRestarts(
            TaskRestartPolicy(max_restarts=max_restarts, window=restart_window, backoff=backoff),
            say=say or (lambda message: to_terminal(f"tfdist[node{node_rank}]: {message}")))

    def start(self) -> None:
        self.group.start()

    def read_tasks(self) -> list[TaskEvidence]:
        """Every local task's evidence (stacks, step, state, output), read now: the rendezvous' ``dump``."""
        from tfdist.launch.flight import recorder

        return recorder.collect(recorder.targets_of(self.group))

    def describe(self) -> str:
        warm = f" ({self.group.warm} from warm spares)" if self.group.warm else ""
        return self.group.summary() + warm

    def training(self) -> bool:
        """Every local worker has sent a heartbeat: it trains, and its preemption handler is installed."""
        snapshot = self.group.poll()
        return bool(snapshot.tasks) and all(t.heartbeat is not None for t in snapshot.tasks if t.is_trainer)

    def progressed(self) -> bool:
        """Every local worker has run steps since it began: the start, restore and traced first step are behind."""
        return self.group.poll().trainers_progressed

    def preload(self) -> list[str]:
        """The modules the workers imported (from their heartbeats), for warm spares to import ahead."""
        return sorted({m for p in self.group.plans for m in read_modules(p.heartbeat_path)})

    def step(self) -> int | None:
        return self.group.poll().step

    def outcome(self) -> tuple[Outcome, str] | None:
        """None while running; else ``(succeeded | failed | preempted, detail)``, by the launcher's own rules. The
        round's end is then carried out by :meth:`end` (the waits, the stop, the output read to its end)."""
        t = self.spec.timeouts
        _, verdict = judging.judge(self.group, self.spec, self.phases)  # the supervisor's own look: learned phases
        if verdict.action is rules.GroupAction.RESTART_TASKS:
            verdict = self.in_place.handle(verdict, self.group, time.monotonic())
        if verdict.action is rules.GroupAction.CONTINUE:
            return None
        self._ending = ending_for(verdict, t, ps=bool(self.spec.ps), across_machines=True)
        if verdict.action is rules.GroupAction.SUCCEED:
            return Outcome.SUCCEEDED, "the workers here exited 0"
        if verdict.action is rules.GroupAction.PREEMPTED:
            return Outcome.PREEMPTED, f"{verdict.culprit} saved and exited {PREEMPTED_EXIT_CODE}"
        failure = self.group.failure(verdict.culprit)
        detail = failure.headline if failure is not None else str(verdict.culprit)
        detail += f" ({verdict.detail})" if verdict.detail else ""
        # The flight recorder reads this machine's tasks before anything is stopped, on any failure (tasks on other
        # machines may wait for this one); its verdict travels to the rendezvous server in the outcome's detail, this
        # machine's report stays in its log folder, and the evidence goes to the rendezvous, which asks the other
        # machines for theirs and writes one report (elastic/rendezvous/hang_collection.py).
        recorded = record_flight(self.group, verdict, run_id=self.plans[0].run_id if self.plans else "",
                                 folder=self.group.attempt_dir, others_elsewhere=True) \
            if self.options.flight_recorder else None
        if recorded is not None:
            result, path = recorded
            self.flight = (result, verdict.culprit)
            detail += f"; flight recorder: {result.verdict.headline}" + (f" (report: {path})" if path else "")
        return Outcome.FAILED, detail

    def end(self) -> None:
        """End the round the way :meth:`outcome` found it ended (the shared path, :mod:`tfdist.launch.local.ending`):
        after a success the workers here get ``after_success`` plus the grace period to end on their own, a
        preempted group the grace period to finish saving; then the rest are stopped and their output read."""
        self._end(self._ending or self._stopping(graceful=False))

    def finish(self, seconds: float) -> Outcome:
        """The job succeeded: the workers here trained and may still be printing their last lines, saving or exiting
        (the leader, on this machine or another, finished first). Let them end on their own for up to ``seconds``,
        then stop the rest (still tearing TensorFlow down by then: nothing left to print or save). Stopping them
        at once instead (as a failed round is stopped) cut off their last lines whenever the leader's success
        outran them."""
        stop = self._stopping(graceful=False)
        finishing = finishing_roles(ps=bool(self.spec.ps), across_machines=True)
        return self._end(dataclasses.replace(stop, wait_roles=finishing, wait_seconds=seconds,
                                             wait_cut=WaitCut.KILL_NOW))

    def stop(self, *, graceful: bool) -> Outcome:
        """Stop every local worker; ``preempted`` when all saved (exit 143) or had finished, else ``stopped``.

        ``graceful``: SIGTERM and the full grace period, for the coordinated save. Otherwise a peer is gone or
        failed and no collective can finish, so a short grace, then SIGKILL.
        """
        return self._end(self._stopping(graceful=graceful))

    def _stopping(self, *, graceful: bool) -> Ending:
        return stopping(self.spec.timeouts, graceful=graceful, drain=OUTPUT_DRAIN_S)

    def _end(self, ending: Ending) -> Outcome:
        self.phases.flush()  # the next round (on this machine) starts from what this one learned
        return stopped_outcome(end_group(self.group, ending, poll=self.spec.timeouts.poll, kill_now=self.kill_now,
                                         nothing_to_save=lambda: rules.nothing_to_save(self.group.poll(), self.spec)))
