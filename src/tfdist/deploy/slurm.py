"""The sbatch script ``tfdist slurm`` writes (pure: a typed spec in, script text out).

The script (template ``templates/slurm/job.sbatch``) starts every task with ``srun --kill-on-bad-exit=1`` through
``tfdist tf-config --exec``, which resolves TF_CONFIG from Slurm's variables (see :mod:`tfdist.cluster.resolve`),
retries a failed step up to ``max_restarts`` times, forwards Slurm's early SIGTERM for a graceful stop and requeues,
and keeps one log per task and attempt.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

from tfdist import __version__, quote, validate
from tfdist.errors import UsageError
from tfdist.cluster.slurm_metrics import SLURM_METRICS_HOST, SLURM_METRICS_PORT, valid_host
from tfdist.cluster.grpc_keepalive import JOB_FILE_NOTE

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
        metrics_port: first metrics port on each node (task at local id k serves on ``metrics_port + k``), or None
            for no metrics endpoints.
        metrics_host: address every task binds its metrics on; None: the node's own address (see
            :mod:`tfdist.cluster.slurm_metrics`).
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
    metrics_port: int | None = None
    metrics_host: str | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.tasks_per_node < 1:
            raise UsageError("--nodes and --tasks-per-node must be at least 1")
        if self.gpus_per_task < 0 or self.cpus_per_task < 0 or self.max_restarts < 0 or self.ps < 0:
            raise UsageError("counts (--gpus-per-task, --cpus-per-task, --max-restarts, --ps) cannot be negative")
        _check_values(self)
        if not 10 <= self.grace_seconds <= 65535:
            raise UsageError("--grace must be between 10 and 65535 seconds")
        if self.port_base is not None and not 1024 <= self.port_base <= 65535 - self.tasks_per_node:
            raise UsageError(f"--port-base {self.port_base} leaves no room for {self.tasks_per_node} ports per node")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65536 - self.tasks_per_node:
            raise UsageError(f"--metrics-port {self.metrics_port} leaves no room for {self.tasks_per_node} "
                             "port(s) per node", hint=f"use a port from 1024 to {65536 - self.tasks_per_node}")
        if self.metrics_host is not None and not valid_host(self.metrics_host):
            raise UsageError(f"--metrics-host {self.metrics_host!r} is not a host name or IP address",
                             hint="give an address such as 0.0.0.0, or leave it out to bind the node's address")
        if self.metrics_host is not None and self.metrics_port is None:
            raise UsageError("--metrics-host needs --metrics-port", hint="add --metrics-port, e.g. 9464")
        workers = self.nodes * self.tasks_per_node - int(self.chief) - self.ps - int(self.evaluator)
        if workers < 0 or (workers == 0 and not self.chief):
            raise UsageError(f"{self.nodes * self.tasks_per_node} task(s) (-N {self.nodes} x -T {self.tasks_per_node}) "
                             f"cannot hold {_roles(self)} and at least one worker",
                             hint=f"ask for at least {self.nodes * self.tasks_per_node - workers + 1} tasks: "
                             "more nodes or a higher --tasks-per-node")

    @property
    def total_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def effective_model_dir(self) -> str:
        return self.model_dir or f"checkpoints/{self.job_name}"


def _check_values(spec: SlurmJobSpec) -> None:
    """Every text value that reaches the script, checked against what its consumer accepts."""
    validate.slurm_job_name(spec.job_name, "--job-name")
    if spec.time is not None:
        validate.slurm_time(spec.time, "--time")
    if spec.partition is not None:
        validate.slurm_partition(spec.partition, "--partition")
    validate.path_text(spec.python, "--python")
    validate.path_text(spec.log_dir, "--log-dir")
    # srun reads LOG_DIR as part of a file name pattern: '%' starts a pattern and a backslash turns them all off.
    if "%" in spec.log_dir or "\\" in spec.log_dir:
        raise validate.refuse("--log-dir", spec.log_dir, "contains '%' or '\\', which srun reads as a pattern",
                              "choose a folder name without them")
    if spec.model_dir:
        validate.path_text(spec.model_dir, "--model-dir")
    for word in (spec.script, *spec.args):
        quote.shell(word, "SCRIPT ARGS")
    for line in spec.extra_sbatch:
        quote.comment(line, "extra #SBATCH line")
def _roles(spec: SlurmJobSpec) -> str:
    """The non-worker roles asked for, in words ("a chief, 3 parameter servers"), naming only those requested."""
    roles = (["a chief"] if spec.chief else []) + ([f"{spec.ps} parameter server" + ("s" if spec.ps > 1 else "")]
                                                    if spec.ps else []) + (["an evaluator"] if spec.evaluator else [])
    return ", ".join(roles) or "no other role"


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
        lines.extend(f"# {line}" for line in JOB_FILE_NOTE)
    if spec.evaluator:
        lines.append("export TFDIST_SLURM_EVALUATOR=1")
    if spec.metrics_port is not None:
        # tf-config --exec gives each task TFDIST_METRICS_PORT = this + SLURM_LOCALID (see tfdist.cluster.slurm_metrics).
        lines.append(f"export {SLURM_METRICS_PORT}={spec.metrics_port}")
    if spec.metrics_host is not None:
        lines.append(f"export {SLURM_METRICS_HOST}={quote.shell(spec.metrics_host, '--metrics-host')}")
    return "".join(line + "\n" for line in lines)


def _literal_note(quoted: str, *, indent: str = "") -> str:
    """Single-quoted values are meant literally: for the line that follows, tell shellcheck that a $ or ` is not
    meant to expand (SC2016) and that a backslash is not meant to escape a quote (SC1003)."""
    codes = [code for code, chars in (("SC2016", "$`"), ("SC1003", "\\")) if any(c in quoted for c in chars)]
    if not codes:
        return ""
    return f"{indent}# shellcheck disable={','.join(codes)}  # meant literally, unexpanded\n"


def render_sbatch(spec: SlurmJobSpec, *, script_name: str = "job.sbatch") -> str:
    """The sbatch script for ``spec``.

    Args:
        spec: what to run and how.
        script_name: the file name shown in the script's "Submit with" comment.
    """
    validate.file_name(script_name, "--output")
    command = quote.shell_words((spec.script, *spec.args))
    python, log_dir, model_dir = (quote.shell(v) for v in (spec.python, spec.log_dir, spec.effective_model_dir))
    return _fill(_template(), {
        "version": __version__,
        "script_name": quote.shell(script_name),
        "job_name": spec.job_name,
        "job_name_word": quote.shell(spec.job_name),
        "nodes": str(spec.nodes),
        "tasks_per_node": str(spec.tasks_per_node),
        "resource_lines": _resource_lines(spec),
        "grace": str(spec.grace_seconds),
        "python": python,
        "python_note": _literal_note(python),
        "max_restarts": str(spec.max_restarts),
        "log_dir": log_dir,
        "log_dir_note": _literal_note(log_dir),
        "model_dir": model_dir,
        "model_dir_note": _literal_note(model_dir),
        "role_lines": _role_lines(spec),
        "command": command,
        "command_note": _literal_note(command, indent="    "),
        "restart_delay": str(spec.restart_delay_seconds),
    })
