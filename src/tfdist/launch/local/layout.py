"""The launcher's cluster layout: every task's address by role (roles, TF_CONFIG and the leader rule live in
:mod:`tfdist.cluster`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tfdist.cluster import ALL_ROLES, TRAINING_ROLES, TaskId, TfConfig, leader_of, make_tf_config  # noqa: F401
from tfdist.errors import UsageError


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
        return leader_of(self.tasks())  # type: ignore[return-value] - a layout always has a chief or a worker

    @property
    def uses_parameter_servers(self) -> bool:
        return bool(self.ps)

    @property
    def num_training_workers(self) -> int:
        return len(self.chief) + len(self.worker)


def tf_config_for(layout: ClusterLayout, task: TaskId) -> str:
    """The TF_CONFIG environment value (compact JSON) for ``task`` in ``layout``."""
    return TfConfig.build(layout.cluster(), task.type, task.index).to_json()


def role_meanings(*, chief: bool, workers: int, ps: int, evaluator: bool) -> list[str]:
    """What each role does in this job, in the words ``--dry-run`` prints (pure). The strategy follows from the
    roles: parameter servers mean ParameterServerStrategy, whose chief is the coordinator; else every worker trains
    under MultiWorkerMirroredStrategy."""
    lines = []
    if ps:
        lines.append("chief:0 is the coordinator: it runs the training loop (ClusterCoordinator) and sends the steps "
                     "to the workers")
        lines.append(f"{_span('worker', 0, workers - 1)} run the steps the coordinator sends (tf.distribute.Server)"
                     if workers else "no workers: the coordinator has no one to send steps to")
        lines.append(f"{_span('ps', 0, ps - 1)} hold the variables (tf.distribute.Server)")
    else:
        lead = "chief:0 trains and" if chief else "worker:0 trains and, as the chief,"
        lines.append(f"{lead} writes the checkpoints and summaries")
        if workers and (chief or workers > 1):
            first = 0 if chief else 1
            if first <= workers - 1:
                lines.append(f"{_span('worker', first, workers - 1)} train in step with it "
                             "(MultiWorkerMirroredStrategy)")
    if evaluator:
        lines.append("evaluator:0 is outside the cluster: it evaluates the checkpoints the chief writes")
    return lines


def _span(role: str, first: int, last: int) -> str:
    return f"{role}:{first}" if first == last else f"{role}:{first}..{last}"
