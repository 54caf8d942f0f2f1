"""Pure builders: the environment each task gets, and how local GPUs are shared out."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping, Sequence

from tfdist.cluster import format_address
from tfdist.errors import UsageError
from tfdist import protocol as C
from tfdist.protocol import TaskPlan, bootstrap_environment, refuse_protected
from tfdist.launch.spec import LaunchSpec
from tfdist.cluster.grpc_keepalive import keepalive_env
from tfdist.launch.local.layout import ClusterLayout, TaskId, tf_config_for

__all__ = ["TaskPlan", "assign_gpus", "count_tasks", "layout_for", "plan_tasks", "visible_gpus"]


def layout_for(spec: LaunchSpec, ports: Sequence[int]) -> ClusterLayout:
    """Assign ``ports`` (chief, workers, ps, evaluator order) to the roles the spec asks for."""
    counts = {"chief": int(spec.chief), "worker": spec.workers, "ps": spec.ps, "evaluator": int(spec.evaluator)}
    needed = sum(counts.values())
    if len(ports) < needed:
        raise ValueError(f"{needed} ports needed, {len(ports)} given")
    addresses: dict[str, tuple[str, ...]] = {}
    cursor = 0
    for role, count in counts.items():
        addresses[role] = tuple(format_address(spec.host, p) for p in ports[cursor:cursor + count])
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


def shared_env(spec: LaunchSpec, legacy_keras: bool | None, environ: Mapping[str, str] = {}) -> dict[str, str]:
    """Variables every task gets, the same for all (also what a warm spare sees at import): launcher defaults (never
    over a value the launcher's own ``environ`` already has), then the user's ``--env`` (which wins, except over the
    protocol's own variables)."""
    env = {"PYTHONUNBUFFERED": "1"}
    if legacy_keras:
        env[C.LEGACY_KERAS] = "1"
    if spec.nccl_debug:
        env["NCCL_DEBUG"] = "INFO"
    env.update({k: v for k, v in thread_caps(spec).items() if k not in environ})
    env.update(keepalive_env(spec.ps, environ))
    user = dict(spec.env)
    refuse_protected(user)
    env.update(user)
    if spec.bootstrap and spec.command.is_python:  # the task bootstrap (tfdist.runtime.bootstrap) runs first
        env.update(bootstrap_environment(user.get("PYTHONPATH", environ.get("PYTHONPATH"))))
    return env


def thread_caps(spec: LaunchSpec, cores: int | None = None) -> dict[str, str]:
    """Cap TensorFlow's and OpenMP's thread pools to each training task's share of the cores.

    Each TensorFlow process sizes its inter- and intra-op pools to *all* cores, so N tasks share each core N ways.
    Opt-in (--thread-caps): on a 2-core machine it saved ~4 threads per task and no measurable time; the thread
    exhaustion seen there came from the collective timeout (see ``tfdist.runtime.strategy``). Values the user set
    (environment or --env) win.
    """
    if not spec.thread_caps:
        return {}
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    trainers = max(1, spec.workers + int(spec.chief))
    share = str(max(1, cores // trainers))
    return {"TF_NUM_INTEROP_THREADS": share if trainers > 1 else str(max(1, cores)),
            "TF_NUM_INTRAOP_THREADS": share, "OMP_NUM_THREADS": share}


def plan_tasks(spec: LaunchSpec, layout: ClusterLayout, *, run_id: str, attempt: int, log_dir: str,
               gpus: Sequence[str] = (), legacy_keras: bool | None = None,
               environ: Mapping[str, str] = {}, snapshot_dir: str | None = None) -> list[TaskPlan]:
    """Every task's plan for one attempt (pure: reads nothing)."""
    tasks = layout.tasks()
    gpu_map = assign_gpus(tasks, gpus, spec.gpus_per_task)
    shared = shared_env(spec, legacy_keras, environ)
    plans = []
    for position, task in enumerate(tasks):
        extra = dict(shared)
        if task in gpu_map and C.CUDA_VISIBLE_DEVICES not in dict(spec.env):
            extra[C.CUDA_VISIBLE_DEVICES] = gpu_map[task]
        plans.append(TaskPlan(
            task_type=task.type, task_index=task.index, address=layout.address(task),
            tf_config=tf_config_for(layout, task), command=spec.command, run_id=run_id, attempt=attempt,
            max_restarts=spec.max_restarts, job_name=spec.job_name,
            heartbeat_path=os.path.join(log_dir, f"{task.type}-{task.index}.heartbeat"),
            error_path=os.path.join(log_dir, f"{task.type}-{task.index}.error.json"),
            metrics_port=None if spec.metrics_port is None else spec.metrics_port + position,
            metrics_host=spec.metrics_host if spec.metrics_port is not None else None, snapshot_dir=snapshot_dir,
            extra_env=extra))
    return plans
