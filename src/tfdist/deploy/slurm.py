"""The sbatch script ``tfdist slurm`` writes (pure: a typed spec in, script text out).

The script (template ``templates/slurm/job.sbatch``) starts every task with ``srun --kill-on-bad-exit=1`` through
``tfdist tf-config --exec``, which resolves TF_CONFIG from Slurm's variables (see :mod:`tfdist.cluster.resolve`),
retries a failed step up to ``max_restarts`` times, forwards Slurm's early SIGTERM for a graceful stop and requeues,
and keeps one log per task and attempt.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from importlib import resources

from tfdist import __version__
from tfdist.errors import UsageError

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::([0-5]?\d))?(?::([0-5]?\d))?$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class SlurmJobSpec:
    """What ``tfdist slurm`` was asked for.

    Attributes:
        script: the training script, as the job's working directory (the submit directory) sees it.
        args: its arguments.
        nodes: ``--nodes``.
        tasks_per_node: ``--ntasks-per-node``; one TensorFlow task each.
        job_name: ``--job-name`` (also names logs and the default checkpoint directory).
        python: the interpreter on the compute nodes that has tfdist installed.
        gpus_per_task: ``--gpus-per-task`` (0: none requested).
        cpus_per_task: ``--cpus-per-task`` (0: Slurm's default).
        partition: ``--partition`` or None.
        time: ``--time`` limit, Slurm syntax (``HH:MM:SS``, ``D-HH:MM``...), or None for the partition default.
        max_restarts: how often a failed step is started again within one allocation.
        log_dir: per-task logs.
        model_dir: checkpoints and TensorBoard logs, on a file system all nodes share (exported as TFDIST_MODEL_DIR).
        grace_seconds: how long before the time limit Slurm sends SIGTERM to the batch shell.
        port_base: fixed TFDIST_SLURM_PORT_BASE, or None to derive one from the job id at run time.
        chief: rank 0 is a separate chief. ps: this many ranks are parameter servers. evaluator: the last rank
            evaluates.
        restart_delay_seconds: pause between a failed attempt and the next.
    """

    script: str
    args: tuple[str, ...] = ()
    nodes: int = 1
    tasks_per_node: int = 1
    job_name: str = "tfdist"
    python: str = "python3"
    gpus_per_task: int = 0
    cpus_per_task: int = 0
    partition: str | None = None
    time: str | None = None
    max_restarts: int = 3
    log_dir: str = "logs"
    model_dir: str = ""
    grace_seconds: int = 60
    port_base: int | None = None
    chief: bool = False
    ps: int = 0
    evaluator: bool = False
    restart_delay_seconds: int = 5
    extra_sbatch: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.tasks_per_node < 1:
            raise UsageError("--nodes and --tasks-per-node must be at least 1")
        if self.gpus_per_task < 0 or self.cpus_per_task < 0 or self.max_restarts < 0 or self.ps < 0:
            raise UsageError("counts (--gpus-per-task, --cpus-per-task, --max-restarts, --ps) cannot be negative")
        if not _NAME.match(self.job_name):
            raise UsageError(f"job name {self.job_name!r} is not usable",
                             hint="use 1-64 letters, digits, '.', '_' or '-'")
        if self.time is not None and not _TIME.match(self.time):
            raise UsageError(f"--time {self.time!r} is not a Slurm time",
                             hint="use MM, HH:MM:SS or D-HH:MM:SS")
        if not 10 <= self.grace_seconds <= 65535:
            raise UsageError("--grace must be between 10 and 65535 seconds")
        if self.port_base is not None and not 1024 <= self.port_base <= 65535 - self.tasks_per_node:
            raise UsageError(f"--port-base {self.port_base} leaves no room for {self.tasks_per_node} ports per node")
        workers = self.nodes * self.tasks_per_node - int(self.chief) - self.ps - int(self.evaluator)
        if workers < 0 or (workers == 0 and not self.chief):
            raise UsageError(f"{self.nodes * self.tasks_per_node} tasks cannot hold the chief, {self.ps} parameter "
                             "servers and the evaluator with at least one worker", hint="add nodes or tasks")
        for name, value in (("--partition", self.partition), ("--log-dir", self.log_dir),
                            ("--model-dir", self.model_dir)):
            if value is not None and ("\n" in value or "\0" in value):
                raise UsageError(f"{name} must be one line")

    @property
    def total_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def effective_model_dir(self) -> str:
        return self.model_dir or f"checkpoints/{self.job_name}"


def _template() -> str:
    return resources.files("tfdist.deploy").joinpath("templates/slurm/job.sbatch").read_text(encoding="utf-8")


def _fill(template: str, values: dict[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        return values[match.group(1)]  # a KeyError here is a template bug, caught by the tests

    return _PLACEHOLDER.sub(substitute, template)


def _resource_lines(spec: SlurmJobSpec) -> str:
    lines = []
    if spec.gpus_per_task:
        lines.append(f"--gpus-per-task={spec.gpus_per_task}")
    if spec.cpus_per_task:
        lines.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.partition:
        lines.append(f"--partition={spec.partition}")
    if spec.time:
        lines.append(f"--time={spec.time}")
    lines.extend(spec.extra_sbatch)
    return "".join(f"#SBATCH {line}\n" for line in lines)


def _role_lines(spec: SlurmJobSpec) -> str:
    lines = []
    if spec.port_base is not None:
        lines.append(f"export TFDIST_SLURM_PORT_BASE=${{TFDIST_SLURM_PORT_BASE:-{spec.port_base}}}")
    if spec.chief:
        lines.append("export TFDIST_SLURM_CHIEF=1")
    if spec.ps:
        lines.append(f"export TFDIST_SLURM_PS={spec.ps}")
    if spec.evaluator:
        lines.append("export TFDIST_SLURM_EVALUATOR=1")
    return "".join(line + "\n" for line in lines)


def render_sbatch(spec: SlurmJobSpec, *, script_name: str = "job.sbatch") -> str:
    """The sbatch script for ``spec``.

    Args:
        spec: what to run and how.
        script_name: the file name shown in the script's "Submit with" comment.
    """
    command = " ".join(shlex.quote(word) for word in (spec.script, *spec.args))
    return _fill(_template(), {
        "version": __version__,
        "script_name": shlex.quote(script_name),
        "job_name": spec.job_name,
        "nodes": str(spec.nodes),
        "tasks_per_node": str(spec.tasks_per_node),
        "resource_lines": _resource_lines(spec),
        "grace": str(spec.grace_seconds),
        "python": shlex.quote(spec.python),
        "max_restarts": str(spec.max_restarts),
        "log_dir": shlex.quote(spec.log_dir),
        "model_dir": shlex.quote(spec.effective_model_dir),
        "role_lines": _role_lines(spec),
        "command": command,
        # Arguments with $ or ` are meant literally (they are single-quoted); tell shellcheck so.
        "literal_args_note": ("    # shellcheck disable=SC2016  # arguments are passed literally, unexpanded\n"
                              if any(c in command for c in "$`") else ""),
        "restart_delay": str(spec.restart_delay_seconds),
    })
