"""The supervisor: starts every task of a job, watches them, tears the whole group down on the first failure, and
restarts it (the training resumes from its checkpoint) until it succeeds or the restart budget is spent.

States of the group, and their transitions::

    INIT -> STARTING -> RUNNING -> SUCCEEDED
                          |  \\-> STOPPING (launcher got SIGTERM/SIGINT) -> PREEMPTED | INTERRUPTED
                          v
                        FAILED (a task failed or hung) -> RESTARTING -> STARTING ...
                          \\-> (budget spent) FAILED, final

Success rule (as Kubeflow's TFJob): the job succeeds when the chief (worker 0 without a chief) exits 0; the other
tasks are then given a moment to finish and the rest (parameter servers, evaluator) are stopped. A parameter server
that exits at all, or a chief/worker that exits non-zero, fails the attempt. The evaluator's failure is reported but
does not stop training. Task indices are not stable identities across restarts: an attempt restarts every task.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
import time
import uuid
from enum import Enum
from types import FrameType
from typing import Any, Mapping

import psutil

from tfdist.cluster import TaskId, format_address, leader_of
from tfdist.launch.outcome import Attempt, Cause, LaunchResult, TaskFailure
from tfdist.launch.protocol import PREEMPTED_EXIT_CODE, read_error, read_heartbeat
from tfdist.launch.ports import free_ports, ports_from_base
from tfdist.launch.procs import Console, Spare, TaskProcess, activate, spawn, spawn_spare, stop_all
from tfdist.launch.spec import LaunchSpec
from tfdist.launch.taskenv import count_tasks, layout_for, plan_tasks, shared_env, visible_gpus

log = logging.getLogger("tfdist.launch")

# Lines in a task's stderr that mean it lost the race for its port (gRPC and Python spellings).
PORT_CONFLICT_MARKERS = ("Address already in use", "Failed to add port", "EADDRINUSE", "Could not start gRPC server")
MAX_PORT_RETRIES = 5
# How long the other training tasks may take to finish on their own once the leader has succeeded.
AFTER_SUCCESS_WAIT_S = 10.0
# After a task failed, the survivors cannot finish a collective or a coordinated save (MultiWorkerMirroredStrategy
# workers even treat SIGTERM as a preemption notice and keep running), so they get only a short grace: waiting longer
# would only delay the restart.
FAILURE_GRACE_S = 0.5
# Parameter servers and the evaluator, stopped after success, have nothing to save.
AFTER_SUCCESS_GRACE_S = 2.0
# Preemptions (exit 143 after a coordinated save) restart the group without using the restart budget, up to this many.
MAX_PREEMPTION_RESTARTS = 20
# Warm spares are started once the group trains (every training task has sent a heartbeat), so their TensorFlow
# import does not slow the group's own start; or after this long, for scripts that send no heartbeats.
SPARES_AFTER_S = 30.0


def _is_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


class GroupState(str, Enum):
    INIT = "init"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    INTERRUPTED = "interrupted"


class Supervisor:
    """Runs a :class:`LaunchSpec` to completion. Use :meth:`run` once per instance."""

    def __init__(self, spec: LaunchSpec, *, environ: Mapping[str, str] | None = None,
                 legacy_keras: bool = False, console: Console | None = None, metrics: Any = None) -> None:
        self.spec = spec
        self.environ = dict(os.environ if environ is None else environ)
        self.legacy_keras = legacy_keras
        self.run_id = uuid.uuid4().hex[:12]
        self.log_dir = spec.log_dir or tempfile.mkdtemp(prefix=f"tfdist-{self.run_id}-")
        self.console = console or Console(enabled=spec.tee or spec.log_dir is None)
        self.state = GroupState.INIT
        self.result = LaunchResult(run_id=self.run_id, log_dir=self.log_dir)
        self._stop_signal: int | None = None
        self._restart_times: list[float] = []
        self.metrics = metrics  # tfdist.launch.metrics.LauncherMetrics, or None
        self._spares: list[Spare] = []

    # -- signals -------------------------------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop waiting for the grace period
        self._stop_signal = signum

    def _install_signal_handlers(self) -> dict[int, object]:
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            try:
                previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread (tests driving the supervisor from a thread)
                pass
        return previous

    # -- events --------------------------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        print(f"tfdist: {message}", file=sys.stderr, flush=True)

    def _set_state(self, state: GroupState, procs: list[TaskProcess] | None = None) -> None:
        self.state = state
        log.debug("group state: %s", state.value)
        if self.metrics is not None:
            for proc in procs or []:
                code = proc.poll()
                task_state = state.value if code is None else ("exited" if code == 0 else "failed")
                self.metrics.set_task_state(proc.plan.task_type, proc.plan.task_index, task_state)

    # -- one attempt ---------------------------------------------------------------------------------------------
    def _choose_ports(self) -> list[int]:
        n = count_tasks(self.spec)
        if self.spec.port_base is not None:
            return ports_from_base(self.spec.port_base, n, self.spec.host)
        return free_ports(n, self.spec.host)

    def _start(self, attempt: int) -> list[TaskProcess]:
        self._set_state(GroupState.STARTING)
        attempt_dir = os.path.join(self.log_dir, f"attempt-{attempt}")
        os.makedirs(attempt_dir, exist_ok=True)
        layout = layout_for(self.spec, self._choose_ports())
        plans = plan_tasks(self.spec, layout, run_id=self.run_id, attempt=attempt, log_dir=attempt_dir,
                           gpus=visible_gpus(self.environ), legacy_keras=self.legacy_keras, environ=self.environ)
        procs = []
        warm = 0
        try:
            for plan in plans:
                log_path = os.path.join(attempt_dir, f"{plan.task_type}-{plan.task_index}.log")
                proc = self._from_spare(plan, attempt, log_path)
                warm += proc is not None
                procs.append(proc or spawn(plan, attempt=attempt, base_env=self.environ, log_path=log_path,
                                           console=self.console))
        except OSError:
            stop_all(procs, 0.0)
            raise
        # Which pid is which task: a task started from a warm spare got its TFDIST_* variables after exec, so they
        # are not in /proc/<pid>/environ; operators and tests read this file instead.
        with open(os.path.join(attempt_dir, "tasks.json"), "w", encoding="utf-8") as handle:
            json.dump([{"task": p.name, "pid": p.pid, "address": p.plan.address} for p in procs], handle)
        summary = ", ".join(f"{p.name} pid {p.pid} {p.plan.address}" for p in procs)
        how = f" ({warm} from warm spares)" if warm else ""
        self._say(f"attempt {attempt}: started {len(procs)} task(s){how}: {summary}")
        if self.spec.metrics_port is not None:
            urls = ", ".join(f"{p.name} http://{format_address(p.plan.metrics_host, p.plan.metrics_port)}/metrics"
                             for p in procs)
            self._say(f"metrics: {urls}")
        self._set_state(GroupState.RUNNING, procs)
        return procs

    # -- warm spares ---------------------------------------------------------------------------------------------
    def _spares_wanted(self) -> bool:
        return self.spec.warm_spares and self.spec.max_restarts > 0 and self.spec.command.is_python

    def _spare_env(self) -> dict[str, str]:
        """What TensorFlow may read at import: the launcher's environment plus the settings shared by all tasks."""
        return {**self.environ, **shared_env(self.spec, self.legacy_keras, self.environ)}

    def _maybe_start_spares(self, procs: list[TaskProcess], started: float) -> None:
        if self._spares or not self._spares_wanted():
            return
        trainers = [p for p in procs if p.plan.task_type in ("chief", "worker")]
        training = all(os.path.exists(p.plan.heartbeat_path) for p in trainers)
        if training or time.monotonic() - started > SPARES_AFTER_S:
            env = self._spare_env()
            self._spares = [spawn_spare(self.spec.command.program, env) for _ in procs]

    def _from_spare(self, plan, attempt: int, log_path: str) -> TaskProcess | None:
        while self._spares:
            spare = self._spares.pop()
            try:
                return activate(spare, plan, attempt=attempt, log_path=log_path, console=self.console)
            except OSError:
                spare.discard()
        return None

    def _discard_spares(self) -> None:
        while self._spares:
            self._spares.pop().discard()

    def _failure(self, proc: TaskProcess) -> TaskFailure:
        return TaskFailure(task=proc.name, pid=proc.pid, exit_code=proc.exit_code, log_path=proc.log_path,
                           stderr_tail=tuple(proc.stderr_tail),
                           error=read_error(proc.plan.error_path))

    def _hung(self, procs: list[TaskProcess]) -> TaskProcess | None:
        """The task that stalled, if any training task has sent no heartbeat for ``hang_timeout`` seconds.

        Only tasks that have sent a first heartbeat are watched (scripts that don't use tfdist.runtime never do).
        When one task stalls, its peers soon block in a collective and fall silent too: the culprit is a task the
        kernel reports as stopped, else the one silent for longest.
        """
        timeout = self.spec.hang_timeout
        if timeout <= 0:
            return None
        # Under ParameterServerStrategy only the chief (the coordinator) runs training steps.
        watched = ("chief",) if self.spec.ps else ("chief", "worker")
        silent: list[tuple[bool, float, TaskProcess]] = []
        now = time.time()
        for proc in procs:
            if proc.plan.task_type not in watched or proc.exit_code is not None:
                continue
            path = proc.plan.heartbeat_path
            try:
                silent_for = now - os.stat(path).st_mtime
            except OSError:
                continue  # no heartbeat yet
            beat = read_heartbeat(path)
            if silent_for > timeout and beat is not None and beat.finished:
                continue  # training is over; saving the model and evaluating send no beats
            if silent_for > timeout:
                silent.append((_is_stopped(proc.pid), silent_for, proc))
        if not silent:
            return None
        return max(silent, key=lambda item: (item[0], item[1]))[2]

    def _watch(self, procs: list[TaskProcess], attempt: int, started: float) -> Attempt:
        leader_task = self._leader(procs)
        leader = next(p for p in procs if (p.plan.task_type, p.plan.task_index) == leader_task)
        reported_evaluator = False
        while True:
            now = time.monotonic()
            if self._stop_signal is not None:
                cause = Cause.INTERRUPTED if self._stop_signal == signal.SIGINT else Cause.PREEMPTED
                self._set_state(GroupState.STOPPING)
                self._say(f"got {signal.Signals(self._stop_signal).name}: stopping all tasks")
                stop_all(procs, self.spec.grace_period)
                return Attempt(attempt, cause, now - started, step_reached=self._step(procs))
            for proc in procs:
                code = proc.poll()
                if code is None:
                    continue
                role = proc.plan.task_type
                if proc is leader and code == 0:
                    self._finish_success(procs)
                    return Attempt(attempt, Cause.SUCCEEDED, time.monotonic() - started,
                                   step_reached=self._step(procs))
                if role == "evaluator":
                    if code != 0 and not reported_evaluator:
                        self._say(f"evaluator failed ({self._failure(proc).headline}); training goes on")
                        reported_evaluator = True
                    continue
                if code == 0 and role != "ps":
                    continue  # a worker may finish a moment before the leader
                if code == PREEMPTED_EXIT_CODE:
                    self._say(f"{proc.name} was preempted and saved its state: waiting for the group to save")
                    self._wait_for_trainers(procs, self.spec.grace_period)
                    stop_all(procs, self.spec.grace_period)
                    return Attempt(attempt, Cause.TASK_PREEMPTED, time.monotonic() - started,
                                   failure=self._failure(proc), step_reached=self._step(procs))
                failure = self._failure(proc)
                cause = Cause.PORT_CONFLICT if self._lost_port_race(proc) else Cause.TASK_FAILED
                self._set_state(GroupState.FAILED)
                self._say(f"{failure.headline}: stopping the group")
                stop_all(procs, min(FAILURE_GRACE_S, self.spec.grace_period))
                return Attempt(attempt, cause, time.monotonic() - started, failure=failure,
                               step_reached=self._step(procs))
            self._maybe_start_spares(procs, started)
            stuck = self._hung(procs)
            if stuck is not None:
                self._set_state(GroupState.FAILED)
                state = "stopped (SIGSTOP)" if _is_stopped(stuck.pid) else "silent"
                self._say(f"{stuck.name} (pid {stuck.pid}) made no progress for {self.spec.hang_timeout:g}s "
                          f"({state}): stopping the group")
                stop_all(procs, self.spec.grace_period, first_signal=signal.SIGKILL)
                failure = self._failure(stuck)
                return Attempt(attempt, Cause.HUNG, time.monotonic() - started, failure=failure,
                               step_reached=self._step(procs),
                               detail=f"{state}, no heartbeat for {self.spec.hang_timeout:g}s")
            time.sleep(self.spec.monitor_interval)

    @staticmethod
    def _leader(procs: list[TaskProcess]):
        leader = leader_of(TaskId(p.plan.task_type, p.plan.task_index) for p in procs)
        return (leader.type, leader.index) if leader else None

    @staticmethod
    def _lost_port_race(proc: TaskProcess) -> bool:
        elapsed = (proc.ended_at or time.monotonic()) - proc.started_at
        return elapsed < 60 and any(m in line for line in proc.stderr_tail for m in PORT_CONFLICT_MARKERS)

    @staticmethod
    def _step(procs: list[TaskProcess]) -> int | None:
        beats = [read_heartbeat(p.plan.heartbeat_path) for p in procs if p.plan.task_type in ("chief", "worker")]
        known = [b.step for b in beats if b is not None and b.step is not None]
        return max(known) if known else None

    def _finish_success(self, procs: list[TaskProcess]) -> None:
        """Leader done: let the other training tasks finish on their own, then stop everyone left."""
        # Workers of a ParameterServerStrategy job serve until stopped, like the parameter servers. An evaluator may
        # be scoring the final model: it gets the same moment to finish.
        self._wait_for_trainers(procs, AFTER_SUCCESS_WAIT_S, roles=("evaluator",) if self.spec.ps else
                                ("chief", "worker", "evaluator"))
        stop_all(procs, min(AFTER_SUCCESS_GRACE_S, self.spec.grace_period))
        self._set_state(GroupState.SUCCEEDED)

    def _wait_for_trainers(self, procs: list[TaskProcess], seconds: float,
                           roles: tuple[str, ...] = ("chief", "worker")) -> None:
        deadline = time.monotonic() + seconds
        trainers = [p for p in procs if p.plan.task_type in roles]
        while time.monotonic() < deadline and any(p.poll() is None for p in trainers):
            time.sleep(self.spec.monitor_interval)

    # -- the restart loop ----------------------------------------------------------------------------------------
    def _may_restart(self) -> bool:
        now = time.monotonic()
        window = self.spec.restart_window
        recent = [t for t in self._restart_times if window <= 0 or now - t < window]
        return len(recent) < self.spec.max_restarts

    def _backoff(self) -> float:
        if self.spec.backoff <= 0:
            return 0.0
        return min(self.spec.backoff_max, self.spec.backoff * 2 ** max(0, len(self._restart_times) - 1))

    def run(self) -> LaunchResult:
        """Start, watch and restart the group; returns when the job has succeeded, failed for good, or was stopped."""
        previous = self._install_signal_handlers()
        self._say(f"job {self.run_id}: logs in {self.log_dir}")
        port_retries = 0
        preemptions = 0
        attempt = 0
        try:
            while True:
                started = time.monotonic()
                procs = self._start(attempt)
                outcome = self._watch(procs, attempt, started)
                self.result.attempts.append(outcome)
                self._set_state(self.state, procs)
                if outcome.cause in (Cause.SUCCEEDED, Cause.PREEMPTED, Cause.INTERRUPTED):
                    final = {Cause.SUCCEEDED: GroupState.SUCCEEDED, Cause.PREEMPTED: GroupState.PREEMPTED,
                             Cause.INTERRUPTED: GroupState.INTERRUPTED}[outcome.cause]
                    self._set_state(final)
                    return self.result
                if outcome.cause is Cause.PORT_CONFLICT and port_retries < MAX_PORT_RETRIES \
                        and self.spec.port_base is None:
                    port_retries += 1
                    self._say("a task lost its port to another program: retrying with fresh ports")
                    attempt += 1
                    continue
                if outcome.cause is Cause.TASK_PREEMPTED and preemptions < MAX_PREEMPTION_RESTARTS:
                    preemptions += 1
                    self._say("restarting the preempted group from its checkpoint (not counted as a failure)")
                    attempt += 1
                    continue
                if not self._may_restart():
                    self._set_state(GroupState.FAILED)
                    return self.result
                self._set_state(GroupState.RESTARTING)
                self._restart_times.append(time.monotonic())
                if self.metrics is not None:
                    self.metrics.restart()
                delay = self._backoff()
                self._say(f"restarting the group ({len(self._restart_times)}/{self.spec.max_restarts})"
                          + (f" in {delay:.1f}s" if delay else ""))
                if delay:
                    self._sleep_unless_stopped(delay)
                    if self._stop_signal is not None:
                        return self.result
                attempt += 1
        finally:
            self._discard_spares()
            for sig, handler in previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]

    def _sleep_unless_stopped(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._stop_signal is None:
            time.sleep(min(0.1, self.spec.monitor_interval * 2))
