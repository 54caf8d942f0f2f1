"""Keras, watched from outside: once a Keras package is imported (tf-keras, or Keras 3), its ``Model.fit`` gets one
extra callback and ``Model.evaluate`` a keep-alive, and its optimizers are registered for :mod:`.reporter`'s custom
loop watcher. The script's own arguments and callbacks are passed on untouched.

The callback is as cheap as Keras allows: it keeps the logs as tensors (``_supports_tf_logs``; Keras 3 is told it
is ``async_safe``), counts steps in a Python integer, and converts the loss only when a heartbeat is due. Under
ParameterServerStrategy, which allows no batch-level callbacks, it reports once per epoch.
"""
from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType
from typing import Any, Callable

from tfdist.compat.keras import KERAS, TF_KERAS
from tfdist.runtime.bootstrap.reporter import Reporter, optimizer_step
from tfdist.runtime.phases import marks_restore

PACKAGES = (TF_KERAS, KERAS)  # whichever the script imports, tf.keras included
_MARK = "_tfdist_bootstrap_patched"
_inside = threading.local()  # a fit running on this thread: evaluate() inside it is fit's validation


def patch(module: ModuleType, reporter: Reporter) -> bool:
    """Patch the Keras package ``module`` (once); False where it is not a Keras this knows."""
    model = getattr(module, "Model", None)
    callbacks = getattr(module, "callbacks", None)
    base = getattr(callbacks, "Callback", None)
    if model is None or base is None or getattr(model, _MARK, False):
        return False
    progress_class = _progress_class(base, reporter)
    keep_alive_class = _keep_alive_class(base, reporter)
    model.fit = _with_callbacks(model.fit, 5, lambda m, given: _fit_callbacks(m, given, progress_class, reporter),
                                during_fit=True)
    model.evaluate = _with_callbacks(model.evaluate, 6, lambda m, given: (
        [] if getattr(_inside, "fit", 0) else [keep_alive_class()]), during_fit=False)
    setattr(model, _MARK, True)
    for optimizer_class in _optimizer_bases(module):
        _register_on_init(optimizer_class, reporter)
    return True


