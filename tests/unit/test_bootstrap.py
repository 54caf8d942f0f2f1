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


@pytest.mark.parametrize("carried", [True, False], ids=["reloaded-model", "new-model"])
def test_a_second_fit_counts_on_from_the_first_with_a_total_that_belongs(tmp_path, carried):
    """Issue 35 item 2: train 6 steps, reload (or rebuild) the model, train 10 more: 6/16 at its start, 16/16 at
    its end, whatever its optimizer's own step was (the reloaded model's 6, a new one's 0)."""
    rep, path = reporter_at(tmp_path, {})
    first = rep.fit_begin(0, total_steps=6)
    for _ in range(6):
        first.batch_end(1.0)
    rep.fit_end()
    second = rep.fit_begin(6 if carried else 0, total_steps=10)
    beat = P.read_heartbeat(path)
    assert (beat.state, beat.step, beat.total_steps) == (P.TaskState.TRAINING, 6, 16)
    for _ in range(10):
        second.batch_end(0.5)
    rep.fit_end()
    beat = P.read_heartbeat(path)
    assert (beat.state, beat.step, beat.total_steps) == (P.TaskState.FINISHED, 16, 16)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A reporter with its exit hooks installed, every one of them undone after the test."""
    import atexit
    import builtins

    monkeypatch.setattr(sys, "excepthook", lambda *a: None)
    monkeypatch.setattr(sys, "exit", sys.exit)
    for name in ("exit", "quit"):
        monkeypatch.setattr(builtins, name, getattr(builtins, name), raising=False)
    steps: dict = {}
    rep, path = reporter_at(tmp_path, steps)
    rep.install()
    yield rep, path, steps
    atexit.unregister(rep.at_exit)


def test_exit_after_an_uncaught_exception_is_not_finished(installed):
    rep, path, _ = installed
    sys.excepthook(ValueError, ValueError("x"), None)
    rep.at_exit()
    assert not os.path.exists(path)
    rep.failed = False
    rep.at_exit()
    assert P.read_heartbeat(path).state is P.TaskState.FINISHED


def exit_with(status, how: str = "sys") -> None:
    import builtins

    with pytest.raises(SystemExit):
        (sys.exit if how == "sys" else getattr(builtins, how))(status)


# Issue 35 item 1: (how the script ends, what it trained) -> the state its heartbeat ends in (None: none written).
EXITS = [
    ((3, "sys"), "nothing", None),  # missing data, a failed download: a failure, retried
    (("no data here", "sys"), "nothing", None),  # SystemExit with a message exits 1
    ((2, "exit"), "nothing", None),  # exit() and quit() too
    ((256 + 4, "quit"), "nothing", None),
    ((0, "sys"), "nothing", "finished"),  # status 0 is a success (as torchrun and the launcher count it): done
    ((None, "sys"), "nothing", "finished"),
    ((3, "sys"), "loop", "training"),  # a custom loop that gives up: the last beat stays, the launcher retries
    ((0, "sys"), "loop", "finished"),
    ((3, "sys"), "fit", "finished"),  # after fit returned: a failure after training finished, not trained again
]


@pytest.mark.parametrize("end, trained, state", EXITS)
def test_only_an_exit_after_finished_training_or_with_status_0_is_finished(installed, end, trained, state):
    rep, path, steps = installed
    if trained == "loop":
        opt = Opt()
        steps[id(opt)] = 0
        rep._optimizers.add(opt)
        rep.poll_loop()
        steps[id(opt)] = 5
        rep.poll_loop()
    elif trained == "fit":
        rep.fit_begin(0, total_steps=4).batch_end(0.5)
        rep.fit_end()
    exit_with(*end)
    rep.at_exit()
    beat = P.read_heartbeat(path)
    assert (beat.state.value if beat else None) == state, beat


def test_an_exit_the_script_caught_before_training_is_not_how_it_ends(installed):
    rep, path, _ = installed
    exit_with(2)  # argparse inside a try: the script goes on
    rep.fit_begin(0).batch_end(None)
    rep.at_exit()
    assert P.read_heartbeat(path).state is P.TaskState.FINISHED


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


def test_sys_exit_in_another_thread_ends_that_thread_only(installed):
    import threading

    rep, path, _ = installed
    worker = threading.Thread(target=exit_with, args=(4,))
    worker.start()
    worker.join()
    rep.at_exit()
    assert P.read_heartbeat(path).state is P.TaskState.FINISHED  # the process itself ends with status 0
