"""Helpers a training script would otherwise copy from TensorFlow's multi-worker tutorial."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tfdist.runtime.cluster import cluster_info
from tfdist.runtime.reporting import Heartbeat

# Save a fault-tolerance checkpoint every this many steps unless told otherwise. A killed group loses at most this
# many steps; the overhead is measured by bench/recovery.py.
DEFAULT_SAVE_EVERY_STEPS = int(os.environ.get("TFDIST_SAVE_EVERY_STEPS", "100"))

_state: dict[str, Any] = {"resumed_from_step": 0, "scratch_dirs": []}


def is_chief() -> bool:
    """True in the task that writes checkpoints and summaries (the chief, or worker 0 without one)."""
    return cluster_info().is_chief


def task() -> tuple[str, int]:
    """``(task_type, task_index)`` of this process."""
    info = cluster_info()
    return info.task_type, info.task_index


def global_batch_size(per_replica: int, strategy: Any) -> int:
    """The batch size to give ``tf.data`` so that each replica sees ``per_replica`` examples per step."""
    return int(per_replica) * int(strategy.num_replicas_in_sync)


def shard(dataset: Any, *, by_file: bool = False) -> Any:
    """Tell ``tf.data`` how to split ``dataset`` among workers.

    In-memory datasets (``from_tensor_slices``) have no files to split, so sharding is by data (every worker reads all
    and keeps its share); datasets read from many files can pass ``by_file=True``.
    """
    import tensorflow as tf

    options = tf.data.Options()
    policy = tf.data.experimental.AutoShardPolicy
    options.experimental_distribute.auto_shard_policy = policy.FILE if by_file else policy.DATA
    return dataset.with_options(options)


def _writable_dir(base: str | os.PathLike[str], name: str) -> str:
    """``base/name`` in the chief; a scratch directory elsewhere (deleted at exit by :func:`cleanup`), so that every
    worker can write its copy, as collective saving requires, without two writing the same files."""
    if is_chief():
        path = Path(base) / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    task_type, index = task()
    scratch = tempfile.mkdtemp(prefix=f"tfdist-{task_type}{index}-{name}-")
    _state["scratch_dirs"].append(scratch)
    return scratch


def checkpoint_dir(model_dir: str | os.PathLike[str]) -> str:
    """Where this task writes model checkpoints (chief: ``model_dir/checkpoints``)."""
    return _writable_dir(model_dir, "checkpoints")


def tensorboard_dir(model_dir: str | os.PathLike[str]) -> str:
    """Where this task writes TensorBoard summaries (chief: ``model_dir/logs``)."""
    return _writable_dir(model_dir, "logs")


def backup_dir(model_dir: str | os.PathLike[str]) -> str:
    """The fault-tolerance backup directory. The same path is given to every worker: ``BackupAndRestore`` itself
    sends non-chief writes to per-worker temporary folders."""
    return str(Path(model_dir) / "backup")


def cleanup() -> None:
    """Delete this task's scratch directories."""
    while _state["scratch_dirs"]:
        shutil.rmtree(_state["scratch_dirs"].pop(), ignore_errors=True)


def resumed_from_step() -> int:
    """The training step restored from the fault-tolerance checkpoint at the start of ``fit`` (0 on a fresh start)."""
    return int(_state["resumed_from_step"])


def _callback_types() -> dict[str, type]:
    import tensorflow as tf

    class ResumeTracker(tf.keras.callbacks.Callback):
        """Records the step ``BackupAndRestore`` restored (it runs first, in ``on_train_begin``)."""

        def on_train_begin(self, logs: Any = None) -> None:
            iterations = getattr(self.model.optimizer, "iterations", None)
            _state["resumed_from_step"] = int(iterations.numpy()) if iterations is not None else 0

    class HeartbeatCallback(tf.keras.callbacks.Callback):
        """Tells the launcher's hang watchdog that training makes progress."""

        def __init__(self) -> None:
            super().__init__()
            self.heartbeat = Heartbeat()

        def on_train_begin(self, logs: Any = None) -> None:
            self.heartbeat.beat(self._step(), force=True)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.heartbeat.beat(self._step())

        def on_train_end(self, logs: Any = None) -> None:
            self.heartbeat.finished(self._step())

        def _step(self) -> int | None:
            iterations = getattr(self.model.optimizer, "iterations", None)
            return int(iterations.numpy()) if iterations is not None else None

    class EpochHeartbeatCallback(HeartbeatCallback):
        """ParameterServerStrategy allows no batch-level callbacks: beat once per epoch instead."""

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:  # pragma: no cover - never called
            pass

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.heartbeat.beat(self._step())

        def _implements_train_batch_hooks(self) -> bool:
            return False

    return {"ResumeTracker": ResumeTracker, "HeartbeatCallback": HeartbeatCallback,
            "EpochHeartbeatCallback": EpochHeartbeatCallback}


