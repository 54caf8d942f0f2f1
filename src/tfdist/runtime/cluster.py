"""Who am I in the job? Parsed from TF_CONFIG (or resolved from Slurm / Kubernetes) without importing TensorFlow."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Mapping

from tfdist.constants import TF_CONFIG
from tfdist.errors import UsageError


@dataclass(frozen=True)
class ClusterInfo:
    """This process's place in the job.

    Attributes:
        task_type: ``chief``, ``worker``, ``ps`` or ``evaluator``; ``worker`` for a single-process run.
        task_index: index within ``task_type``.
        cluster: the ``cluster`` part of TF_CONFIG (empty for a single-process run).
    """

    task_type: str = "worker"
    task_index: int = 0
    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

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
    def is_chief(self) -> bool:
        """True for the task that writes checkpoints and summaries: the chief, else worker 0."""
        if self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    @property
    def worker_id(self) -> int:
        """Position among the training workers, chief first (matches MultiWorkerMirroredStrategy's ordering)."""
        if self.task_type == "chief":
            return 0
        offset = 1 if self.cluster.get("chief") else 0
        return offset + self.task_index if self.task_type == "worker" else -1


def parse_tf_config(text: str) -> ClusterInfo:
    """Parse a TF_CONFIG JSON string.

    Raises:
        UsageError: the text is not valid TF_CONFIG.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as bad:
        raise UsageError(f"TF_CONFIG is not valid JSON: {bad.msg} at position {bad.pos}",
                         hint="print it with `tfdist tf-config` and fix the variable") from None
    if not isinstance(data, dict):
        raise UsageError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster_raw = data.get("cluster") or {}
    task = data.get("task") or {}
    if not isinstance(cluster_raw, dict) or not isinstance(task, dict):
        raise UsageError("TF_CONFIG 'cluster' and 'task' must be JSON objects")
    cluster = {str(role): tuple(str(a) for a in addresses) for role, addresses in cluster_raw.items()}
    task_type = str(task.get("type", "worker"))
    try:
        task_index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise UsageError(f"TF_CONFIG task index {task.get('index')!r} is not an integer") from None
    return ClusterInfo(task_type=task_type, task_index=task_index, cluster=cluster)


def _resolved_tf_config(environ: Mapping[str, str]) -> dict | None:
    try:
        from tfdist.launch.resolve import resolve_tf_config
    except ImportError:  # resolution from Slurm / Kubernetes not available
        return None
    return resolve_tf_config(environ)


def cluster_info(environ: Mapping[str, str] | None = None, *, export: bool = True) -> ClusterInfo:
    """This process's :class:`ClusterInfo`.

    An explicit TF_CONFIG wins; otherwise the cluster is derived from Slurm's or Kubernetes' environment, and (when
    ``export`` is true and ``environ`` is the real environment) written to TF_CONFIG so TensorFlow sees the same thing.
    With nothing to go on, the process is a single worker.
    """
    env = os.environ if environ is None else environ
    text = env.get(TF_CONFIG, "").strip()
    if text:
        return parse_tf_config(text)
    resolved = _resolved_tf_config(env)
    if not resolved:
        return ClusterInfo()
    text = json.dumps(resolved, separators=(",", ":"))
    if export and environ is None:
        os.environ[TF_CONFIG] = text
    return parse_tf_config(text)