def _with_callbacks(method: Callable[..., Any], position: int,
                    extra: Callable[[Any, Any], list[Any]], *, during_fit: bool) -> Callable[..., Any]:
    """``method`` with ``extra(model, given)`` appended to its ``callbacks`` argument (keyword, or positional at
    ``position`` counting after ``self``)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if len(args) > position:
                given = args[position]
                args = (*args[:position], _appended(given, extra(self, given)), *args[position + 1:])
            else:
                given = kwargs.get("callbacks")
                kwargs["callbacks"] = _appended(given, extra(self, given))
        except Exception:  # noqa: BLE001 - never stand between the script and its training
            pass
        if not during_fit:
            return method(self, *args, **kwargs)
        _inside.fit = getattr(_inside, "fit", 0) + 1
        try:
            return method(self, *args, **kwargs)
        finally:
            _inside.fit -= 1

    return wrapper


def _appended(given: Any, extra: list[Any]) -> Any:
    if not extra:
        return given
    if given is None:
        return list(extra)
    if isinstance(given, (list, tuple)):
        return [*given, *extra]
    return given  # a CallbackList the script built itself: leave it as it is


def _fit_callbacks(model: Any, given: Any, progress_class: type, reporter: Reporter) -> list[Any]:
    if getattr(_inside, "fit", 0):
        return []  # a subclass's fit calling the base fit: one callback is enough
    listed = list(given) if isinstance(given, (list, tuple)) else []
    if any(type(cb).__module__ == "tfdist.runtime.progress" for cb in listed):
        reporter.runtime_reports = True  # the script uses tfdist.runtime's callbacks: they report already
        return []
    parameter_server = _parameter_server(model)
    if not parameter_server:  # ParameterServerStrategy has no preemption handler for Keras
        for backup in (cb for cb in listed if type(cb).__name__ == "BackupAndRestore"
                       and type(cb).__module__.split(".")[0] == TF_KERAS):
            _save_on_sigterm(backup, reporter)
    # In-memory snapshots (tfdist.runtime.snapshots) after the script's own BackupAndRestore, which restores first,
    # and before the progress callback, which then reads the step they resumed at.
    snapshots = _snapshots(model, given)
    for restorer in [*(cb for cb in listed if type(cb).__name__ == "BackupAndRestore"), *snapshots]:
        marks_restore(restorer, reporter.heartbeat.phases, lambda: reporter.heartbeat.beat(reporter.step, force=True))
    return [*snapshots, progress_class(batch_hooks=not parameter_server)]


def _snapshots(model: Any, given: Any) -> list[Any]:
    try:
        from tfdist.runtime.snapshots import callbacks_for_fit

        return callbacks_for_fit(model, given)
    except Exception as error:  # noqa: BLE001 - training goes on with its durable backups only
        sys.stderr.write(f"tfdist: no in-memory snapshots in this task ({type(error).__name__}: {error})\n")
        return []


def _save_on_sigterm(backup: Any, reporter: Reporter) -> None:
    """The script's own tf-keras ``BackupAndRestore`` also saves on SIGTERM (as ``tfdist.runtime``'s does): TensorFlow's
    preemption handler is attached once it has restored, and checked after each batch."""
    if getattr(backup, _MARK, False):
        return
    setattr(backup, _MARK, True)
    begin = backup.on_train_begin

    def on_train_begin(logs: Any = None) -> None:
        begin(logs)
        try:
            from tfdist.runtime.fault_tolerance import attach_preemption_handler

            attach_preemption_handler(backup)
            reporter.heartbeat.saves = True  # the launcher may now promise a save for this task
        except Exception as error:  # noqa: BLE001 - training goes on; only the save on SIGTERM is missing
            sys.stderr.write(f"tfdist: SIGTERM will not save this task ({type(error).__name__}: {error})\n")

    backup.on_train_begin = on_train_begin
    backup._implements_train_batch_hooks = lambda: True  # where the handler is checked


def _parameter_server(model: Any) -> bool:
    strategy = getattr(model, "distribute_strategy", None)
    return any("ParameterServerStrategy" in cls.__name__ for cls in type(strategy).__mro__)


def _progress_class(base: type, reporter: Reporter) -> type:
    from tfdist.runtime.progress import steps_per_call, total_steps

    class BootstrapProgress(base):  # type: ignore[valid-type,misc]
        async_safe = True  # Keras 3: no reason to make its callbacks synchronous

        def __init__(self, batch_hooks: bool = True) -> None:
            super().__init__()
            self._supports_tf_logs = True  # tf-keras: the logs stay tensors, no per-batch conversion
            self._batch_hooks = batch_hooks
            self._progress: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            self._progress = reporter.fit_begin(optimizer_step(self.model.optimizer) or 0,
                                                steps_per_call=steps_per_call(self.model),
                                                total_steps=total_steps(self.params),
                                                steps_per_epoch=(self.params or {}).get("steps"))

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._progress.epoch_begin()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._progress.batch_end(logs.get("loss") if logs else None, batch)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if not self._batch_hooks and logs:
                self._progress.loss = logs.get("loss", self._progress.loss)
            self._progress.epoch_end(None if self._batch_hooks else optimizer_step(self.model.optimizer))

        def on_test_begin(self, logs: Any = None) -> None:
            if self._progress is not None:
                self._progress.pause()

        def on_train_end(self, logs: Any = None) -> None:
            reporter.fit_end()

        def _implements_train_batch_hooks(self) -> bool:
            return self._batch_hooks

        def _implements_test_batch_hooks(self) -> bool:
            return False

        def _implements_predict_batch_hooks(self) -> bool:
            return False

    return BootstrapProgress


def _keep_alive_class(base: type, reporter: Reporter) -> type:
    class BootstrapKeepAlive(base):  # type: ignore[valid-type,misc]
        """A standalone ``evaluate`` between a custom loop's steps is not a hang."""

        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True

        def on_test_begin(self, logs: Any = None) -> None:
            reporter.evaluating()

        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            reporter.keep_alive()

        def _implements_train_batch_hooks(self) -> bool:
            return False

        def _implements_test_batch_hooks(self) -> bool:
            return True

        def _implements_predict_batch_hooks(self) -> bool:
            return False

    return BootstrapKeepAlive


def _optimizer_bases(module: ModuleType) -> list[type]:
    """The classes every optimizer of ``module`` initialises through (new and legacy tf-keras, Keras 3)."""
    optimizers = getattr(module, "optimizers", None)
    found = [getattr(optimizers, "Optimizer", None), getattr(getattr(optimizers, "legacy", None), "Optimizer", None)]
    bases = []
    for cls in (c for c in found if isinstance(c, type)):
        # The root-most class of the package's own that defines __init__: subclasses all call it.
        own = [k for k in cls.__mro__ if k.__module__.split(".")[0] == module.__name__ and "__init__" in vars(k)]
        if own:
            bases.append(own[-1])
    return bases


def _register_on_init(cls: type, reporter: Reporter) -> None:
    original = cls.__init__
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            reporter.watch_optimizer(self)
        except Exception:  # noqa: BLE001 - a weak reference we cannot take: this optimizer goes unwatched
            pass

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__  # type: ignore[misc]