def callbacks(model_dir: str | os.PathLike[str], *, save_every_steps: int | None = None,
              tensorboard: bool = True, fault_tolerance: bool = True,
              global_batch_size: int | None = None) -> list[Any]:
    """The Keras callbacks a distributed job wants, in the order they must run.

    - ``BackupAndRestore`` every ``save_every_steps`` steps, so a restarted group resumes from the last saved step
      (not from the last epoch), and on SIGTERM a save at the current step, then exit 143 (see fault_tolerance);
    - a tracker behind :func:`resumed_from_step`;
    - a heartbeat for the launcher's hang watchdog;
    - Prometheus metrics and ``/healthz`` when ``TFDIST_METRICS_PORT`` is set (``tfdist launch --metrics-port``);
    - TensorBoard summaries, written by the chief only: epoch metrics, and loss / throughput / step time every 10 s.
      (tf-keras' own per-batch TensorBoard logging was measured to cost about a third of a digits step.)

    Args:
        model_dir: shared directory for backups, checkpoints and logs.
        save_every_steps: fault-tolerance save interval in steps (default ``TFDIST_SAVE_EVERY_STEPS`` or 100).
        tensorboard: add TensorBoard summaries.
        fault_tolerance: add ``BackupAndRestore`` (per epoch under ParameterServerStrategy, which allows no
            batch-level callbacks).
        global_batch_size: examples per step over all replicas, for throughput metrics.
    """
    import tensorflow as tf

    types = _callback_types()
    result: list[Any] = []
    info = cluster_info()
    if info.num_ps:
        # ParameterServerStrategy allows neither batch-level callbacks nor the preemption handler.
        if fault_tolerance:
            result.append(tf.keras.callbacks.BackupAndRestore(backup_dir(model_dir), save_freq="epoch"))
        result += [types["ResumeTracker"](), types["EpochHeartbeatCallback"]()]
        if tensorboard:
            result.append(tf.keras.callbacks.TensorBoard(tensorboard_dir(model_dir), update_freq="epoch",
                                                         profile_batch=0, write_graph=False))
        return result

    from tfdist.runtime import metrics

    task_metrics = metrics.start_from_env()
    if fault_tolerance:
        from tfdist.runtime.fault_tolerance import backup_callback

        backup = backup_callback(backup_dir(model_dir), save_every_steps or DEFAULT_SAVE_EVERY_STEPS)
        result.append(metrics.time_backups(backup, task_metrics) if task_metrics else backup)
    result += [types["ResumeTracker"](), types["HeartbeatCallback"]()]
    if task_metrics is not None:
        per_task = global_batch_size // max(1, info.num_workers) if global_batch_size else None
        result.append(metrics.keras_callback(task_metrics, per_task))
    if tensorboard:
        log_dir = tensorboard_dir(model_dir)
        result.append(metrics.keras_tensorboard(log_dir))
        result.append(metrics.tensorboard_callback(log_dir, examples_per_step=global_batch_size))
    return result


def save_model(model: Any, path: str | os.PathLike[str]) -> str | None:
    """Save ``model`` the way a multi-worker job must: every worker saves (saving is collective), only the chief's
    copy lands at ``path``; the others go to scratch directories that are deleted. Returns the chief's path."""
    target = Path(path)
    if is_chief():
        target.parent.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed, so a reader (an evaluator) never sees half a file.
        partial = target.with_name(f".{target.stem}.partial-{os.getpid()}{target.suffix}")
        model.save(str(partial))
        os.replace(partial, target)
        return str(target)
    scratch = Path(tempfile.mkdtemp(prefix="tfdist-save-"))
    try:
        model.save(str(scratch / target.name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return None
