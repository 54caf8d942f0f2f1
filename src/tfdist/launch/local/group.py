"""The mechanism of one attempt: start the local tasks, poll them into an immutable snapshot, stop them. No rules
here (those are in ``tfdist.launch.local.rules``), no restarts (``tfdist.launch.local.restart``)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from typing import Callable, Mapping, Sequence

import psutil

from tfdist.launch.console.tflog import hidden
from tfdist.launch.clues import unhealthy_peers
from tfdist.launch.outcome import TaskFailure
from tfdist.launch.process.spawn import TaskProcess, activate, spawn, stop_all
from tfdist.launch.seams import OutputSink
from tfdist.protocol import HeartbeatRecord, TaskPlan, read_error, read_heartbeat
from tfdist.launch.flight.watch import QuietWatch
from tfdist.launch.local.snapshot import GroupSnapshot, TaskView
from tfdist.launch.process.spare_pool import SparePool

# Lines in a task's stderr that mean it lost the race for its port (gRPC and Python spellings).
PORT_CONFLICT_MARKERS = ("Address already in use", "Failed to add port", "EADDRINUSE", "Could not start gRPC server")
PORT_RACE_WINDOW_S = 60.0  # a bind failure later than this is not a start-up race
KILL_WAIT_S = 5.0  # restart_task: how long a killed hung task may take to die before its successor starts
# A C++ runtime that could not create a thread (or a process) aborts with these: the machine was short of threads or
# processes for a moment (RLIMIT_NPROC, the pids cgroup), which a retry may well not meet again.
TRANSIENT_MARKERS = ("Resource temporarily unavailable", "pthread_create", "std::system_error",
                     "Cannot allocate memory", "can't start new thread")


class TaskGroup:
    """The local tasks of one attempt.

    Args:
        plans: one per local task.
        attempt_dir: where each task's log goes (``<type>-<index>.log``) and ``tasks.json`` (pid of each task).
        base_env: the launcher's environment the tasks inherit (plans add theirs on top).
        spares: warm spares to take before starting cold (or None).
    """

    def __init__(self, plans: Sequence[TaskPlan], *, attempt: int, attempt_dir: str, base_env: Mapping[str, str],
                 console: OutputSink, spares: SparePool | None = None) -> None:
        self.plans = list(plans)
        self.attempt = attempt
        self.attempt_dir = attempt_dir
        self.base_env = base_env
        self.console = console
        self.spares = spares
        self.sweep: Callable[[], object] | None = None  # kills what the tasks left behind (see reaper.kill_strays)
        self.procs: list[TaskProcess] = []
        self.start_errors: dict[str, str] = {}
        self.warm = 0
        self.started = time.monotonic()
        self._beats: dict[str, tuple[float, HeartbeatRecord | None]] = {}
        self._first_step: dict[str, int | None] = {}
        self._quiet = QuietWatch()

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Start every task (from a warm spare where one is ready); a task that cannot start is recorded, not
        raised. Stops starting when ``should_stop()`` turns true."""
        os.makedirs(self.attempt_dir, exist_ok=True)
        self.started = time.monotonic()
        for plan in self.plans:
            if should_stop() or self.start_errors:
                break
            log_path = os.path.join(self.attempt_dir, f"{plan.task_type}-{plan.task_index}.log")
            try:
                proc = self._from_spare(plan, log_path)
                if proc is None:
                    proc = spawn(plan, attempt=self.attempt, base_env=self.base_env, log_path=log_path,
                                 console=self.console)
                else:
                    self.warm += 1
            except OSError as error:
                self.start_errors[plan.name] = f"cannot start {plan.command.program}: {error.strerror or error}"
                continue
            self.procs.append(proc)
        self._write_pids()

    def _from_spare(self, plan: TaskPlan, log_path: str) -> TaskProcess | None:
        while self.spares is not None:
            spare = self.spares.take()
            if spare is None:
                return None
            try:
                return activate(spare, plan, attempt=self.attempt, log_path=log_path, console=self.console)
            except OSError:
                spare.discard()
        return None

    def _write_pids(self) -> None:
        # Which pid is which task: a task started from a warm spare got its TFDIST_* variables after exec, so they
        # are not in /proc/<pid>/environ; operators, the live view and tests read this file instead.
        # A temporary file of its own: machines sharing a --log-dir start a round at the same moment, and with one
        # shared temporary name the second rename found nothing and stopped that machine's launcher.
        handle, tmp = tempfile.mkstemp(prefix=".tasks.json.", suffix=".tmp", dir=self.attempt_dir)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump([{"task": p.name, "pid": p.pid, "address": p.plan.address} for p in self.procs], stream)
            os.replace(tmp, os.path.join(self.attempt_dir, "tasks.json"))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def restart_task(self, name: str) -> TaskProcess:
        """Start task ``name`` again, alone, from its own plan (same index, address and TF_CONFIG), in place of its
        exited (or hung: killed here) process; its log file goes on (appended). The other tasks are not touched."""
        index = next(i for i, p in enumerate(self.procs) if p.name == name)
        old = self.procs[index]
        old.signal_group(signal.SIGKILL)  # what it started itself, if anything is left of its process group
        # A hung task still runs: it must be gone before its successor binds the same address (bounded: a task
        # stuck in the kernel is left behind, and its successor, finding the port taken, ends the attempt).
        deadline = time.monotonic() + KILL_WAIT_S
        while old.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        log_path = old.log_path
        proc = self._from_spare(old.plan, log_path)
        if proc is None:
            proc = spawn(old.plan, attempt=self.attempt, base_env=self.base_env, log_path=log_path,
                         console=self.console)
        self.procs[index] = proc
        self._first_step.pop(name, None)
        self._write_pids()
        return proc

    def summary(self) -> str:
        return ", ".join(f"{p.name} pid {p.pid} {p.plan.address}" for p in self.procs)

    # -- poll ----------------------------------------------------------------------------------------------------
    def poll(self, *, stale_after: float = 0.0) -> GroupSnapshot:
        """The group now. ``stale_after``: only tasks silent for longer are checked for being stopped (SIGSTOP),
        or every running task once one has failed (a stopped peer is the likelier cause)."""
        now_wall, now = time.time(), time.monotonic()
        codes = [proc.poll() for proc in self.procs]
        one_failed = any(code not in (None, 0) for code in codes)
        views = [TaskView(name=plan.name, task_type=plan.task_type, task_index=plan.task_index,
                          start_error=self.start_errors[plan.name]) for plan in self.plans
                 if plan.name in self.start_errors]
        for proc, code in zip(self.procs, codes):
            beat, age = self._heartbeat(proc, now_wall)
            # A task that sends no heartbeats is watched by its CPU time and output instead (sampled, cheap).
            quiet = self._quiet.observe(proc.pid, proc.log_path, now) if code is None and age is None else None
            stale = age if age is not None else quiet
            # Once a task failed every running one is checked: a stopped peer is the likelier cause.
            stopped = code is None and (one_failed or (stale is not None and 0 < stale_after < stale)) \
                and _is_stopped(proc.pid)
            tail = list(proc.stderr_tail) if code is not None else []
            views.append(TaskView(
                name=proc.name, task_type=proc.plan.task_type, task_index=proc.plan.task_index, pid=proc.pid,
                exit_code=code, ended_at=None if proc.ended_at is None else proc.ended_at - self.started,
                heartbeat=beat, heartbeat_age=age, quiet_for=quiet, stopped=stopped, progressed=self._progressed(proc.name, beat),
                lost_port=code not in (None, 0) and (proc.ended_at or now) - proc.started_at < PORT_RACE_WINDOW_S
                and _mentions(tail, PORT_CONFLICT_MARKERS),
                transient=code not in (None, 0) and _mentions(tail, TRANSIENT_MARKERS),
                blames=unhealthy_peers(tail) if code not in (None, 0) else ()))
        return GroupSnapshot(tasks=tuple(views), elapsed=now - self.started)

    def _progressed(self, name: str, beat: HeartbeatRecord | None) -> bool:
        if beat is None or beat.step is None:
            return False
        first = self._first_step.setdefault(name, beat.step)
        return beat.step > first

    def _heartbeat(self, proc: TaskProcess, now_wall: float) -> tuple[HeartbeatRecord | None, float | None]:
        try:
            mtime = os.stat(proc.plan.heartbeat_path).st_mtime
        except OSError:
            return None, None
        cached = self._beats.get(proc.name)
        if cached is None or cached[0] != mtime:  # read the record only when it changed
            cached = (mtime, read_heartbeat(proc.plan.heartbeat_path))
            self._beats[proc.name] = cached
        return cached[1], max(0.0, now_wall - mtime)

    # -- stop ----------------------------------------------------------------------------------------------------
    def wait_for(self, roles: Sequence[str], seconds: float, *, poll: float,
                 interrupted: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``seconds`` for the tasks of ``roles`` to exit on their own."""
        deadline = time.monotonic() + seconds
        waiting = [p for p in self.procs if p.plan.task_type in roles]
        while time.monotonic() < deadline and not interrupted() and any(p.poll() is None for p in waiting):
            time.sleep(poll)

    def stop(self, grace: float, *, first_signal: int = signal.SIGTERM,
             kill_now: Callable[[], bool] = lambda: False) -> None:
        """Stop every task (``first_signal``, then SIGKILL after ``grace``), then every stray descendant."""
        stop_all(self.procs, grace, first_signal=first_signal, kill_now=kill_now, sweep=self.sweep)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def failure(self, name: str | None) -> TaskFailure | None:
        """The typed record of task ``name``'s end, for the report."""
        proc = next((p for p in self.procs if p.name == name), None)
        if proc is None:
            if name in self.start_errors:
                plan = next(p for p in self.plans if p.name == name)
                return TaskFailure(task=name, pid=0, exit_code=None, log_path=os.path.join(
                    self.attempt_dir, f"{plan.task_type}-{plan.task_index}.log"), start_error=self.start_errors[name])
            return None
        # The excerpt shows what the console showed: TensorFlow's C++ lines below the console's level stay in the log.
        shown = tuple(line for line in proc.stderr_tail if not hidden(line, self.console.tf_log_level))
        return TaskFailure(task=proc.name, pid=proc.pid, exit_code=proc.exit_code, log_path=proc.log_path,
                           stderr_tail=shown, error=read_error(proc.plan.error_path))


def _mentions(lines: Sequence[str], markers: Sequence[str]) -> bool:
    return any(marker in line for line in lines for marker in markers)


def _is_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False
