"""What the launcher tells a task: the command every task runs and a typed :class:`TaskPlan` that renders the
task's environment variables (named in :mod:`tfdist.protocol.variables`). Imports nothing of tfdist but the protocol.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, MutableMapping

from tfdist.protocol.records import PROTOCOL_VERSION
from tfdist.protocol.variables import (
    BOOTSTRAP, ERROR_FILE, HEARTBEAT_FILE, JOB_NAME, MAX_RESTARTS, METRICS_HOST, METRICS_PORT, PROTOCOL, RESTART_COUNT,
    RUN_ID, SNAPSHOT_DIR, TASK_INDEX, TASK_TYPE, TF_CONFIG, refuse_protected,
)


# -- the command a task runs ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """What every task runs: ``interpreter -u target args`` (a script), ``interpreter -u -m target args`` (a
    module), or ``target args`` (a program, no interpreter)."""

    target: str
    args: tuple[str, ...] = ()
    interpreter: str | None = None  # the Python to run the script with; None: run target itself
    module: bool = False

    @property
    def is_python(self) -> bool:
        return self.interpreter is not None

    def argv(self) -> list[str]:
        if self.interpreter is None:
            return [self.target, *self.args]
        return [self.interpreter, "-u", *(["-m"] if self.module else []), self.target, *self.args]

    def script_argv(self) -> list[str]:
        """What a warm spare (already running the interpreter) runs: ``[script, args]`` or ``[-m, module, args]``."""
        return [*(["-m"] if self.module else []), self.target, *self.args]

    @property
    def program(self) -> str:
        """The file exec'd: the interpreter, or the program itself."""
        return self.interpreter or self.target


# -- the task bootstrap (tfdist.runtime.bootstrap) ----------------------------------------------------------------------
# The folder holding the bootstrap's sitecustomize.py: first on a task's PYTHONPATH, Python runs it before the script.
BOOTSTRAP_SITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "bootstrap",
                              "site")


def bootstrap_environment(pythonpath: str | None) -> dict[str, str]:
    """The variables that make a Python task run the bootstrap: its folder first on ``pythonpath`` (the task's
    PYTHONPATH otherwise, kept after it), and the switch."""
    rest = [p for p in (pythonpath or "").split(os.pathsep) if p and p != BOOTSTRAP_SITE]
    return {"PYTHONPATH": os.pathsep.join([BOOTSTRAP_SITE, *rest]), BOOTSTRAP: "1"}


def forget_bootstrap(environ: MutableMapping[str, str]) -> None:
    """Remove what :func:`bootstrap_environment` added, once the bootstrap runs: the script's own subprocesses and
    multiprocessing children start without it, with the PYTHONPATH they would have had."""
    environ.pop(BOOTSTRAP, None)
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.abspath(p) != BOOTSTRAP_SITE]
    if rest:
        environ["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        environ.pop("PYTHONPATH", None)


# -- what the launcher tells one task ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskPlan:
    """One task as it will be started; :meth:`environment` renders the variables it gets on top of the launcher's."""

    task_type: str
    task_index: int
    address: str
    tf_config: str
    command: Command
    run_id: str
    attempt: int
    max_restarts: int
    job_name: str
    heartbeat_path: str
    error_path: str
    metrics_port: int | None = None
    metrics_host: str | None = None
    snapshot_dir: str | None = None  # the run's shared-memory folder on this machine; None: no snapshots
    extra_env: Mapping[str, str] = field(default_factory=dict)  # launcher defaults, then the user's --env

    @property
    def name(self) -> str:
        return f"{self.task_type}:{self.task_index}"

    def protocol_env(self) -> dict[str, str]:
        env = {
            TF_CONFIG: self.tf_config, TASK_TYPE: self.task_type, TASK_INDEX: str(self.task_index),
            RESTART_COUNT: str(self.attempt), MAX_RESTARTS: str(self.max_restarts), RUN_ID: self.run_id,
            JOB_NAME: self.job_name, ERROR_FILE: self.error_path, HEARTBEAT_FILE: self.heartbeat_path,
            PROTOCOL: str(PROTOCOL_VERSION),
        }
        if self.metrics_port is not None:
            env[METRICS_PORT] = str(self.metrics_port)
            env[METRICS_HOST] = self.metrics_host or "127.0.0.1"
        if self.snapshot_dir:
            env[SNAPSHOT_DIR] = self.snapshot_dir
        return env

    def environment(self) -> dict[str, str]:
        """Every variable this task gets on top of the launcher's own; the protocol's cannot be overridden."""
        refuse_protected(self.extra_env)
        return {**self.extra_env, **self.protocol_env()}
