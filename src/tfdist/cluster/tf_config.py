"""TF_CONFIG: the one place it is parsed, validated and written.

``TF_CONFIG`` comes from users, schedulers and operators, so it is read as untrusted input: its size and nesting are
capped before JSON parsing (no recursion is reachable from input), and the schema is checked with full rules --
roles from :data:`~tfdist.cluster.roles.ALL_ROLES`, addresses as ``host:port`` strings (IPv6 hosts in brackets),
an integer task index (not ``true``, not ``1e400``), the task present in its cluster. Every failure is a
:class:`~tfdist.errors.UsageError` naming the variable.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tfdist.cluster.address import parse_address
from tfdist.cluster.limits import MAX_JSON_DEPTH, MAX_TASKS, MAX_TF_CONFIG_CHARS
from tfdist.cluster.roles import ALL_ROLES, TaskId, leader_of
from tfdist.constants import TF_CONFIG
from tfdist.errors import UsageError

_KEYS = ("cluster", "task", "rpc_layer", "environment")


@dataclass(frozen=True)
class TfConfig:
    """A validated TF_CONFIG: the cluster's addresses by role and this process's task.

    Attributes:
        cluster: role -> ``host:port`` addresses (empty roles left out; empty for a single-process run).
        task: this process's task, or None when TF_CONFIG names none (the process then acts as worker 0).
        rpc_layer: TensorFlow's optional ``rpc_layer`` (``grpc``).
        environment: TensorFlow's optional ``environment`` (``cloud``, set by some operators).
    """

    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task: TaskId | None = None
    rpc_layer: str | None = None
    environment: str | None = None

    # -- reading ---------------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, source: str = TF_CONFIG) -> "TfConfig":
        """Parse and validate TF_CONFIG text.

        Args:
            text: the JSON text.
            source: what the text came from, for error messages (the variable's name).

        Raises:
            UsageError: the text is too large or deep, not JSON, or not a valid TF_CONFIG.
        """
        if len(text) > MAX_TF_CONFIG_CHARS:
            raise UsageError(f"{source} is {len(text)} characters long, more than any cluster needs",
                             hint=f"keep it under {MAX_TF_CONFIG_CHARS} characters")
        _check_depth(text, source)
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as bad:
            raise UsageError(f"{source} is not valid JSON: {bad.msg} at position {bad.pos}",
                             hint="print it with `tfdist tf-config` and fix the variable") from None
        except ValueError as bad:  # an integer with thousands of digits, NaN or Infinity
            raise UsageError(f"{source} holds an unusable number: {str(bad)[:80]}") from None
        return cls.from_dict(data, source)

    @classmethod
    def from_dict(cls, data: Any, source: str = TF_CONFIG) -> "TfConfig":
        """Validate an already decoded TF_CONFIG (see :meth:`parse`)."""
        if not isinstance(data, dict):
            raise UsageError(f"{source} must be a JSON object with 'cluster' and 'task'")
        unknown = [key for key in data if key not in _KEYS]
        if unknown:
            raise UsageError(f"{source} has an unknown key {str(unknown[0])[:40]!r}",
                             hint=f"TF_CONFIG keys are {', '.join(_KEYS)}")
        cluster = _cluster(data.get("cluster"), source)
        task = _task(data.get("task"), source)
        if task is not None and cluster and task.type != "evaluator":
            # The mismatch TensorFlow reports least clearly. An evaluator may or may not be listed (TFJob lists it).
            if task.index >= len(cluster.get(task.type, ())):
                raise UsageError(f"{source} task {task} is not in its cluster",
                                 hint="the task's type and index must name one of the cluster's addresses")
        return cls(cluster, task, _optional_text(data, "rpc_layer", source),
                   _optional_text(data, "environment", source))

    # -- building --------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> "TfConfig":
        """The TF_CONFIG tfdist writes for one task: training roles only (the evaluator gets just its task).

        Raises:
            UsageError: an unknown role, an evaluator in the cluster, or a task outside the cluster.
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
        return cls.from_dict({"cluster": {role: list(addresses) for role, addresses in cluster.items()},
                              "task": {"type": task_type, "index": task_index}}, "the generated TF_CONFIG")

    # -- writing ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dictionary (``cluster`` always present, ``task`` when known)."""
        data: dict[str, Any] = {"cluster": {role: list(addresses) for role, addresses in self.cluster.items()}}
        if self.task is not None:
            data["task"] = {"type": self.task.type, "index": self.task.index}
        if self.rpc_layer is not None:
            data["rpc_layer"] = self.rpc_layer
        if self.environment is not None:
            data["environment"] = self.environment
        return data

    def to_json(self) -> str:
        """Compact JSON, as it goes into the TF_CONFIG variable."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    # -- questions -------------------------------------------------------------------------------------------
    @property
    def task_type(self) -> str:
        """``chief``, ``worker``, ``ps`` or ``evaluator``; ``worker`` when TF_CONFIG names no task."""
        return self.task.type if self.task is not None else "worker"

    @property
    def task_index(self) -> int:
        return self.task.index if self.task is not None else 0

    def tasks(self) -> list[TaskId]:
        """Every task of the cluster, in role order (the evaluator only when the cluster lists it)."""
        return [TaskId(role, i) for role in ALL_ROLES for i in range(len(self.cluster.get(role, ())))]

    @property
    def leader(self) -> TaskId:
        """The task that leads the job (see :func:`~tfdist.cluster.roles.leader_of`); worker 0 when alone."""
        return leader_of(self.tasks()) or TaskId("worker", 0)

    @property
    def is_chief(self) -> bool:
        """True for the task that writes checkpoints and summaries: the chief, else worker 0."""
        return TaskId(self.task_type, self.task_index) == self.leader

    @property
    def num_workers(self) -> int:
        """Training workers taking part in collectives: chief plus workers."""
        return len(self.cluster.get("chief", ())) + len(self.cluster.get("worker", ()))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get("ps", ()))

    @property
    def is_distributed(self) -> bool:
        return self.num_workers > 1 or self.num_ps > 0

    @property
    def worker_id(self) -> int:
        """Position among the training workers, chief first (MultiWorkerMirroredStrategy's order); -1 otherwise."""
        if self.task_type == "chief":
            return 0
        offset = 1 if self.cluster.get("chief") else 0
        return offset + self.task_index if self.task_type == "worker" else -1


def make_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int) -> dict:
    """The TF_CONFIG dictionary for one task (see :meth:`TfConfig.build`)."""
    return TfConfig.build(cluster, task_type, task_index).to_dict()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number TF_CONFIG can use")


def _check_depth(text: str, source: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` before the (recursive) decoder sees it."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise UsageError(f"{source} is nested more than {MAX_JSON_DEPTH} levels deep, which is not TF_CONFIG",
                                 hint='expected {"cluster": {"worker": ["host:port"]}, "task": {...}}')
        elif char in "]}":
            depth -= 1


def _cluster(raw: Any, source: str) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UsageError(f"{source} 'cluster' must be an object of role -> list of 'host:port'")
    cluster: dict[str, tuple[str, ...]] = {}
    total = 0
    for role, addresses in raw.items():
        if role not in ALL_ROLES:
            raise UsageError(f"{source} cluster has an unknown role {role[:40]!r}",
                             hint=f"roles are {', '.join(ALL_ROLES)}")
        if not isinstance(addresses, list):
            raise UsageError(f"{source} cluster role {role!r} must be a list of 'host:port' strings")
        total += len(addresses)
        if total > MAX_TASKS:
            raise UsageError(f"{source} lists more than {MAX_TASKS} tasks")
        for address in addresses:
            parse_address(address, f"{source} cluster role {role!r}")
        if addresses:
            cluster[role] = tuple(addresses)
    return cluster


def _task(raw: Any, source: str) -> TaskId | None:
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, dict) or "type" not in raw:
        raise UsageError(f"{source} 'task' must be an object with 'type' and 'index'")
    role, index = raw["type"], raw.get("index", 0)
    if role not in ALL_ROLES:
        raise UsageError(f"{source} task type {str(role)[:40]!r} is not one of {', '.join(ALL_ROLES)}")
    # bool is an int in Python, and json gives floats for 1.0 or 1e400: only a true integer is an index.
    if type(index) is not int or not 0 <= index < MAX_TASKS:
        raise UsageError(f"{source} task index {str(index)[:40]} is not an integer from 0 to {MAX_TASKS - 1}")
    return TaskId(role, index)


def _optional_text(data: Mapping[str, Any], key: str, source: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.isascii() or not value.isprintable() or len(value) > 64:
        raise UsageError(f"{source} {key!r} must be a short printable string")
    return value
