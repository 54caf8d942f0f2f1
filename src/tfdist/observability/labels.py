"""The identity every tfdist series carries: ``job``, ``task_type``, ``task_index``, ``host``.

Because Prometheus sets its own ``job`` label on scrape, the generated scrape configs use ``honor_labels: true`` so
the training job's name wins.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping

from tfdist import constants
from tfdist.errors import UsageError

LABELS = ("job", "task_type", "task_index", "host")


@dataclass(frozen=True)
class TaskLabels:
    """The identity every tfdist series carries."""

    job: str
    task_type: str
    task_index: int
    host: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "TaskLabels":
        """Read ``TFDIST_JOB_NAME``/``TFDIST_TASK_TYPE``/``TFDIST_TASK_INDEX``, falling back to the resolved cluster."""
        task_type = environ.get(constants.TASK_TYPE, "")
        index = environ.get(constants.TASK_INDEX, "")
        if not task_type or not index:
            from tfdist.cluster import resolve_cluster

            resolved = resolve_cluster(environ)
            task_type = task_type or (resolved.task_type if resolved else "worker")
            index = index or str(resolved.task_index if resolved else 0)
        if not (index.isascii() and index.isdigit() and len(index) <= 9):
            raise UsageError(f"{constants.TASK_INDEX}={index[:40]!r} is not an integer",
                             hint="let tfdist launch set it, or unset it")
        return cls(environ.get(constants.JOB_NAME) or "tfdist", task_type, int(index), socket.gethostname())

    def values(self) -> tuple[str, str, str, str]:
        """Label values in :data:`LABELS` order."""
        return (self.job, self.task_type, str(self.task_index), self.host)
