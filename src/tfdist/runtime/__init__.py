"""What a training script imports: the right strategy, sharding, chief-only directories, resume, reporting.

>>> from tfdist import runtime
>>> strategy = runtime.strategy()
>>> with strategy.scope():
...     model = build_and_compile()
>>> model.fit(runtime.shard(dataset), callbacks=runtime.callbacks(model_dir))

Importing this package does not import TensorFlow; the functions that need it import it when called. Inside
``tfdist launch`` it also installs a hook that reports an uncaught exception to the launcher.
"""
from __future__ import annotations

import tfdist.runtime.snapshots  # noqa: F401 - binds runtime.snapshots (custom-loop helper)
from tfdist.runtime.cluster import ClusterInfo, cluster_info
from tfdist.runtime.keras_compat import Keras3MultiWorkerError
from tfdist.runtime.reporting import install_error_hook, record
from tfdist.runtime.strategy import configure_devices, strategy
from tfdist.runtime.training import (
    backup_dir,
    callbacks,
    checkpoint_dir,
    cleanup,
    global_batch_size,
    is_chief,
    resumed_from_step,
    save_model,
    shard,
    task,
    tensorboard_dir,
)
from tfdist.runtime.world import per_replica_batch, world_size

__all__ = [
    "ClusterInfo", "Keras3MultiWorkerError", "backup_dir", "callbacks", "checkpoint_dir", "cleanup", "cluster_info",
    "configure_devices", "global_batch_size", "is_chief", "record", "resumed_from_step", "save_model", "shard",
    "per_replica_batch", "snapshots", "strategy", "task", "tensorboard_dir", "world_size",
]

install_error_hook()
