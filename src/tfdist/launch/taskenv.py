"""Pure builders: the environment each task gets, and how local GPUs are shared out."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping, Sequence

from tfdist import constants as C
from tfdist.errors import UsageError
from tfdist.launch.spec import LaunchSpec
from tfdist.launch.tf_config import ClusterLayout, TaskId, tf_config_for


@dataclass(frozen=True)
class TaskPlan:
    """One task as it will be started: identity, address, environment additions, command."""

    task: TaskId
    address: str
    env: Mapping[str, str]
    command: tuple[str, ...]


def layout_for(spec: LaunchSpec, ports: Sequence[int]) -> ClusterLayout:
    """Assign ``ports`` (chief, workers, ps, evaluator order) to the roles the spec asks for."""
    counts = {"chief": int(spec.chief), "worker": spec.workers, "ps": spec.ps, "evaluator": int(spec.evaluator)}
    needed = sum(counts.values())
    if len(ports) < needed:
        raise ValueError(f"{needed} ports needed, {len(ports)} given")
    addresses: dict[str, tuple[str, ...]] = {}
    cursor = 0
    for role, count in counts.items():
        addresses[role] = tuple(f"{spec.host}:{p}" for p in ports[cursor:cursor + count])
        cursor += count
    return ClusterLayout(**addresses)


def count_tasks(spec: LaunchSpec) -> int:
    return int(spec.chief) + spec.workers + spec.ps + int(spec.evaluator)


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """GPU ids this launcher may hand out: CUDA_VISIBLE_DEVICES if set, else those ``nvidia-smi -L`` lists."""
    preset = environ.get(C.CUDA_VISIBLE_DEVICES)
    if preset is not None:
        return [g.strip() for g in preset.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def assign_gpus(tasks: Sequence[TaskId], gpus: Sequence[str], per_task: int | None) -> dict[TaskId, str]:
    """Give each training task (chief, workers) its own GPUs; parameter servers and the evaluator get none.

    With ``per_task`` unset the GPUs are split evenly, so no two tasks share a device.

    Raises:
        UsageError: more GPUs asked for than are visible.
    """
    if not gpus:
        return {}
    trainers = [t for t in tasks if t.type in ("chief", "worker")]
    share = per_task if per_task is not None else max(1, len(gpus) // max(1, len(trainers)))
    if per_task is not None and per_task * len(trainers) > len(gpus):
        raise UsageError(f"--gpus-per-task {per_task} x {len(trainers)} tasks needs {per_task * len(trainers)} GPUs, "
                         f"{len(gpus)} visible", hint="lower --gpus-per-task or start fewer workers")
    result: dict[TaskId, str] = {}
    for i, task in enumerate(tasks):
        if task.type in ("chief", "worker"):
            chunk = list(gpus[i * share:(i + 1) * share]) if (i + 1) * share <= len(gpus) else []
            # More trainers than GPUs: they share round-robin rather than silently run on the CPU.
            result[task] = ",".join(chunk) if chunk else gpus[i % len(gpus)]
        else:
            result[task] = ""
    return result


def plan_tasks(spec: LaunchSpec, layout: ClusterLayout, *, run_id: str, attempt: int, log_dir: str,
               gpus: Sequence[str] = (), legacy_keras: bool | None = None) -> list[TaskPlan]:
    """Every task's environment additions and command for one attempt (pure: reads nothing)."""
    tasks = layout.tasks()
    gpu_map = assign_gpus(tasks, gpus, spec.gpus_per_task)
    plans = []
    for position, task in enumerate(tasks):
        env: dict[str, str] = {
            C.TF_CONFIG: tf_config_for(layout, task),
            C.TASK_TYPE: task.type,
            C.TASK_INDEX: str(task.index),
            C.RESTART_COUNT: str(attempt),
            C.MAX_RESTARTS: str(spec.max_restarts),
            C.RUN_ID: run_id,
            C.JOB_NAME: spec.job_name,
            C.ERROR_FILE: os.path.join(log_dir, f"{task.type}-{task.index}.error.json"),
            C.HEARTBEAT_FILE: os.path.join(log_dir, f"{task.type}-{task.index}.heartbeat"),
            "PYTHONUNBUFFERED": "1",
        }
        if legacy_keras:
            env[C.LEGACY_KERAS] = "1"
        if task in gpu_map:
            env[C.CUDA_VISIBLE_DEVICES] = gpu_map[task]
        if spec.nccl_debug:
            env["NCCL_DEBUG"] = "INFO"
        if spec.metrics_port is not None:
            env[C.METRICS_PORT] = str(spec.metrics_port + position)
            env[C.METRICS_HOST] = spec.metrics_host
        env.update(dict(spec.env))  # the user's --env wins over our defaults
        plans.append(TaskPlan(task=task, address=layout.address(task), env=env, command=spec.command))
    return plans


def parse_env_pairs(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["A=1", "B=x=y"]`` -> ``(("A", "1"), ("B", "x=y"))``.

    Raises:
        UsageError: a pair has no ``=`` or an empty name.
    """
    result = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not name.replace("_", "a").isalnum():
            raise UsageError(f"--env {pair!r} is not KEY=VALUE", hint="write it as --env NAME=value")
        result.append((name, value))
    return tuple(result)
