"""The supervisor: runs a job's local tasks to completion, restarting the group (the training resumes from its
checkpoint) until it succeeds, the restart budget is spent, or it is asked to stop.

Three parts, as PyTorch's elastic agent splits them: the mechanism (:class:`~tfdist.launch.local.group.TaskGroup` starts,
polls into an immutable snapshot, stops), the group rules (:func:`~tfdist.launch.local.rules.decide`, pure), and the
restart rules (:class:`~tfdist.launch.local.restart.RestartPolicy`, pure). Stop requests (signals, or another thread of a
per-machine agent) are flags checked wherever the supervisor waits (:mod:`tfdist.launch.local.stops`).

A caller that runs only some tasks of a larger job gives the whole cluster in ``spec.cluster`` and its own tasks in
``spec.local_tasks``.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from typing import Callable, Mapping

import psutil

from tfdist.cluster import format_address
from tfdist.launch.flight.learner import PhaseLearner
from tfdist.launch.local.attempt_memory import AttemptMemory
from tfdist.launch.flight.report import HangReport
from tfdist.launch.local import judging, rules, spare_timing
from tfdist.launch.local.ending import end_group, ending_for, record_flight, stopping
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.snapshot import GroupSnapshot
from tfdist.launch.outcome import Attempt, Cause, LaunchResult, RunState, repeated_failure
from tfdist.launch.local.ports import check_ports, free_ports, ports_from_base
from tfdist.launch.console.task_output import Console, to_terminal
from tfdist.launch.seams import OutputSink, Say, TaskMetrics
from tfdist.protocol import TaskPlan, read_modules
from tfdist.launch.firewall import Firewall, NoFirewall, firewall_for
from tfdist.launch.process.reaper import Watcher, become_subreaper, kill_strays, reap_orphans
from tfdist.launch.local.restart import RestartPolicy, TaskRestartPolicy
from tfdist.launch.local.task_restarts import InPlaceRestarts
from tfdist.launch.local.stops import StopRequests, saving_words
from tfdist.launch.spec import LaunchSpec, warm_spares_wanted
from tfdist.launch.local.shm_folder import create_snapshot_folder, remove_snapshot_folder
from tfdist.launch.local.taskenv import count_tasks, layout_for, plan_tasks, shared_env, visible_gpus
from tfdist.launch.local.layout import ClusterLayout
from tfdist.launch.process.spare_pool import SparePool

log = logging.getLogger("tfdist.launch")

ROLE_STATES = {None: "running", 0: "exited"}


class Supervisor:
    """Runs a :class:`LaunchSpec`. Use :meth:`run` once per instance.

    Args:
        environ: the environment tasks inherit (default: this process's).
        legacy_keras: give tasks ``TF_USE_LEGACY_KERAS=1``.
        console: where task output is echoed.
        metrics: the launcher's metrics (``set_task_state``, ``restart``), or None.
        contain: become a child subreaper and start the watcher, so that no descendant of a task outlives the
            launcher (see :mod:`tfdist.launch.process.reaper`).
    """

    def __init__(self, spec: LaunchSpec, *, environ: Mapping[str, str] | None = None, legacy_keras: bool = False,
                 console: OutputSink | None = None, metrics: TaskMetrics | None = None, contain: bool = True,
                 say: Say = to_terminal) -> None:
        self.spec = spec
        self.environ = dict(os.environ if environ is None else environ)
        self.legacy_keras = legacy_keras
        self.run_id = uuid.uuid4().hex[:12]
        self._temporary_logs = spec.log_dir is None
        self.log_dir = spec.log_dir or tempfile.mkdtemp(prefix=f"tfdist-{self.run_id}-")
        self.console: OutputSink = console or Console(enabled=spec.tee or spec.log_dir is None)
        self.say = say  # where its own lines go (the CLI: the terminal's stderr)
        self.result = LaunchResult(run_id=self.run_id, log_dir=self.log_dir)
        self.state = RunState.STARTING  # read by the live view; how the run ended is ``result``
        self.before_log_cleanup: Callable[[], object] | None = None  # the live view's last look (liveview.watch)
        self.metrics = metrics
        self.contain = contain
        self.stops = StopRequests()
        self.stops.saving = self._who_saves
        self._seen: GroupSnapshot | None = None  # the group's last snapshot
        self.phases = PhaseLearner.for_launch(spec, self.log_dir, self.environ)  # what each phase took: thresholds
        self.memory = AttemptMemory()  # hang signatures and progress, compared between attempts
        self.restarts = RestartPolicy(
            max_restarts=spec.max_restarts, window=spec.restart_window, backoff=spec.backoff,
            backoff_max=spec.backoff_max, fixed_ports=spec.port_base is not None or spec.cluster is not None)
        # A ParameterServerStrategy worker that fails is restarted alone (rules.tolerated_alone), on its own budget.
        self.in_place = InPlaceRestarts(
            TaskRestartPolicy(max_restarts=spec.max_restarts, window=spec.restart_window, backoff=spec.backoff,
                              backoff_max=spec.backoff_max),
            say=self._say, event=self._event,
            started=lambda pid: self._watcher.watch([pid]) if self._watcher is not None else None)
        self._cluster: ClusterLayout | None = spec.cluster  # type: ignore[assignment]
        self._local: tuple[str, ...] | None = spec.local_tasks
        self._spares: SparePool | None = None
        self._pace: spare_timing.Pace | None = None  # when this attempt's trainers first ran steps (spare_timing)
        self._watcher: Watcher | None = None
        self.firewall: Firewall | NoFirewall = NoFirewall()  # --firewall (launch/firewall/): loaded by run()
        self._keep: set[int] = set()
        self.group: TaskGroup | None = None
        self.snapshot_dir: str | None = None  # this run's shared-memory folder (runtime.snapshots), see _contain

    # -- the restart loop ----------------------------------------------------------------------------------------
    def run(self) -> LaunchResult:
        """Start, watch and restart the group; returns when the job succeeded, failed for good, or was stopped.

        Raises:
            UsageError: a port the job needs is taken (before anything started).
        """
        check_ports(self.spec, count_tasks(self.spec))
        self.firewall = firewall_for(self.spec.firewall, self.spec.job_name, [self.spec.launcher_metrics_port],
                                     say=self._say)  # --firewall: open (exit 2 where it cannot)
        self.stops.install()
        try:
            self._contain()
            self._say(f"job {self.run_id}: logs in {self.log_dir}")
            attempt = 0
            while True:
                outcome = self.run_round(attempt)
                self.result.attempts.append(outcome)
                self._set_task_states(outcome)
                if self.stops.requested:
                    self.result.stopped_by = self.stops.cause
                    break
                decision = self.restarts.after(outcome.cause, time.monotonic(), transient=outcome.transient,
                                               after_training=self._after_training(outcome),
                                               repeated=repeated_failure(self.result.attempts),
                                               **self.memory.restart_facts(attempt, self.phases.step_lag))
                if not decision.restart:
                    if decision.message:
                        self._say(decision.message)
                    break
                if decision.counted and self.metrics is not None:
                    self.metrics.restart()
                self._say(decision.message)
                self.state = RunState.RESTARTING
                if self._wait(decision.delay):
                    self._announce()
                    self._say("stopped during the restart back-off: no task was running")
                    self.result.stopped_by = self.stops.cause
                    break
                attempt += 1
        finally:
            self._cleanup()
        return self.result

    def run_round(self, attempt: int) -> Attempt:
        """One attempt: start the local tasks, watch them until the rules end the attempt, stop them."""
        plans = self._plans(attempt)
        self._pace = None
        self.firewall.admit_round(plans)  # --firewall: this attempt's ports, open to its cluster's machines only
        attempt_dir = os.path.join(self.log_dir, f"attempt-{attempt}")
        group = self.group = TaskGroup(plans, attempt=attempt, attempt_dir=attempt_dir, base_env=self.environ,
                                       console=self.console, spares=self._spares)
        group.sweep = self._sweep
        group.start(should_stop=lambda: self.stops.requested)
        if self._watcher is not None:
            self._watcher.watch(group.pids)  # each task leads its own process group
        self.state = RunState.RUNNING
        self._event("attempt-started", attempt=attempt, tasks=len(group.procs), warm=group.warm)
        if group.procs:
            if self.metrics is not None:
                for proc in group.procs:
                    self.metrics.set_task_state(proc.plan.task_type, proc.plan.task_index, "running")
            how = f" ({group.warm} from warm spares)" if group.warm else ""
            self._say(f"attempt {attempt}: started {len(group.procs)} task(s){how}: {group.summary()}")
            if self.spec.metrics_port is not None:
                urls = (f"{p.name} http://{format_address(p.plan.metrics_host, p.plan.metrics_port)}/metrics"
                        for p in group.procs)
                self._say("metrics: " + ", ".join(urls))
        try:
            return self._watch(group, attempt)
        finally:
            self.phases.flush()
            self.memory.ended(attempt, group.poll())
            self._sweep()

    def _sweep(self) -> None:
        kill_strays(self._keep | set(self._spares.pids if self._spares else ()))

    def _watch(self, group: TaskGroup, attempt: int) -> Attempt:
        t = self.spec.timeouts
        reported: set[str] = set()
        last_reap = time.monotonic()
        while True:
            self._announce()
            snapshot, verdict = judging.judge(group, self.spec, self.phases)  # poll, learn the phases, the rules
            self._seen = snapshot
            if self.stops.requested:
                # A signal that came during the poll is announced before the stop's wait, not after it: whoever
                # stops the job reads here that a second signal kills at once (the grace may be minutes).
                self._announce()
                self.state = RunState.STOPPING
                self._event("stop-requested", attempt=attempt, cause=(self.stops.cause or Cause.PREEMPTED).value)
                self._stop(group, snapshot)
                self._announce()
                return Attempt(attempt, self.stops.cause or Cause.PREEMPTED, snapshot.elapsed,
                               step_reached=snapshot.step)
            if verdict.action is rules.GroupAction.RESTART_TASKS:
                verdict = self.in_place.handle(verdict, group, time.monotonic())
            for notice in verdict.notices:
                if notice not in reported:
                    reported.add(notice)
                    self._say(notice)
            if verdict.action is rules.GroupAction.CONTINUE:
                self._maybe_start_spares(group, snapshot)
                if time.monotonic() - last_reap > 1.0:
                    reap_orphans(group.pids + list(self._keep))
                    last_reap = time.monotonic()
                time.sleep(t.poll)
                continue
            return self._end(group, attempt, verdict)

    def _stop(self, group: TaskGroup, snapshot: GroupSnapshot) -> None:
        """A stop request or a new round: the tasks save (the full grace), unless nothing is there to save yet."""
        end_group(group, stopping(self.spec.timeouts, graceful=True), poll=self.spec.timeouts.poll,
                  kill_now=self._kill_now,
                  nothing_to_save=lambda: rules.nothing_to_save(snapshot, self.spec))

    def _end(self, group: TaskGroup, attempt: int, verdict: rules.Verdict) -> Attempt:
        """The rules ended the attempt: the flight recorder first, then the shared ending (local/ending.py)."""
        t = self.spec.timeouts
        self.state = RunState.STOPPING
        self._event("verdict", attempt=attempt, action=verdict.action.value,
                    cause=verdict.cause.value if verdict.cause else None, task=verdict.culprit)
        failure = group.failure(verdict.culprit)
        recorded = self._record_flight(group, verdict) if self.spec.flight_recorder else None  # before any stop
        if verdict.cause is Cause.HUNG and recorded and recorded[0].verdict.culprit:  # it sees who stopped first
            failure = group.failure(recorded[0].verdict.culprit)
        self.memory.hung(attempt, verdict, recorded[0] if recorded else None, self._seen)
        if verdict.action is rules.GroupAction.SUCCEED:
            failure = None
        elif verdict.action is rules.GroupAction.PREEMPTED:
            self._say(f"{verdict.culprit} was preempted and saved its state: waiting for the group to save")
        elif verdict.cause is Cause.HUNG:
            self._say(f"{failure.task if failure else verdict.culprit} made no progress for {verdict.hang_after:g}s "
                      f"({rules.hang_words(verdict)}): stopping the group")
        else:
            headline = failure.headline if failure else verdict.culprit
            if verdict.detail and verdict.cause is not Cause.START_FAILED:
                headline += f" ({verdict.detail})"
            self._say(f"{headline}: stopping the group" if verdict.cause is not Cause.START_FAILED else
                      f"start-failed: {headline}")
        end_group(group, ending_for(verdict, t, ps=self.spec.ps), poll=t.poll,
                  stop_requested=self._stop_requested, kill_now=self._kill_now)
        snapshot = group.poll()
        self._event("group-stopped", attempt=attempt)
        return Attempt(attempt, verdict.cause or Cause.TASK_FAILED, snapshot.elapsed, failure=failure,
                       step_reached=snapshot.step, detail=verdict.detail, transient=verdict.transient,
                       hang_report=recorded[1] if recorded else "",
                       hang_verdict=tuple(recorded[0].verdict.lines) if recorded else (),
                       after_training=verdict.after_training)

    def _record_flight(self, group: TaskGroup, verdict: rules.Verdict) -> tuple[HangReport, str] | None:
        """The flight recorder: every task's stacks, step, state and output, and which task stopped first (the
        report and the path of its text file, "" when unwritten); None when there was nothing to record."""
        recorded = record_flight(group, verdict, run_id=self.run_id, folder=self.log_dir)
        if recorded is None:
            return None
        result, path = recorded
        for line in result.verdict.lines:
            self._say(f"flight recorder: {line}")
        if path:
            self._say(f"flight recorder: stacks, steps and output of every task in {path}")
            self._event("hang-report", attempt=group.attempt, path=path, culprit=result.verdict.culprit)
        return result, path or ""

    # -- pieces --------------------------------------------------------------------------------------------------
    def _plans(self, attempt: int) -> list[TaskPlan]:
        layout = self._cluster
        if layout is None:
            n = count_tasks(self.spec)
            ports = (ports_from_base(self.spec.port_base, n, self.spec.host) if self.spec.port_base is not None
                     else free_ports(n, self.spec.host))
            layout = layout_for(self.spec, ports)
        plans = plan_tasks(self.spec, layout, run_id=self.run_id, attempt=attempt,
                           log_dir=os.path.join(self.log_dir, f"attempt-{attempt}"), gpus=visible_gpus(self.environ),
                           legacy_keras=self.legacy_keras, environ=self.environ, snapshot_dir=self.snapshot_dir)
        if self._local is not None:
            plans = [p for p in plans if p.name in self._local]
        return plans

    def _spares_wanted(self) -> bool:
        return warm_spares_wanted(self.spec.warm_spares, max_restarts=self.spec.max_restarts, elastic=False,
                                  is_python=self.spec.command.is_python)

    def _maybe_start_spares(self, group: TaskGroup, snapshot: GroupSnapshot) -> None:
        """Warm spares start when :func:`~tfdist.launch.local.spare_timing.spares_due` says so: once every training
        task has run steps and enough training is left for their imports' CPU time to pay (never in a short job)."""
        if not self._spares_wanted() or (self._spares is not None and len(self._spares) >= len(group.plans)):
            return
        now = time.monotonic()
        self._pace = spare_timing.pace_of(self._pace, snapshot, now)
        if spare_timing.spares_due(snapshot, self._pace, now, spares_after=self.spec.timeouts.spares_after,
                                   worth=self.spec.timeouts.spares_worth):
            if self._spares is None:
                env = {**self.environ, **shared_env(self.spec, self.legacy_keras, self.environ)}
                self._spares = SparePool(self.spec.command, env)
            preload = sorted({m for p in group.plans if p.task_type in ("chief", "worker")
                              for m in read_modules(p.heartbeat_path)})
            self._spares.fill(len(group.plans), preload)
            group.spares = self._spares

    def _who_saves(self) -> str:
        """Which running tasks save on SIGTERM: those whose heartbeat says they have a save handler."""
        running = [t for t in (self._seen.tasks if self._seen is not None else ()) if t.running]
        savers = [t.name for t in running if t.heartbeat is not None and t.heartbeat.saves]
        return saving_words(savers, [t.name for t in running if t.is_trainer and t.name not in savers])

    def _after_training(self, outcome: Attempt) -> str | None:
        """``worker:1 failed in x.py:9`` when ``outcome`` failed after training finished and that is not retried."""
        if not outcome.after_training or self.spec.restart_after_training:
            return None
        site = outcome.failure.site if outcome.failure else None
        who = outcome.failure.task if outcome.failure else "a task"
        return f"{who} failed" + (f" in {site.where}" if site else "")

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when a stop was requested meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stops.requested:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.stops.requested

    def _contain(self) -> None:
        self._keep = {c.pid for c in psutil.Process().children()}  # not ours to kill (a test runner's helpers)
        # Removed by _cleanup, or by the watcher if this process is killed with SIGKILL.
        self.snapshot_dir = create_snapshot_folder(self.run_id, say=self._say)
        if not self.contain:
            return
        become_subreaper()
        try:
            self._watcher = Watcher(self.run_id, remove=self.snapshot_dir)
            self._keep.add(self._watcher.pid)
        except OSError as error:  # without it only kill -9 of the launcher can leave grandchildren behind
            log.warning("cannot start the watcher process: %s", error)

    def _cleanup(self) -> None:
        if self._spares is not None:
            self._spares.discard_all()
        kill_strays(self._keep)
        self.firewall.close()  # --firewall: after the tasks are gone
        remove_snapshot_folder(self.snapshot_dir)  # after kill_strays: no task is left to write into it
        if self._watcher is not None:
            self._watcher.close()
        self.stops.restore()
        # A temporary folder goes only after a success: every other end prints a report that points into it.
        if self._temporary_logs and self.result.cause is Cause.SUCCEEDED:
            if self.before_log_cleanup is not None:
                self.before_log_cleanup()
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def _event(self, name: str, **fields: object) -> None:
        """One line of ``events.jsonl`` in the log folder: what the launcher did when (wall clock), for the live view
        and bench/recovery.py's breakdown of a restart."""
        line = json.dumps({"time": time.time(), "event": name, **fields})
        try:
            with open(os.path.join(self.log_dir, "events.jsonl"), "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError:
            pass  # a full disk must not stop the supervision

    def _stop_requested(self) -> bool:
        self._announce()
        return self.stops.requested

    def _kill_now(self) -> bool:
        """Polled wherever an ending waits (for a save, a grace period): a signal that came meanwhile is announced
        at once, since its handler only sets flags."""
        self._announce()
        return self.stops.kill_now

    def _announce(self) -> None:
        for message in self.stops.announcements():
            self._say(message)

    def _say(self, message: str) -> None:
        self.say(f"tfdist: {message}")

    def _set_task_states(self, outcome: Attempt) -> None:
        if self.metrics is None or self.group is None:
            return
        for proc in self.group.procs:
            code = proc.poll()
            self.metrics.set_task_state(proc.plan.task_type, proc.plan.task_index,
                                        ROLE_STATES.get(code, "failed"))
