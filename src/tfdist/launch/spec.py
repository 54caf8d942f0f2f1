"""The typed description of a launch: what the CLI parses into, what the supervisor runs."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchSpec:
    """Everything ``tfdist launch`` needs to start and supervise a job on this machine.

    Attributes:
        command: the program and arguments to run for every task (already resolved: ``[python, script, ...]``).
        workers: number of ``worker`` tasks.
        ps: number of parameter servers (``ParameterServerStrategy``).
        chief: add a ``chief`` task.
        evaluator: add an ``evaluator`` task (outside the cluster; its failure does not stop training).
        max_restarts: how many times the whole group may be restarted after a failure (within ``restart_window``).
        restart_window: seconds; restarts older than this no longer count against ``max_restarts`` (0: never expire).
        log_dir: one log file per task and attempt goes here; ``None``: a temporary folder.
        tee: also print task output to the console when ``log_dir`` is given.
        port_base: first port of a consecutive block; ``None``: free ports found by binding.
        host: the address tasks listen on and reach each other at.
        env: extra variables for every task.
        gpus_per_task: GPUs for each training task; ``None``: split the visible GPUs evenly.
        grace_period: seconds a task has to save and exit after SIGTERM (preemption) before SIGKILL.
        monitor_interval: seconds between polls of the tasks' state.
        hang_timeout: seconds without a heartbeat (after the first) before a task counts as hung (0: off).
        backoff: seconds before the first restart; doubles on each further restart, capped at ``backoff_max``.
        metrics_port: first port of the tasks' Prometheus endpoints (task i gets ``metrics_port + i``).
        metrics_host: address the metrics endpoints bind.
        allow_keras3: start a multi-worker job even though only Keras 3 is installed (custom training loops).
        warm_spares: with restarts allowed, keep one process per task with TensorFlow already imported, so a
            restarted group skips that import (see ``tfdist.launch.spare``).
        job_name: a label for logs and metrics.
    """

    command: tuple[str, ...]
    workers: int = 1
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    max_restarts: int = 0
    restart_window: float = 0.0
    log_dir: str | None = None
    tee: bool = False
    port_base: int | None = None
    host: str = "127.0.0.1"
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    gpus_per_task: int | None = None
    nccl_debug: bool = False
    grace_period: float = 30.0
    monitor_interval: float = 0.05
    hang_timeout: float = 300.0
    backoff: float = 0.0
    backoff_max: float = 30.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    allow_keras3: bool = False
    warm_spares: bool = True
    job_name: str = "tfdist"
