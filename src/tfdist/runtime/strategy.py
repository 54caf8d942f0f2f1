"""Pick the right ``tf.distribute`` strategy for this process."""
from __future__ import annotations

import logging
import os
from typing import Any

from tfdist.constants import CUDA_VISIBLE_DEVICES
from tfdist.runtime.cluster import ClusterInfo, cluster_info
from tfdist.runtime.keras_compat import check_keras_for_strategy, prefer_legacy_keras

log = logging.getLogger("tfdist.runtime")

# Collective ops give up after this long when a peer stops answering (0: never). Off by default: with a timeout,
# TensorFlow starts one thread per collective that sleeps out the timeout (measured: ~14 threads per step, 1731 per
# worker after 120 steps of examples/digits.py with 300 s), which ran machines out of threads ("std::system_error:
# Resource temporarily unavailable") and slowed every step. Under tfdist launch the hang watchdog (heartbeats)
# catches a stalled peer instead.
DEFAULT_COLLECTIVE_TIMEOUT_S = float(os.environ.get("TFDIST_COLLECTIVE_TIMEOUT", "0"))


def _why_no_gpu() -> str:
    if os.environ.get(CUDA_VISIBLE_DEVICES, None) == "":
        return "CUDA_VISIBLE_DEVICES is empty, which hides every GPU"
    return "TensorFlow sees no GPU; run `tfdist doctor` to find out why"


def configure_devices(memory_growth: bool = True) -> list[Any]:
    """Turn on GPU memory growth (so tasks sharing a GPU don't each grab all of it) and return the GPUs."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if memory_growth:
        for gpu in gpus:
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:  # already initialised by the script: its choice stands
                pass
    return gpus


def _serve_forever(info: ClusterInfo) -> None:
    """Parameter servers and the workers of a ParameterServerStrategy job only host a server; the chief drives."""
    import tensorflow as tf

    from tfdist.runtime.cluster_resolver import tf_cluster_resolver

    resolver = tf_cluster_resolver()
    log.info("tfdist: %s:%d serving for the coordinator", info.task_type, info.task_index)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=info.task_type, task_index=info.task_index,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    server.join()
    raise SystemExit(0)


def strategy(*, memory_growth: bool = True, info: ClusterInfo | None = None) -> Any:
    """Return the ``tf.distribute`` strategy this task should train under.

    - one device: ``OneDeviceStrategy`` (the GPU, or the CPU with a warning saying why no GPU is used);
    - several local GPUs: ``MirroredStrategy``;
    - several workers in TF_CONFIG: ``MultiWorkerMirroredStrategy`` (a collective timeout only with ``TFDIST_COLLECTIVE_TIMEOUT``);
    - parameter servers in TF_CONFIG: ``ParameterServerStrategy`` on the chief; workers and parameter servers
      start their server here and never return (that is their whole job).

    Args:
        memory_growth: allocate GPU memory as needed instead of all at start.
        info: the cluster; read from TF_CONFIG / Slurm / Kubernetes when omitted.

    Raises:
        Keras3MultiWorkerError: ``tf.keras`` is Keras 3 under a multi-worker strategy (install tf-keras).
    """
    info = info or cluster_info()
    prefer_legacy_keras()
    import tensorflow as tf

    check_keras_for_strategy(info.is_distributed)
    gpus = configure_devices(memory_growth)

    # The evaluator is outside the cluster spec: under ParameterServerStrategy it would try to start the chief's
    # server (and fail to bind its port, or take it); it evaluates checkpoints on its own devices instead.
    if info.num_ps and info.task_type != "evaluator":
        if info.task_type in ("worker", "ps"):
            _serve_forever(info)
        from tfdist.runtime.cluster_resolver import tf_cluster_resolver

        return tf.distribute.experimental.ParameterServerStrategy(tf_cluster_resolver())
    if info.num_workers > 1 and info.task_type != "evaluator":
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=DEFAULT_COLLECTIVE_TIMEOUT_S or None)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    if gpus:
        return tf.distribute.OneDeviceStrategy("/gpu:0")
    log.warning("tfdist: training on the CPU: %s", _why_no_gpu())
    return tf.distribute.OneDeviceStrategy("/cpu:0")
