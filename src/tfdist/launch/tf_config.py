"""Pure builders for TensorFlow's ``TF_CONFIG``.

Definitions, as TensorFlow and Kubeflow's TFJob use them:

- **chief**: the worker that also does the bookkeeping (checkpoints, summaries). Optional: without one, worker 0
  plays that part.
- **worker**: runs the training steps. ``MultiWorkerMirroredStrategy`` keeps one replica of the model per worker.
- **ps**: parameter server; holds variables for ``ParameterServerStrategy`` and never exits on its own.
- **evaluator**: reads checkpoints and evaluates them. It gets a ``TF_CONFIG`` whose ``task`` says ``evaluator``, but it
  is *not* part of ``cluster``, so it never joins the training collectives (as TFJob does it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from tfdist.errors import UsageError

TRAINING_ROLES = ("chief", "worker", "ps")
ALL_ROLES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class TaskId:
    """One task of a job: its role and index within that role."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"


@dataclass(frozen=True)
class ClusterLayout:
    """Addresses (``host:port``) of every task, by role. The evaluator's address is only used for its own port."""

    chief: tuple[str, ...] = ()
    worker: tuple[str, ...] = ()
    ps: tuple[str, ...] = ()
    evaluator: tuple[str, ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.chief) > 1:
            raise UsageError("a cluster has at most one chief", hint="use --chief once")
        if len(self.evaluator) > 1:
            raise UsageError("a cluster has at most one evaluator", hint="use --evaluator once")
        if not self.chief and not self.worker:
            raise UsageError("a cluster needs at least one worker or a chief", hint="pass -n/--workers N")
        if self.ps and not self.chief and not self.worker:
            raise UsageError("parameter servers need workers to serve", hint="add -n/--workers N")

    def cluster(self) -> dict[str, list[str]]:
        """The ``cluster`` part of TF_CONFIG: training roles only, empty roles left out."""
        return {role: list(getattr(self, role)) for role in TRAINING_ROLES if getattr(self, role)}

    def tasks(self) -> list[TaskId]:
        """Every task, in a stable order: chief, workers, parameter servers, evaluator."""
        return [TaskId(role, i) for role in ALL_ROLES for i in range(len(getattr(self, role)))]

    def address(self, task: TaskId) -> str:
        return getattr(self, task.type)[task.index]

    @property
    def leader(self) -> TaskId:
        """The task whose exit 0 makes the job succeed (TFJob's default success policy)."""
        return TaskId("chief", 0) if self.chief else TaskId("worker", 0)

    @property
    def uses_parameter_servers(self) -> bool:
        return bool(self.ps)

    @property
    def num_training_workers(self) -> int:
        return len(self.chief) + len(self.worker)


def make_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> dict:
    """Build a TF_CONFIG dictionary for one task.

    Args:
        cluster: training roles to ``host:port`` lists (no evaluator key).
        task_type: ``chief``, ``worker``, ``ps`` or ``evaluator``.
        task_index: index of the task within its role.

    Raises:
        UsageError: the role is unknown or the index is out of range.
    """
    if task_type not in ALL_ROLES:
        raise UsageError(f"unknown task type {task_type!r}", hint=f"use one of {', '.join(ALL_ROLES)}")
    if "evaluator" in cluster:
        raise UsageError("the evaluator must not be part of the cluster", hint="give it only its own task entry")
    if task_type != "evaluator":
        members = cluster.get(task_type, ())
        if not 0 <= task_index < len(members):
            raise UsageError(f"task {task_type}:{task_index} is not in the cluster ({len(members)} {task_type})")
    elif task_index != 0:
        raise UsageError("there is only one evaluator (index 0)")
    return {
        "cluster": {role: list(addresses) for role, addresses in cluster.items() if addresses},
        "task": {"type": task_type, "index": task_index},
    }


def tf_config_for(layout: ClusterLayout, task: TaskId) -> str:
    """The TF_CONFIG environment value (compact JSON) for ``task`` in ``layout``."""
    return json.dumps(make_tf_config(layout.cluster(), task.type, task.index), separators=(",", ":"))
