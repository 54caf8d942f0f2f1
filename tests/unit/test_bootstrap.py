"""The task bootstrap's parts without TensorFlow: the reporter's states and custom-loop rule, the post-import hook,
the Keras patches on a stand-in Keras package, and that a bootstrapped script runs exactly as ``python script.py``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

from tests.conftest import REPO_ROOT
from tfdist import protocol as P
from tfdist.runtime import bootstrap
from tfdist.runtime.bootstrap import imports, keras_hooks
from tfdist.runtime.bootstrap.reporter import Reporter
from tfdist.runtime.reporting import Heartbeat


def reporter_at(tmp_path, steps: dict) -> tuple[Reporter, str]:
    path = str(tmp_path / "task.heartbeat")
    return Reporter(Heartbeat(path=path, min_interval=0.0), read_step=lambda o: steps.get(id(o))), path


class Opt:
    """A stand-in optimizer (weak-referenceable)."""


# -- the reporter ------------------------------------------------------------------------------------------------
def test_custom_loop_beats_only_once_its_step_moved(tmp_path):
    steps: dict = {}
    rep, path = reporter_at(tmp_path, steps)
    opt = Opt()
    steps[id(opt)] = 0
    rep._optimizers.add(opt)  # watch_optimizer would also start the thread; the rule is poll_loop
    rep.poll_loop()
    assert not os.path.exists(path), "created but not stepping: no beat (a long set-up must not look like a hang)"
    steps[id(opt)] = 7
    rep.poll_loop()
    beat = P.read_heartbeat(path)
    assert beat.step == 7 and beat.state is P.TaskState.TRAINING
    mtime = os.stat(path).st_mtime_ns
    rep.poll_loop()  # no progress: no beat, so the hang watchdog sees the silence
    assert os.stat(path).st_mtime_ns == mtime


def test_custom_loop_watcher_is_quiet_while_a_fit_or_the_runtime_reports(tmp_path):
    steps: dict = {}
    rep, path = reporter_at(tmp_path, steps)
    opt = Opt()
    rep._optimizers.add(opt)
    steps[id(opt)] = 0
    rep.poll_loop()
    steps[id(opt)] = 3
    rep.fits = 1
    rep.poll_loop()
    rep.fits, rep.runtime_reports = 0, True
    rep.poll_loop()
    assert not os.path.exists(path)


def test_fit_end_writes_finished_and_clean_exit_finishes(tmp_path):
    rep, path = reporter_at(tmp_path, {})
    progress = rep.fit_begin(10, total_steps=20)
    progress.batch_end(0.5)
    rep.fit_end()
    beat = P.read_heartbeat(path)
    assert beat.state is P.TaskState.FINISHED and beat.step == 11 and beat.loss == 0.5 and rep.ended


def test_exit_after_an_uncaught_exception_is_not_finished(tmp_path, monkeypatch):
    rep, path = reporter_at(tmp_path, {})
    monkeypatch.setattr(sys, "excepthook", lambda *a: None)
    rep.install()
    try:
        sys.excepthook(ValueError, ValueError("x"), None)
        rep.at_exit()
        assert not os.path.exists(path)
        rep.failed = False
        rep.at_exit()
        assert P.read_heartbeat(path).state is P.TaskState.FINISHED
    finally:
        import atexit

        atexit.unregister(rep.at_exit)


# -- the post-import hook ----------------------------------------------------------------------------------------
def test_after_import_runs_once_the_package_imported_and_never_breaks_it(tmp_path, monkeypatch):
    (tmp_path / "bootstrap_probe_pkg").mkdir()
    (tmp_path / "bootstrap_probe_pkg" / "__init__.py").write_text("VALUE = 41\n")
    (tmp_path / "bootstrap_probe_bad").mkdir()
    (tmp_path / "bootstrap_probe_bad" / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def then(module):
        seen.append(module.VALUE)
        if module.__name__ == "bootstrap_probe_bad":
            raise RuntimeError("a patch that fails")

    finder = imports.after_import(["bootstrap_probe_pkg", "bootstrap_probe_bad"], then)
    try:
        import bootstrap_probe_bad  # noqa: F401
        import bootstrap_probe_pkg

        import bootstrap_probe_pkg as again  # noqa: F401 - cached: no second call
        assert seen == [1, 41] and bootstrap_probe_pkg.VALUE == 41
    finally:
        sys.meta_path.remove(finder)
        for name in ("bootstrap_probe_pkg", "bootstrap_probe_bad"):
            sys.modules.pop(name, None)


# -- the Keras patches, on a stand-in package --------------------------------------------------------------------
def fake_keras(name: str = "fake_keras") -> types.ModuleType:
    module = types.ModuleType(name)
    callbacks = types.ModuleType(f"{name}.callbacks")

    class Callback:
        def __init__(self):
            self.model = None

    Callback.__module__ = f"{name}.callbacks"
    callbacks.Callback = Callback

    class Model:
        def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None):
            self.got = callbacks
            if getattr(self, "validate", False):
                self.evaluate(x)
            return callbacks

        def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                     callbacks=None):
            self.evaluated_with = callbacks
            return callbacks

    Model.__module__ = name
    optimizers = types.ModuleType(f"{name}.optimizers")

    class Optimizer:
        def __init__(self, rate=0.1):
            self.rate = rate

    Optimizer.__module__ = f"{name}.optimizers"
    optimizers.Optimizer = Optimizer
    module.Model, module.callbacks, module.optimizers = Model, callbacks, optimizers
    return module


def test_fit_gets_one_progress_callback_after_the_scripts_own(tmp_path, monkeypatch):
    keras = fake_keras()
    rep, _ = reporter_at(tmp_path, {})
    monkeypatch.setattr(rep, "watch_optimizer", lambda o: rep._optimizers.add(o))
    assert keras_hooks.patch(keras, rep) and not keras_hooks.patch(keras, rep)  # once
    mine = object()
    model = keras.Model()
    got = model.fit([1], callbacks=[mine])
    assert got[0] is mine and len(got) == 2 and type(got[1]).__name__ == "BootstrapProgress"
    positional = model.fit([1], None, None, 1, 0, [mine])
    assert positional[0] is mine and len(positional) == 2
    assert len(model.fit([1])) == 1
    model.validate = True
    model.fit([1])
    assert model.evaluated_with is None, "evaluate inside fit is its validation: no keep-alive"
    assert [type(c).__name__ for c in model.evaluate([1])] == ["BootstrapKeepAlive"]
    opt = keras.optimizers.Optimizer(rate=0.5)
    assert opt.rate == 0.5 and opt in rep._optimizers


def test_fit_with_tfdist_runtime_callbacks_is_left_to_them(tmp_path):
    keras = fake_keras("fake_keras_rt")
    rep, _ = reporter_at(tmp_path, {})
    keras_hooks.patch(keras, rep)
    runtime_cb = type("ProgressCallback", (), {"__module__": "tfdist.runtime.progress"})()
    assert keras.Model().fit(callbacks=[runtime_cb]) == [runtime_cb] and rep.runtime_reports


# -- the script runs as it would without us ----------------------------------------------------------------------
PROBE = '''
import json, multiprocessing, os, sys

def child(queue):
    queue.put([os.environ.get("TFDIST_BOOTSTRAP"), "tfdist.runtime.bootstrap" in sys.modules])

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    seen = {"argv": sys.argv, "file": __file__, "name": __name__, "path": sys.path, "spec": repr(__spec__),
            "pythonpath": os.environ.get("PYTHONPATH"), "flag": os.environ.get("TFDIST_BOOTSTRAP"),
            "child": queue.get(timeout=120)}
    process.join()
    print(json.dumps(seen))
    with open(os.environ["EVIDENCE"], "w") as handle:
        json.dump("tfdist.runtime.bootstrap" in sys.modules, handle)
    raise ValueError("the script's own error")
'''


def run_probe(tmp_path, with_bootstrap: bool) -> tuple[subprocess.CompletedProcess[str], bool]:
    (tmp_path / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TFDIST_BOOTSTRAP")}
    env["PYTHONPATH"] = str(REPO_ROOT / "src")
    env["EVIDENCE"] = str(tmp_path / "evidence.json")
    if with_bootstrap:
        env.update(bootstrap.task_environment(env))
    result = subprocess.run([sys.executable, "-u", "probe.py", "an argument"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=180)
    return result, json.loads((tmp_path / "evidence.json").read_text())


def test_a_bootstrapped_script_sees_what_it_would_see_without_it(tmp_path):
    plain, plain_active = run_probe(tmp_path, with_bootstrap=False)
    booted, booted_active = run_probe(tmp_path, with_bootstrap=True)
    assert (plain_active, booted_active) == (False, True), booted.stderr
    assert booted.returncode == plain.returncode == 1
    assert json.loads(booted.stdout) == json.loads(plain.stdout)  # argv, __file__, sys.path, environment, child
    assert json.loads(plain.stdout)["child"] == [None, False]
    assert booted.stderr == plain.stderr and 'probe.py", line' in plain.stderr  # the same traceback


def test_task_environment_puts_the_site_folder_first_once():
    env = bootstrap.task_environment({"PYTHONPATH": os.pathsep.join(["/a", bootstrap.SITE_DIR])})
    assert env["PYTHONPATH"].split(os.pathsep) == [bootstrap.SITE_DIR, "/a"]
    assert env[bootstrap.ENABLE_VARIABLE] == "1"
    assert os.path.isfile(os.path.join(bootstrap.SITE_DIR, "sitecustomize.py"))
