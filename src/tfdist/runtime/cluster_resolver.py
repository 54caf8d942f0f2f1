"""A TensorFlow cluster resolver for this task (imports TensorFlow: training scripts only)."""
from __future__ import annotations

from typing import Any

from tfdist.runtime.cluster import cluster_info


def tf_cluster_resolver() -> Any:
    """``TFConfigClusterResolver`` over the resolved TF_CONFIG (exported first when it came from Slurm/Kubernetes)."""
    import tensorflow as tf

    info = cluster_info()  # exports TF_CONFIG when it had to be derived
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if info.num_ps:
        resolver.rpc_layer = resolver.rpc_layer or "grpc"
    return resolver
