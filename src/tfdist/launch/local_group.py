"""This machine's workers for one round of a multi-machine job: start, poll, stop. Mechanism, no policy.

The tasks are planned by the same builders as a single-machine launch (``taskenv.plan_tasks``) from the cluster
the rendezvous sent, and started by the same process helpers (``procs``), so their environment, logs, heartbeat
and error files are the ones the single-machine supervisor gives. Output is prefixed with the machine's node rank:
``[node1 worker:3] ...``.
"""
from __future__ import annotations

import os
import signal
from typing import Mapping

from tfdist.launch.outcome import describe_exit
from tfdist.launch.procs import Console, TaskProcess, spawn, stop_all
from tfdist.launch.protocol import PREEMPTED_EXIT_CODE as PREEMPTED
from tfdist.launch.protocol import Command, read_error, read_heartbeat
from tfdist.launch.spec import LaunchSpec, Timeouts
from tfdist.launch.taskenv import plan_tasks
from tfdist.launch.tf_config import ClusterLayout


class NodeConsole(Console):
    """Console lines prefixed ``[node<rank> worker:<i>]`` instead of ``[worker:<i>]``."""

    def __init__(self, node_rank: int) -> None:
        super().__init__(enabled=True)
        self.node = f"node{node_rank}"

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None:
        super().write(f"[{self.node} {prefix.strip('[]')}]", line, to_stderr=to_stderr)


class LocalGroup:
    """Workers ``first_index .. first_index + slots - 1`` of a ``world_size``-worker cluster, on this machine."""

    def __init__(self, *, command: Command, workers: tuple[str, ...], first_index: int, slots: int,
                 node_rank: int, round_: int, job: str, log_dir: str, env: Mapping[str, str], legacy_keras: bool,
                 max_restarts: int, grace_period: float, base_env: Mapping[str, str] | None = None) -> None:
        self.node_rank = node_rank
        self.round = round_
        self.log_dir = log_dir
        self.timeouts = Timeouts(grace=grace_period)
        self.base_env = dict(os.environ if base_env is None else base_env)
        # workers=slots: thread caps share this machine's cores among its own tasks (the layout gives the cluster).
        spec = LaunchSpec(command=command, workers=slots, job_name=job, max_restarts=max_restarts,
                          env=tuple(env.items()), timeouts=self.timeouts)
        layout = ClusterLayout(worker=workers)
        indices = range(first_index, first_index + slots)
        plans = plan_tasks(spec, layout, run_id=f"{job}-r{round_}", attempt=round_, log_dir=log_dir,
                           legacy_keras=legacy_keras, environ=self.base_env)
        self.plans = [p for p in plans if p.task_index in indices]
        self.procs: list[TaskProcess] = []
        self.reported_training = False
        self.console = NodeConsole(node_rank)

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        try:
            for plan in self.plans:
                log_path = os.path.join(self.log_dir, f"{plan.task_type}-{plan.task_index}.log")
                self.procs.append(spawn(plan, attempt=self.round, base_env=self.base_env, log_path=log_path,
                                        console=self.console))
        except OSError:
            stop_all(self.procs, 0.0)
            raise

    def describe(self) -> str:
        return ", ".join(f"{p.name} pid {p.pid} {p.plan.address}" for p in self.procs)

    def training(self) -> bool:
        """Every local worker has sent a heartbeat (it trains, and its preemption handler is installed)."""
        return all(os.path.exists(p.plan.heartbeat_path) for p in self.procs)

    def step(self) -> int | None:
        records = [read_heartbeat(p.plan.heartbeat_path) for p in self.procs]
        steps = [r.step for r in records if r is not None and r.step is not None]
        return max(steps) if steps else None

    def outcome(self) -> tuple[str, str] | None:
        """None while running; else ``(succeeded|failed|preempted, detail)``. The first failure decides."""
        codes = [p.poll() for p in self.procs]
        for proc, code in zip(self.procs, codes):
            if code is not None and code not in (0, PREEMPTED):
                error = read_error(proc.plan.error_path)
                detail = f"{proc.name} {describe_exit(code)}"
                if error is not None:
                    detail += f": {error.type}: {error.message[:200]}"
                elif proc.stderr_tail:
                    detail += f": {proc.stderr_tail[-1].strip()[:200]}"
                return "failed", detail
        if any(code is None for code in codes):
            return None  # still running (after a 143 the others are saving too)
        if all(code == 0 for code in codes):
            return "succeeded", "all workers exited 0"
        return "preempted", "workers saved and exited 143"

    def stop(self, *, graceful: bool) -> str:
        """Stop every local worker; returns ``preempted`` when all saved (exit 143), else ``stopped``."""
        if graceful:
            stop_all(self.procs, self.timeouts.grace)
        else:  # peers of a failed or lost task cannot finish a collective: a short grace, then SIGKILL
            stop_all(self.procs, min(self.timeouts.failure_grace, self.timeouts.grace), first_signal=signal.SIGTERM)
        codes = [p.poll() for p in self.procs]
        return "preempted" if codes and all(c in (PREEMPTED, 0) for c in codes) else "stopped"
