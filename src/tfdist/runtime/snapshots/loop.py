"""The custom-training-loop front end: snapshots of a ``tf.train.Checkpoint``'s variables.

    optimizer.build(model.trainable_variables)                # its slots must exist before the first snapshot
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    step = restore_my_durable_checkpoint(checkpoint)          # 0 when there is none
    iterator = iter(dataset)                                  # a tf.data iterator: its position is snapshotted too
    snapshots = runtime.snapshots.for_checkpoint(checkpoint, strategy=strategy, iterator=iterator)
    step = snapshots.resume(step).step                        # newer state from a snapshot, if every replica has it
    while step < total:
        train_step(iterator); step += 1
        snapshots.step_done(step)
    snapshots.close()

Every variable the checkpoint reaches is snapshotted (``tf.train.TrackableView``), including the state of any
``tf.random.Generator`` in it, plus the random generators tf-keras layers keep to themselves and the global generator
(:mod:`~tfdist.runtime.snapshots.extras`). The input position: the state of the ``tf.data`` iterators given as
``iterator=`` or tracked in the checkpoint, in a job of one task, where TensorFlow can serialize them (not
``from_generator``/``py_function`` pipelines, not ``strategy.experimental_distribute_dataset`` iterators: one line
says so). Saving an iterator serializes its buffered elements (prefetch, shuffle) on the training thread; the copy
cost counts into the automatic interval, so a big shuffle buffer makes snapshots rarer.

The variables are listed when :func:`for_checkpoint` is called, so an optimizer must be built by then (Keras
optimizers create their slots at the first update otherwise). If the checkpoint has gained variables by the first
:meth:`LoopSnapshots.step_done`, snapshots are turned off with one line rather than saving a partial state.
"""
from __future__ import annotations

from typing import Any

from tfdist.runtime.snapshots.extras import ExtraState
from tfdist.runtime.snapshots.policy import CHECKPOINT, SCRATCH, Resume
from tfdist.runtime.snapshots.session import SnapshotSession, say
from tfdist.runtime.snapshots.settings import SnapshotSettings, settings_from_env
from tfdist.runtime.snapshots.variables import TrainingVariables


def checkpoint_variables(checkpoint: Any) -> list[Any]:
    import tensorflow as tf

    return [obj for obj in tf.train.TrackableView(checkpoint).descendants() if isinstance(obj, tf.Variable)]


def checkpoint_iterators(checkpoint: Any) -> list[Any]:
    import tensorflow as tf

    return [obj for obj in tf.train.TrackableView(checkpoint).descendants() if isinstance(obj, tf.data.Iterator)]


class LoopSnapshots:
    """Snapshots for a custom loop; every method is a no-op (and :meth:`resume` returns the checkpoint's step) when
    snapshots are off."""

    def __init__(self, checkpoint: Any, *, strategy: Any = None, settings: SnapshotSettings | None = None,
                 iterator: Any = None) -> None:
        import tensorflow as tf

        self.settings = settings or settings_from_env()
        self.checkpoint = checkpoint
        self.session: SnapshotSession | None = None
        self._checked = False
        if self.settings.active:
            variables, strategy = checkpoint_variables(checkpoint), strategy or tf.distribute.get_strategy()
            given = list(iterator) if isinstance(iterator, (list, tuple)) else [iterator]
            iterators = list({id(i): i for i in given + checkpoint_iterators(checkpoint) if i is not None}.values())
            extras = ExtraState(variables, root=checkpoint, iterators=iterators, strategy=strategy)
            self.session = SnapshotSession(TrainingVariables(variables), strategy, self.settings, extras)

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


def for_checkpoint(checkpoint: Any, *, strategy: Any = None, iterator: Any = None) -> LoopSnapshots:
    """``iterator``: the loop's ``tf.data`` iterator (or a list of them), whose position is snapshotted too where
    TensorFlow can serialize it; iterators the checkpoint tracks are included anyway."""
    return LoopSnapshots(checkpoint, strategy=strategy, iterator=iterator)
