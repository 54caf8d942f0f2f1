"""The task bootstrap: what ``tfdist launch`` runs inside each Python task before the user's own script, so that a
plain ``tf.distribute`` script (it reads TF_CONFIG and imports nothing of tfdist) reports like one written for
tfdist: heartbeats with step and loss, true states (training, done), its error record, and a save on SIGTERM where
it can make one.

How it gets in: the launcher puts the folder ``site/`` first on the task's PYTHONPATH and sets ``TFDIST_BOOTSTRAP=1``.
Python imports ``site/sitecustomize.py`` at start-up, which calls :func:`activate`; the script then runs exactly as
``python script.py`` runs it (the same ``sys.argv``, ``__main__``, ``__file__``, tracebacks and multiprocessing,
which a ``runpy`` wrapper could not all keep). :func:`activate` removes both traces from ``os.environ`` and
``sys.path``, so the script's own subprocesses and multiprocessing children run without it. ``--no-bootstrap``
(``TFDIST_LAUNCH_NO_BOOTSTRAP=1``) sets neither: nothing of this package is loaded.

What it watches, without costing the training steps anything measurable:

- Keras ``Model.fit``/``evaluate`` (tf-keras, Keras 3, whichever the script imports): one callback is added from
  outside (:mod:`.keras_hooks`) that counts steps in Python and converts the loss only when a heartbeat is due;
  ``fit`` returning marks the task's training finished. A ``BackupAndRestore`` it finds also gets TensorFlow's
  preemption handler, so that SIGTERM saves at the current step and exits 143 (as ``tfdist.runtime`` does), and
  in-memory snapshots (:func:`tfdist.runtime.snapshots.callbacks_for_fit`) under ``tfdist launch``.
- Custom training loops: the step of the Keras optimizer the script created (its ``iterations``), read by a
  background thread every heartbeat interval (:mod:`.reporter`); it cannot see a loss there, nor a loop without a Keras
  optimizer.
- The error hook of :mod:`tfdist.runtime.reporting`, and the stack-dump registration of the flight recorder
  (:func:`tfdist.protocol.stackdump.install`).
"""
from __future__ import annotations

import os
import sys

from tfdist.protocol.plan import BOOTSTRAP_SITE as SITE_DIR
from tfdist.protocol.plan import bootstrap_environment, forget_bootstrap
from tfdist.protocol.variables import BOOTSTRAP as ENABLE_VARIABLE

_active: dict[str, object] = {}


def task_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a task needs for the bootstrap to run in it (see :func:`tfdist.protocol.bootstrap_environment`)."""
    return bootstrap_environment((environ if environ is not None else os.environ).get("PYTHONPATH"))


def activate(site_dir: str = SITE_DIR) -> None:  # noqa: ARG001 - sitecustomize says where it runs from
    """Start watching this process (called once by ``sitecustomize``, or by a warm spare before it runs the
    script). Never raises into the caller for anything the script could have done without us."""
    forget_bootstrap(os.environ)
    if _active:
        return
    from tfdist.runtime.bootstrap import imports, keras_hooks
    from tfdist.runtime.bootstrap.reporter import Reporter

    reporter = Reporter()
    _active["reporter"] = reporter
    reporter.install()
    imports.after_import(keras_hooks.PACKAGES, lambda module: keras_hooks.patch(module, reporter))
    for name in keras_hooks.PACKAGES:  # already imported (a warm spare preloads them): patch now
        if name in sys.modules:
            keras_hooks.patch(sys.modules[name], reporter)
    _install_stackdump()


def _install_stackdump() -> None:
    # The flight recorder (issue 22) asks a task for its Python stacks with a signal; this registers faulthandler for it,
    # writing next to the heartbeat file. A warm spare has no heartbeat path yet: it installs once its task is known.
    from tfdist.protocol import stackdump

    stackdump.install()  # never raises


def reporter() -> object | None:
    """The active reporter (tests, the runtime), or None when the bootstrap does not run in this process."""
    return _active.get("reporter")
