"""In-memory snapshots of the training state, so a killed worker costs a step or two instead of every step since
the last durable checkpoint.

Every N steps (N from the measured cost, or ``TFDIST_SNAPSHOT_EVERY``) one task per machine copies the model and
optimizer variables to host memory on the training thread -- the only part a step waits for -- and a background
thread writes them into the run's shared-memory folder (``TFDIST_SNAPSHOT_DIR``, which ``tfdist launch`` creates and
removes). A restarted group resumes from the newest snapshot every replica can load whole, else from the durable
checkpoint, else from scratch. Off with ``TFDIST_SNAPSHOTS=0`` or ``runtime.callbacks(..., snapshots=False)``.

Front ends: :func:`keras_callback` (``model.fit``; ``runtime.callbacks`` adds it) and :func:`for_checkpoint` (custom
loops). Pieces: format (file), store (folder), policy (pure rules), writer (thread), variables (TensorFlow side),
session (the mechanism both front ends share).
"""
from __future__ import annotations

from tfdist.runtime.snapshots.keras import callbacks_for_fit, keras_callback
from tfdist.runtime.snapshots.loop import LoopSnapshots, for_checkpoint
from tfdist.runtime.snapshots.policy import Resume, choose_resume
from tfdist.runtime.snapshots.settings import SnapshotSettings, settings_from_env

__all__ = ["LoopSnapshots", "Resume", "SnapshotSettings", "callbacks_for_fit", "choose_resume", "for_checkpoint",
           "keras_callback", "settings_from_env"]
