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

_state: dict[str, Any] = {"progress": None, "scratch_dirs": []}


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
    progress = _state["progress"]
    return progress.start_step if progress is not None else 0


def callbacks(model_dir: str | os.PathLike[str], *, save_every_steps: int | None = None,
              tensorboard: bool = True, fault_tolerance: bool = True,
              global_batch_size: int | None = None, snapshots: bool = True) -> list[Any]:
    """The Keras callbacks a distributed job wants, in the order they must run.

    - ``BackupAndRestore`` every ``save_every_steps`` steps, so a restarted group resumes from the last saved step
      (not from the last epoch), and on SIGTERM a save at the current step, then exit 143 (see fault_tolerance);
    - one progress callback (:mod:`tfdist.runtime.progress`) that counts steps without syncing the device and
      feeds :func:`resumed_from_step`, the heartbeat the launcher's hang watchdog and live view read, Prometheus
      metrics and ``/healthz`` when ``TFDIST_METRICS_PORT`` is set (``tfdist launch --metrics-port``), and the
      chief's TensorBoard scalars (loss / throughput / step time every 10 s);
    - in-memory snapshots of the training state (:mod:`tfdist.runtime.snapshots`) under ``tfdist launch``, so a
      killed worker costs a step or two, not every step since the last backup;
    - TensorBoard epoch summaries.
      (tf-keras' own per-batch TensorBoard logging was measured to cost about a third of a digits step.)

    Args:
        model_dir: shared directory for backups, checkpoints and logs.
        save_every_steps: fault-tolerance save interval in steps (default ``TFDIST_SAVE_EVERY_STEPS`` or 100).
        tensorboard: add TensorBoard summaries (where TensorBoard is not installed, the chief says what to
            install in one line and the job trains without them: see :mod:`tfdist.runtime.tensorboard`).
        fault_tolerance: add ``BackupAndRestore`` (per epoch under ParameterServerStrategy, which allows no
            batch-level callbacks).
        global_batch_size: examples per step over all replicas, for throughput metrics.
        snapshots: add in-memory snapshots (also off with ``TFDIST_SNAPSHOTS=0``; they need ``fault_tolerance``,
            whose training state tells ``fit`` where to resume, and are not taken under ParameterServerStrategy).
    """
    import tensorflow as tf

    from tfdist.runtime import metrics
    from tfdist.runtime.phases import marks_restore
    from tfdist.runtime.progress import Progress, progress_callback, time_backups
    from tfdist.runtime.tensorboard import ScalarWriter, keras_tensorboard, summaries_available

    result: list[Any] = []
    info = cluster_info()
    tensorboard = tensorboard and summaries_available(info.is_chief)  # else fit fails after its first epoch
    heartbeat = Heartbeat()

    def restorer(callback: Any) -> Any:  # its restore is the task's restore phase (tfdist.runtime.phases)
        return marks_restore(callback, heartbeat.phases, lambda: heartbeat.beat(None, force=True))

    if info.num_ps:
        # ParameterServerStrategy allows neither batch-level callbacks nor the preemption handler.
        if fault_tolerance:
            result.append(restorer(tf.keras.callbacks.BackupAndRestore(backup_dir(model_dir), save_freq="epoch")))
        progress = Progress(heartbeat=heartbeat)
        result.append(progress_callback(progress, batch_hooks=False))
        if tensorboard:
            result.append(tf.keras.callbacks.TensorBoard(tensorboard_dir(model_dir), update_freq="epoch",
                                                         profile_batch=0, write_graph=False))
        _state["progress"] = progress
        return result

    task_metrics = metrics.start_from_env()
    if fault_tolerance:
        from tfdist.runtime.fault_tolerance import backup_callback

        backup = restorer(backup_callback(backup_dir(model_dir), save_every_steps or DEFAULT_SAVE_EVERY_STEPS))
        heartbeat.saves = True  # SIGTERM saves at the current step (see fault_tolerance); the launcher says so
        result.append(time_backups(backup, task_metrics) if task_metrics else backup)
        from tfdist.runtime.snapshots import keras_callback, settings_from_env

        snapshot = keras_callback(settings_from_env(enabled=snapshots))
        if snapshot is not None:  # after the backup's restore, before anything that reads the resumed step
            result.append(restorer(snapshot))
    resumed = len(result)  # the callbacks before this point set the step training resumes from
    scalars = None
    if tensorboard:
        log_dir = tensorboard_dir(model_dir)
        result.append(keras_tensorboard(log_dir))
        if info.is_chief:
            scalars = ScalarWriter(log_dir, examples_per_step=global_batch_size)
    per_task = global_batch_size // max(1, info.num_workers) if global_batch_size else 0
    # After the backup and the snapshot, whose on_train_begin restore the step the progress callback counts from.
    progress = Progress(heartbeat=heartbeat, metrics=task_metrics, scalars=scalars, examples_per_step=per_task)
    result.insert(resumed, progress_callback(progress))
    _state["progress"] = progress
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
