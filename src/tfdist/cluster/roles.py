"""The roles of a TensorFlow job and the one rule that says which task leads it.

Definitions, as TensorFlow and Kubeflow's TFJob use them:

- **chief**: the worker that also does the bookkeeping (checkpoints, summaries). Optional: without one, worker 0
  plays that part.
- **worker**: runs the training steps. ``MultiWorkerMirroredStrategy`` keeps one replica of the model per worker.
- **ps**: parameter server; holds variables for ``ParameterServerStrategy`` and never exits on its own.
- **evaluator**: reads checkpoints and evaluates them. It gets a ``TF_CONFIG`` whose ``task`` says ``evaluator``, but it
  is *not* part of ``cluster``, so it never joins the training collectives (as TFJob does it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

TRAINING_ROLES = ("chief", "worker", "ps")
ALL_ROLES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class TaskId:
    """One task of a job: its role and index within that role."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"


def leader_of(tasks: Iterable[TaskId]) -> TaskId | None:
    """The task that leads the job, or None when there is neither a chief nor a worker 0.

    The leader writes checkpoints and summaries, and its exit 0 makes the job succeed (TFJob's default success
    policy): the chief, else worker 0. Every "is this the chief?" question in tfdist is answered here.
    """
    present = set(tasks)
    for candidate in (TaskId("chief", 0), TaskId("worker", 0)):
        if candidate in present:
            return candidate
    return None
