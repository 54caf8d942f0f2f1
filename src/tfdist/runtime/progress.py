"""One progress callback: it counts training steps locally and fans each step out to the heartbeat, Prometheus and
TensorBoard.

The step is read from the optimizer once, when ``fit`` begins (that read syncs with the device; it also tells
where a resumed run restarted); after that every batch adds Keras' ``steps_per_execution`` to a Python integer. The
loss arrives as a tensor and is converted (a device sync) only when something is written: the heartbeat every
``TFDIST_HEARTBEAT_INTERVAL`` seconds, TensorBoard every ``every_seconds``, Prometheus at scrape time.

The same hooks delimit the task's phases (:mod:`tfdist.runtime.phases`): a fit's first step ends the phase before it
(start-up, a restore, or what ran between two fits), each later batch is a step, an epoch's last batch or a
validation starts ``between``, the next epoch's start ends it. A change of kind writes the heartbeat at once.

:class:`Progress` holds the counting and fan-out, imports no TensorFlow and is tested on its own;
:func:`progress_callback` is the thin Keras adapter around it.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from tfdist.protocol.records import Phase
from tfdist.runtime.metrics import TrainingMetrics
from tfdist.runtime.reporting import Heartbeat


class ScalarSink(Protocol):
    """Where step-level scalars go (TensorBoard's writer in :mod:`tfdist.runtime.tensorboard`)."""

    def steps_done(self, step: int, steps: int, loss: Any, now: float) -> None: ...

    def pause(self, step: int) -> None: ...

    def close(self) -> None: ...


def as_float(value: Any) -> float | None:
    """A loss (float or scalar tensor) as a float, None when there is none or it is not finite."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number - number == 0 else None  # NaN and infinities have no JSON spelling


class Progress:
    """Counts steps and fans them out to the heartbeat, Prometheus and TensorBoard.

    Args:
        heartbeat: the launcher's heartbeat writer (throttled by itself), or None.
        metrics: the task's Prometheus metrics, or None.
        scalars: a TensorBoard scalar writer (the chief's), or None.
        examples_per_step: examples this task processes per step (its share of the global batch); 0 if unknown.
        clock: a monotonic clock in seconds; tests inject their own.
    """

    def __init__(self, *, heartbeat: Heartbeat | None = None, metrics: TrainingMetrics | None = None,
                 scalars: ScalarSink | None = None, examples_per_step: int = 0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.heartbeat = heartbeat if heartbeat is not None and heartbeat.path else None
        self.metrics = metrics
        self.scalars = scalars
        self.examples_per_step = examples_per_step
        self.step = 0
        self.start_step = 0
        self.examples = 0
        self.loss: Any = None
        self._clock = clock
        self._per_call = 1
        self._mark: float | None = None
        self._phases = self.heartbeat.phases if self.heartbeat is not None else None
        self._first = True  # the fit's first step has not ended yet
        self._per_epoch = 0  # steps per epoch, where Keras knows them

    def begin(self, step: int, *, steps_per_call: int = 1, total_steps: int | None = None,
              steps_per_epoch: int | None = None) -> None:
        """``fit`` begins at global ``step`` (restored from a backup, or 0)."""
        self.step = self.start_step = step
        self._per_call = max(1, steps_per_call)
        self._mark = None
        self._first = True
        self._per_epoch = steps_per_epoch if isinstance(steps_per_epoch, int) and steps_per_epoch > 0 else 0
        if self.heartbeat is not None:
            self.heartbeat.total_steps = total_steps
            self.heartbeat.beat(step, force=True)

    def batch_begin(self) -> None:
        if self._mark is None:
            self._mark = self._clock()

    def batch_end(self, loss: Any, batch: int | None = None) -> None:
        """One batch hook call: ``steps_per_call`` steps done, ``loss`` the latest (a tensor is not converted),
        ``batch`` Keras' index of the last of them in its epoch."""
        now = self._clock()
        phases, changed = self._phases, False
        if phases is not None:
            # An epoch's last batch: what follows is its end (callbacks, validation, saves), not a step.
            last = self._per_epoch and batch is not None and (batch + 1) % self._per_epoch == 0
            if not (self._first or last):
                phases.step_done(now)  # the common case first: one call per step
            elif self._first:  # it traced the training function: it ends start-up (or the restore) at its end
                self._first = False
                changed = phases.enter(Phase.BETWEEN if last else Phase.STEP, now)
            else:
                changed = phases.enter(Phase.BETWEEN, now)  # which finishes the step that just ended
        per_call = self._per_call
        duration = (now - self._mark) / per_call if self._mark is not None else 0.0
        self._mark = now
        self.step += per_call
        examples = self.examples_per_step * per_call
        self.examples += examples
        if loss is not None:
            self.loss = loss
        if self.metrics is not None:
            self.metrics.step_done(examples, loss, duration, steps=per_call)
        if self.heartbeat is not None and (changed or self.heartbeat.due()):
            self.heartbeat.beat(self.step, force=changed, loss=as_float(self.loss), examples=self.examples or None)
        if self.scalars is not None:
            self.scalars.steps_done(self.step, per_call, self.loss, now)

    def _enter(self, phase: Phase) -> bool:
        """Enter ``phase``; True when that wrote a beat (a change of kind)."""
        if self._phases is None or not self._phases.enter(phase):
            return False
        self.heartbeat.beat(self.step, force=True, loss=as_float(self.loss),  # type: ignore[union-attr]
                            examples=self.examples or None)
        return True

    def epoch_begin(self) -> None:
        """An epoch's steps begin (the first epoch's first step still belongs to the phase before the fit)."""
        if not self._first:
            self._enter(Phase.STEP)

    def pause(self, step: int | None = None) -> bool:
        """Between epochs or during validation: that time is not step time. ``step`` corrects the count where no
        batch hooks ran (ParameterServerStrategy). True when that wrote a beat."""
        if step is not None:
            self.step = step
        self._mark = None
        wrote = False
        if not self._first or step is not None:  # a validation before any step does not end start-up
            self._first = False  # (no batch hooks: an epoch is the smallest step there is)
            wrote = self._enter(Phase.BETWEEN)
        if self.scalars is not None:
            self.scalars.pause(self.step)
        return wrote

    def epoch_end(self, step: int | None = None) -> None:
        if not self.pause(step) and self.heartbeat is not None:
            self.heartbeat.beat(self.step, force=True, loss=as_float(self.loss), examples=self.examples or None)

    def end(self) -> None:
        """Training ended: the watchdog stops expecting beats (saving and evaluating after ``fit`` are silent)."""
        if self._phases is not None:
            self._phases.enter(Phase.BETWEEN)
        if self.heartbeat is not None:
            self.heartbeat.finished(self.step, loss=as_float(self.loss), examples=self.examples or None)
        if self.scalars is not None:
            self.scalars.close()


def steps_per_call(model: Any) -> int:
    """How many steps one batch hook call covers (tf-keras' ``steps_per_execution``)."""
    try:
        return max(1, int(model._steps_per_execution.numpy()))
    except (AttributeError, TypeError, ValueError):
        return 1


def total_steps(params: Any) -> int | None:
    """``epochs x steps per epoch`` from Keras' callback params, when both are known."""
    params = params or {}
    epochs, steps = params.get("epochs"), params.get("steps")
    return epochs * steps if isinstance(epochs, int) and isinstance(steps, int) and steps > 0 else None


def _optimizer_step(model: Any) -> int | None:
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    return int(iterations.numpy()) if iterations is not None else None


def progress_callback(progress: Progress, *, batch_hooks: bool = True) -> Any:
    """The Keras callback driving ``progress``.

    Args:
        progress: what to count into and fan out to.
        batch_hooks: False under ParameterServerStrategy, which allows no batch-level callbacks: the step is then
            read once per epoch.
    """
    import tensorflow as tf

    class ProgressCallback(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # the logs stay tensors: no per-batch conversion for this callback
            self.progress = progress

        def on_train_begin(self, logs: Any = None) -> None:
            progress.begin(_optimizer_step(self.model) or 0, steps_per_call=steps_per_call(self.model),
                           total_steps=total_steps(self.params), steps_per_epoch=(self.params or {}).get("steps"))

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            progress.epoch_begin()

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            progress.batch_begin()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            progress.batch_end((logs or {}).get("loss"), batch)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if not batch_hooks and logs:
                progress.loss = logs.get("loss", progress.loss)
            progress.epoch_end(None if batch_hooks else _optimizer_step(self.model))

        def on_test_begin(self, logs: Any = None) -> None:
            progress.pause()

        def on_train_end(self, logs: Any = None) -> None:
            progress.end()

        def _implements_train_batch_hooks(self) -> bool:
            return batch_hooks

    return ProgressCallback()


def time_backups(backup: Any, metrics: TrainingMetrics) -> Any:
    """Report each save of a tf-keras ``BackupAndRestore`` callback as a checkpoint (step and duration).

    Wraps the callback's ``_backup`` method (tf-keras 2.x); returns the callback unchanged where it has none. The
    step is the optimizer's: a save syncs with the device anyway, and the backup runs before the progress
    callback has counted the batch it saves after.
    """
    original = getattr(backup, "_backup", None)
    if not callable(original):
        return backup

    def _backup(epoch: int, batch: int = 0) -> None:
        started = time.perf_counter()
        original(epoch=epoch, batch=batch)
        elapsed = time.perf_counter() - started
        metrics.checkpoint_saved(_optimizer_step(backup.model) or 0, elapsed)

    backup._backup = _backup
    return backup
