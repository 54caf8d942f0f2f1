"""How big the job is, for scripts that must behave the same at every size (an elastic job changes size).

``world_size()`` counts the training workers in TF_CONFIG (chief and workers; 1 outside a cluster). A job that
restarts on fewer or more machines gets a new TF_CONFIG, so it sees the new size after each restart. Keeping the
*global* batch fixed across sizes keeps the optimisation the same: ``per_replica_batch(global_batch)`` is what each
replica should take. Reads no TensorFlow unless a strategy is passed.
"""
from __future__ import annotations

from typing import Any

from tfdist.runtime.cluster import cluster_info


def world_size() -> int:
    """Training workers in this job (chief plus workers), 1 for a single process."""
    return max(1, cluster_info().num_workers)


def per_replica_batch(global_batch: int, strategy: Any = None) -> int:
    """The per-replica batch that keeps the global batch at ``global_batch`` at the current size.

    Args:
        global_batch: examples per training step over the whole job.
        strategy: when given, its ``num_replicas_in_sync`` counts replicas (several GPUs per worker); else one
            replica per worker.

    Returns:
        ``global_batch // replicas``: when the division is not exact the effective global batch is the nearest
        multiple below (at least one example per replica).

    Raises:
        ValueError: ``global_batch`` is not positive.
    """
    if global_batch < 1:
        raise ValueError(f"global_batch must be positive, got {global_batch}")
    replicas = int(strategy.num_replicas_in_sync) if strategy is not None else world_size()
    return max(1, global_batch // max(1, replicas))
