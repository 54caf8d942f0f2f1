"""The custom-training-loop front end: snapshots of a ``tf.train.Checkpoint``'s variables.

    optimizer.build(model.trainable_variables)                # its slots must exist before the first snapshot
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    step = restore_my_durable_checkpoint(checkpoint)          # 0 when there is none
    snapshots = runtime.snapshots.for_checkpoint(checkpoint, strategy=strategy)
    step = snapshots.resume(step).step                        # newer state from a snapshot, if every replica has it
    while step < total:
        train_step(next(iterator)); step += 1
        snapshots.step_done(step)
    snapshots.close()

Every variable the checkpoint reaches is snapshotted (``tf.train.TrackableView``), including the state of any
``tf.random.Generator`` in it. A ``tf.data`` iterator in the checkpoint is not: saving an iterator serialises its
buffers, far too slow for every step; the durable checkpoint keeps it.

The variables are listed when :func:`for_checkpoint` is called, so an optimizer must be built by then (Keras
optimizers create their slots at the first update otherwise). If the checkpoint has gained variables by the first
:meth:`LoopSnapshots.step_done`, snapshots are turned off with one line rather than saving a partial state.
"""
from __future__ import annotations

from typing import Any

from tfdist.runtime.snapshots.policy import CHECKPOINT, SCRATCH, Resume
from tfdist.runtime.snapshots.session import SnapshotSession, say
from tfdist.runtime.snapshots.settings import SnapshotSettings, settings_from_env
from tfdist.runtime.snapshots.variables import TrainingVariables


def checkpoint_variables(checkpoint: Any) -> list[Any]:
    import tensorflow as tf

    return [obj for obj in tf.train.TrackableView(checkpoint).descendants() if isinstance(obj, tf.Variable)]


class LoopSnapshots:
    """Snapshots for a custom loop; every method is a no-op (and :meth:`resume` returns the checkpoint's step) when
    snapshots are off."""

    def __init__(self, checkpoint: Any, *, strategy: Any = None, settings: SnapshotSettings | None = None) -> None:
        import tensorflow as tf

        self.settings = settings or settings_from_env()
        self.checkpoint = checkpoint
        self.session: SnapshotSession | None = None
        self._checked = False
        if self.settings.active:
            self.session = SnapshotSession(TrainingVariables(checkpoint_variables(checkpoint)),
                                           strategy or tf.distribute.get_strategy(), self.settings)

    def resume(self, checkpoint_step: int) -> Resume:
        """Call once, after restoring the durable checkpoint (``checkpoint_step``: its step, 0 if none), on every
        replica. Assigns the snapshot's values when a snapshot is newer; returns where training resumes."""
        if self.session is None:
            return Resume(CHECKPOINT, checkpoint_step) if checkpoint_step > 0 else Resume(SCRATCH, 0)
        choice, _ = self.session.resume(checkpoint_step)
        self.session.start_writing()
        return choice

    def step_done(self, step: int) -> None:
        """After the optimizer update of ``step`` (counting from 1)."""
        if self.session is None:
            return
        if not self._checked:
            self._checked = True
            if len(checkpoint_variables(self.checkpoint)) != len(self.session.variables.variables):
                say("tfdist: snapshots off: the checkpoint gained variables after runtime.snapshots.for_checkpoint "
                    "(build the optimizer first: optimizer.build(model.trainable_variables))")
                self.session.close()
                self.session = None
                return
        self.session.step_done(step)

    def close(self) -> None:
        """Wait for the last snapshot to be written."""
        if self.session is not None:
            self.session.close()


def for_checkpoint(checkpoint: Any, *, strategy: Any = None) -> LoopSnapshots:
    return LoopSnapshots(checkpoint, strategy=strategy)
