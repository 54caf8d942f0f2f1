"""TensorBoard for a training job: epoch summaries through tf.keras, step scalars from the progress callback.

tf-keras' TensorBoard calls ``tf.summary.scalar`` eagerly for every log entry in its batch hooks, and tf-keras runs
those hooks whenever *any* callback has batch hooks, even with ``update_freq="epoch"``: that costs hundreds of
microseconds per step. So :func:`keras_tensorboard` drops its batch hooks, and :class:`ScalarWriter` writes the
step-level scalars (``train/loss``, ``train/examples_per_second``, ``train/step_time_seconds``) every
``every_seconds``, averaged since the last write: the cost (a few ms per write, one device sync for the loss) stays
negligible however short a step is. Only the chief writes, so one event file per job grows.

TensorFlow 2.21 no longer installs TensorBoard, and without it ``tf.summary.scalar`` raises ``TBNotInstalledError``
-- at the end of the first epoch, after that epoch trained. :func:`summaries_available` tells before ``fit``.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from tfdist.extras import MissingExtra, require


def summaries_available(is_chief: bool) -> bool:
    """Whether summaries can be written here; if not, the chief says in one line what to install (once per job).

    Without TensorBoard the job trains on, with no summaries, rather than failing: they are on by default and only
    observe the training (nothing is lost without them, and the fix can wait for the next run), while a job that
    fails at its start may have waited long for its machines, as a scheduled or multi-machine job does.
    ``callbacks(..., tensorboard=False)`` asks for no summaries, and says nothing.
    """
    try:
        require("tensorboard", "TensorBoard in tfdist.runtime.callbacks")
    except MissingExtra as missing:
        if is_chief:
            print(f"tfdist: warning: {missing.one_line()}; training on without TensorBoard summaries "
                  "(tensorboard=False: none wanted)", file=sys.stderr, flush=True)
        return False
    return True


def keras_tensorboard(log_dir: str, **kwargs: Any) -> Any:
    """``tf.keras.callbacks.TensorBoard`` writing epoch-level summaries only, at no per-step cost.

    Args:
        log_dir: TensorBoard directory (tf-keras sends non-chief writes to a temporary directory by itself).
        **kwargs: more ``TensorBoard`` arguments (``histogram_freq``, ``write_graph``...). Profiling is off.
    """
    import tensorflow as tf

    class EpochTensorBoard(tf.keras.callbacks.TensorBoard):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            pass

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pass

    kwargs.update(update_freq="epoch", profile_batch=0)
    kwargs.setdefault("write_graph", False)
    return EpochTensorBoard(log_dir, **kwargs)


class ScalarWriter:
    """Loss, throughput and step time under ``<log_dir>/train``, every ``every_seconds`` and at each pause.

    Args:
        log_dir: the job's shared TensorBoard directory (``tfdist tensorboard --logdir`` reads it).
        examples_per_step: the global batch size, for ``examples_per_second`` (None: not written).
        every_seconds: write period.
    """

    def __init__(self, log_dir: str, *, examples_per_step: int | None = None, every_seconds: float = 10.0) -> None:
        self.log_dir = log_dir
        self.examples_per_step = examples_per_step
        self.every_seconds = every_seconds
        self._writer: Any = None
        self._since: float | None = None
        self._count = 0
        self._loss: Any = None
        self._last = 0.0

    def steps_done(self, step: int, steps: int, loss: Any, now: float) -> None:
        """``steps`` more steps ended at ``now`` (the progress clock); ``loss`` is the latest, as a tensor."""
        self._loss = loss
        self._last = now
        if self._since is None:  # the first batch after a pause opens the window (its own time is unknown)
            self._since, self._count = now, 0
            return
        self._count += steps
        if now - self._since >= self.every_seconds:
            self._write(step, now)

    def pause(self, step: int) -> None:
        """Epoch end or validation: write what was gathered up to the last step; the pause is not step time."""
        if self._since is not None:
            self._write(step, self._last)
        self._since = None
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _write(self, step: int, now: float) -> None:
        import tensorflow as tf

        elapsed = now - (self._since or now)
        if self._count and elapsed > 0:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "train"))
            with self._writer.as_default(step=step):
                if self._loss is not None:
                    tf.summary.scalar("train/loss", self._loss)
                tf.summary.scalar("train/step_time_seconds", elapsed / self._count)
                if self.examples_per_step:
                    tf.summary.scalar("train/examples_per_second", self.examples_per_step * self._count / elapsed)
        self._since, self._count = now, 0
