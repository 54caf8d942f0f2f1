"""Checkpoint-and-resume that survives kills and preemption.

- Every ``save_every`` steps the training state is backed up (tf-keras ``BackupAndRestore``); a restarted group resumes
  from the last complete backup. TensorFlow writes a checkpoint under a temporary name and only then points the
  ``checkpoint`` index at it, so a kill in the middle of a save leaves the previous backup intact.
- On SIGTERM (Kubernetes, Slurm ``--signal``, spot reclaim, ``tfdist launch`` being stopped) the group saves at the
  current step and exits with :data:`PREEMPTED_EXIT_CODE`. Under MultiWorkerMirroredStrategy every worker must take
  part in the save, so TensorFlow's ``PreemptionCheckpointHandler`` coordinates it: a SIGTERM to any one worker makes
  all of them save at the same step.

The exit code is 143 (128 + SIGTERM) rather than TensorFlow's default 42: Kubeflow's ``ExitCode`` restart policy
treats 1-127 as permanent failures and 128-255 as retryable, so 42 would stop a preempted TFJob for good.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from tfdist.protocol import PREEMPTED_EXIT_CODE



def exit_preempted(step: int | None = None) -> None:
    """Leave the process with the retryable 'preempted' status once the state is saved."""
    sys.stdout.flush()
    at = f" at step {step}" if step is not None else ""
    print(f"tfdist: preempted: state saved{at}, exiting with {PREEMPTED_EXIT_CODE} (retryable)", file=sys.stderr,
          flush=True)
    # The checkpoint is on disk. A normal interpreter exit runs TensorFlow's shutdown, which under
    # MultiWorkerMirroredStrategy waits on the coordination service for the peers and was seen to block for
    # seconds; the grace period before SIGKILL is better spent elsewhere.
    os._exit(PREEMPTED_EXIT_CODE)


def backup_callback(backup_dir: str, save_every: int) -> Any:
    """A ``BackupAndRestore`` that also saves on SIGTERM and exits with :data:`PREEMPTED_EXIT_CODE`.

    tf-keras's own ``save_before_preemption=True`` only takes effect on Google Cloud
    (``support_on_demand_checkpoint_callback``), so the ``PreemptionCheckpointHandler`` is attached here, the way
    tf-keras attaches it there, and ``BackupAndRestore`` then drives it after every batch.
    """
    import tensorflow as tf

    class PreemptibleBackupAndRestore(tf.keras.callbacks.BackupAndRestore):
        def __init__(self) -> None:
            super().__init__(backup_dir, save_freq=save_every)
            # tf-keras refuses OneDeviceStrategy only because it is missing from this list; a one-device run
            # checkpoints exactly like the default strategy, and runtime.strategy() returns OneDeviceStrategy.
            self._supported_strategies = tuple(self._supported_strategies) + (tf.distribute.OneDeviceStrategy,)

        def on_train_begin(self, logs: Any = None) -> None:
            super().on_train_begin(logs)  # creates the training state and restores the last backup
            attach_preemption_handler(self)

    return PreemptibleBackupAndRestore()


def attach_preemption_handler(backup: Any) -> None:
    """Give a tf-keras ``BackupAndRestore``, just past its ``on_train_begin``, TensorFlow's preemption handler: on
    SIGTERM the group saves at the current step and exits :data:`PREEMPTED_EXIT_CODE`. The callback checks it after
    each batch when it has batch hooks (``save_freq`` in steps; the task bootstrap turns them on for ``"epoch"``)."""
    import tensorflow as tf

    state = backup._training_state
    strategy = backup.model.distribute_strategy

    def exit_fn() -> None:
        exit_preempted(int(backup.model.optimizer.iterations.numpy()))

    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        getattr(strategy, "cluster_resolver", None), state.write_checkpoint_manager,
        termination_config=tf.distribute.experimental.TerminationConfig(exit_fn=exit_fn))
    handler._read_checkpoint_manager = state.read_checkpoint_manager
    state.preemption_handler = handler
    state._enable_save_before_preemption = True
