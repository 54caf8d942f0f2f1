"""The typed description of a launch: what the CLI parses into, what the supervisor runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from tfdist.launch.options import DEFAULTS
from tfdist.protocol import Command


@dataclass(frozen=True)
class Timeouts:
    """Every wait of the supervisor, in seconds; tests shorten them instead of waiting.

    Attributes:
        grace: a stopped or preempted task's time to save and exit after SIGTERM, before SIGKILL (--grace-period).
        hang: a training task that sent heartbeats and then none for this long is hung (--hang-timeout; 0: off).
        poll: between polls of the tasks' state.
        failure_grace: after a task failed. Its peers cannot finish a collective or a coordinated save
            (MultiWorkerMirroredStrategy workers even treat SIGTERM as a preemption notice and keep running), so
            waiting longer would only delay the restart.
        untrained_grace: a stop before any task has sent its first heartbeat: nothing to save yet.
        after_success: once the leader succeeded, how long the other training tasks may take to finish.
        after_success_grace: then parameter servers and the evaluator, which have nothing to save.
        spares_after: warm spares start once every training task sent a heartbeat, or after this long.
        spares_worth: a job that says its length starts warm spares only with this much training left (seconds;
            ``tfdist.launch.local.spare_timing``).
    """

    grace: float = DEFAULTS.grace_period
    hang: float = DEFAULTS.hang_timeout
    poll: float = 0.05
    failure_grace: float = 0.1
    untrained_grace: float = 1.0
    after_success: float = 10.0
    after_success_grace: float = 2.0
    spares_after: float = 30.0
    spares_worth: float = 20.0  # about 4 times what a spare's imports take on a small machine


@dataclass(frozen=True)
class LaunchSpec:
    """Everything ``tfdist launch`` needs to start and supervise a job's tasks on this machine.

    Attributes:
        command: what every task runs (a :class:`Command`; a plain argv tuple is taken as a program and its args).
        workers, ps, chief, evaluator: the job's roles (see ``tfdist.launch.local.layout``).
        max_restarts: how many times the whole group may be restarted after a failure (within ``restart_window``).
        restart_window: seconds; restarts older than this no longer count against ``max_restarts`` (0: never expire).
        backoff: seconds before the first restart; doubles on each further restart, capped at ``backoff_max``.
        log_dir: one log file per task and attempt goes here; ``None``: a temporary folder, removed at the end.
        tee: also print task output to the console when ``log_dir`` is given.
        port_base: first port of a consecutive block; ``None``: free ports found by binding.
        host: the address tasks listen on and reach each other at.
        env: extra variables for every task (protocol variables refused).
        gpus_per_task: GPUs for each training task; ``None``: split the visible GPUs evenly.
        metrics_port: first port of the tasks' Prometheus endpoints (task i gets ``metrics_port + i``).
        metrics_host: address the metrics endpoints bind.
        launcher_metrics_port: the launcher's own metrics endpoint (checked with the other ports before any start).
        allow_keras3: start a multi-worker job even though only Keras 3 is installed (custom training loops).
        warm_spares: with restarts allowed, keep one process per task with TensorFlow already imported, so a
            restarted group skips that import (see ``tfdist.launch.process.spare_process``).
        thread_caps: cap each task's TensorFlow/OpenMP thread pools to its share of the cores.
        bootstrap: run the task bootstrap (``tfdist.runtime.bootstrap``) in each Python task, so that a plain script
            sends heartbeats, states and its error record; False: the script runs with nothing of tfdist in it.
        restart_after_training: restart the group after a failure that came once every training task's ``fit``
            had returned (retraining everything); False: report it and stop.
        job_name: a label for logs and metrics.
        flight_recorder: read every task's stacks, step and output before a hung or failed group is stopped, and
            write the ``hang-attempt-N`` report (``tfdist.launch.flight``); False: stop at once, no report.
        firewall: ``--firewall``: an nftables table admits to the tasks' ports only this job (launch/firewall/).
        timeouts: every wait (see :class:`Timeouts`).
        cluster: the whole job's addresses when given from outside (a per-machine agent of a multi-machine job);
            ``None``: all tasks run here on ports chosen here.
        local_tasks: with ``cluster``, the names (``worker:2``) of the tasks this machine runs; ``None``: all.
    """

    command: Command
    workers: int = DEFAULTS.workers
    ps: int = DEFAULTS.ps
    chief: bool = DEFAULTS.chief
    evaluator: bool = DEFAULTS.evaluator
    max_restarts: int = 0  # library callers (tests) do not restart; the CLI's default is DEFAULTS.max_restarts
    restart_window: float = DEFAULTS.restart_window
    backoff: float = 0.0  # library callers (tests) restart at once; the CLI's default is DEFAULTS.backoff
    backoff_max: float = 30.0
    log_dir: str | None = None
    tee: bool = DEFAULTS.tee
    port_base: int | None = None
    host: str = DEFAULTS.host
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    gpus_per_task: int | None = None
    nccl_debug: bool = DEFAULTS.nccl_debug
    metrics_port: int | None = None
    metrics_host: str = DEFAULTS.metrics_host
    launcher_metrics_port: int | None = None
    allow_keras3: bool = DEFAULTS.allow_keras3
    warm_spares: bool = DEFAULTS.warm_spares
    thread_caps: bool = DEFAULTS.thread_caps
    bootstrap: bool = DEFAULTS.bootstrap
    restart_after_training: bool = DEFAULTS.restart_after_training
    job_name: str = DEFAULTS.job_name
    flight_recorder: bool = DEFAULTS.flight_recorder
    firewall: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
    cluster: object | None = None  # a ClusterLayout (kept untyped here so the spec imports nothing heavy)
    local_tasks: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, Command):
            object.__setattr__(self, "command", command_from_argv(self.command))


def warm_spares_wanted(asked: bool, *, max_restarts: int, elastic: bool, is_python: bool) -> bool:
    """The one warm-spares rule, for one machine and across machines: spares (processes with TensorFlow already
    imported, see ``tfdist.launch.process.spare_pool``) only pay when a next group can start (a restart is allowed,
    or an elastic ``--nnodes MIN:MAX`` job's next round can come with a machine joining or leaving) and when the
    tasks are Python (a spare is a Python interpreter). ``asked``: ``--warm-spares``."""
    return asked and (max_restarts > 0 or elastic) and is_python


def command_from_argv(argv: Sequence[str]) -> Command:
    """A plain argv (``python script.py a``, ``prog a``) as a program with arguments: no warm spares for it, since
    we cannot know which of its words are the interpreter's options."""
    if not argv:
        raise ValueError("empty command")
    return Command(target=argv[0], args=tuple(argv[1:]))
