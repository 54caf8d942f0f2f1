"""The Keras front end: a callback placed after ``BackupAndRestore`` (and before anything that reads the step).

``fit`` knows where to resume (epoch and batch) from ``BackupAndRestore``'s training state, not from the optimizer,
so snapshots need that callback among the callbacks: after a restore from a snapshot this callback sets the training
state's saved epoch and batch to the snapshot's, and ``fit`` continues at the batch after it.
"""
from __future__ import annotations

from typing import Any

from tfdist.runtime.snapshots.extras import ExtraState
from tfdist.runtime.snapshots.policy import SNAPSHOT
from tfdist.runtime.snapshots.session import SnapshotSession, say
from tfdist.runtime.snapshots.settings import SnapshotSettings, settings_from_env
from tfdist.runtime.snapshots.variables import TrainingVariables


def model_state(model: Any) -> list[Any]:
    """Model variables (weights, non-trainable statistics, the state of any ``tf.random.Generator`` a layer tracks)
    and optimizer variables (iterations and slots)."""
    optimizer = getattr(model, "optimizer", None)
    return list(model.variables) + list(getattr(optimizer, "variables", None) or [])


def keras_callback(settings: SnapshotSettings | None = None) -> Any | None:
    """The snapshot callback, or None when snapshots are off or no launcher gave a shared-memory folder.

    Put it after ``tf.keras.callbacks.BackupAndRestore`` in the callbacks list (``runtime.callbacks`` does).
    """
    settings = settings or settings_from_env()
    if not settings.active:
        return None
    import tensorflow as tf

    class SnapshotCallback(tf.keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # reads no logs: nothing is converted for it
            self.session: SnapshotSession | None = None
            self.resume = None
            self._epoch = 0
            self._per_call = 1

        def on_train_begin(self, logs: Any = None) -> None:
            state = getattr(self.model, "_training_state", None)
            if state is None:
                say("tfdist: snapshots off: fit resumes mid-epoch only with tf.keras.callbacks.BackupAndRestore "
                    "before the snapshot callback")
                return
            iterations = self.model.optimizer.iterations
            variables, strategy = model_state(self.model), self.model.distribute_strategy
            # fit's own iterator is not saved: fit makes it after this callback starts (see docs/snapshots.md).
            session = SnapshotSession(TrainingVariables(variables), strategy, settings,
                                      ExtraState(variables, root=self.model, strategy=strategy))
            self.resume, snapshot = session.resume(int(iterations.numpy()))
            if self.resume.source == SNAPSHOT and snapshot is not None:
                state._ckpt_saved_epoch.assign(int(snapshot.meta["epoch"]))
                state._ckpt_saved_batch.assign(int(snapshot.meta["batch"]))
                if not isinstance(state._save_freq, int):
                    # An epoch-saving BackupAndRestore resumes at epoch starts; a snapshot is mid-epoch.
                    state._save_freq = 1
            from tfdist.runtime.progress import steps_per_call

            self._per_call = steps_per_call(self.model)
            session.step = int(iterations.numpy())
            session.start_writing()
            self.session = session

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.session is not None:
                self.session.step_done(self.session.step + self._per_call, {"epoch": int(self._epoch), "batch": int(batch)})

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self.session is not None:
                self.session.pause()

        def on_test_begin(self, logs: Any = None) -> None:
            if self.session is not None:
                self.session.pause()

        def on_train_end(self, logs: Any = None) -> None:
            if self.session is not None:
                self.session.close()

    return SnapshotCallback()


def callbacks_for_fit(model: Any, given: Any) -> list[Any]:
    """For the task bootstrap (a plain script's ``fit`` seen from outside): ``[snapshot callback]`` to append after
    the script's own callbacks when they hold a tf-keras ``BackupAndRestore`` (which tells ``fit`` where to resume)
    and none of tfdist's own snapshot callbacks; else ``[]``. Put it before any callback that reads the resumed step.
    """
    listed = list(given) if isinstance(given, (list, tuple)) else []
    if any(type(cb).__name__ == "SnapshotCallback" for cb in listed):
        return []  # runtime.callbacks() already has one
    # A tf-keras model has the _training_state attribute BackupAndRestore fills; Keras 3 keeps no such state.
    if not hasattr(model, "_training_state") or not any(
            "BackupAndRestore" in [k.__name__ for k in type(cb).__mro__] for cb in listed):
        return []  # without it fit cannot resume mid-epoch
    strategy = getattr(model, "distribute_strategy", None)
    if any("ParameterServerStrategy" in k.__name__ for k in type(strategy).__mro__):
        return []
    callback = keras_callback()
    return [callback] if callback is not None else []
