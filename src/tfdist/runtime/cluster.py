"""Who am I in the job? TF_CONFIG (or what Slurm / Kubernetes imply), read through :mod:`tfdist.cluster`."""
from __future__ import annotations

import os
from typing import Mapping

from tfdist.cluster import TfConfig, resolve_cluster
from tfdist.constants import TF_CONFIG

# The runtime's name for this process's place in the job: the validated TF_CONFIG.
ClusterInfo = TfConfig


def cluster_info(environ: Mapping[str, str] | None = None, *, export: bool = True) -> ClusterInfo:
    """This process's :class:`ClusterInfo`.

    An explicit TF_CONFIG wins; otherwise the cluster is derived from Slurm's or Kubernetes' environment, and (when
    ``export`` is true and ``environ`` is the real environment) written to TF_CONFIG so TensorFlow sees the same thing.
    With nothing to go on, the process is a single worker.

    Raises:
        UsageError: TF_CONFIG or the scheduler's variables are malformed.
    """
    env = os.environ if environ is None else environ
    resolved = resolve_cluster(env)
    if resolved is None:
        return ClusterInfo()
    if export and environ is None and not env.get(TF_CONFIG, "").strip():
        os.environ[TF_CONFIG] = resolved.to_json()
    return resolved
