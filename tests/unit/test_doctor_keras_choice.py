"""Issue 35 item 5: the doctor's XLA findings follow the Keras the training will run under (TF version, tf-keras,
TF_USE_LEGACY_KERAS and tfdist launch's own choice) and say when they bite."""

from __future__ import annotations

import pytest

from tfdist.cluster.resolve import task_environment
from tfdist.doctor.checks.xla import check_xla
from tfdist.doctor.context import build_context
from tfdist.doctor.facts import (
    CudaRoot,
    Distribution,
    DriverFacts,
    Facts,
    Gpu,
    LibraryFacts,
    SystemFacts,
    TensorFlowFacts,
    XlaFacts,
)
from tfdist.doctor.keras_choice import EVERY_FIT, JIT_COMPILE_ONLY, OPTIMIZER_STEP, keras_choice, xla_exposure
from tfdist.launch.local import command_check
from tfdist.launch.spec import LaunchSpec


@pytest.mark.parametrize(
    "tf, tf_keras, legacy, major, plain, level",
    [
        ("2.10.1", None, None, 2, None, JIT_COMPILE_ONLY),  # OptimizerV2: nothing goes through XLA unless asked
        ("2.12.0", None, None, 2, None, OPTIMIZER_STEP),  # the 2.11+ optimizers compile their update step
        ("2.13.1", None, "0", 2, None, OPTIMIZER_STEP),  # the variable means nothing before Keras 3
        ("2.15.1", "2.15.1", None, 2, None, OPTIMIZER_STEP),
        ("2.16.2", None, None, 3, None, EVERY_FIT),  # Keras 3 is tf.keras
        ("2.21.0", "2.21.0", None, 2, 3, OPTIMIZER_STEP),  # tfdist launch sets TF_USE_LEGACY_KERAS=1; plain python: 3
        ("2.21.0", "2.21.0", "1", 2, None, OPTIMIZER_STEP),
        ("2.21.0", "2.21.0", "True", 2, None, OPTIMIZER_STEP),
        ("2.21.0", "2.21.0", "TRUE", 3, None, EVERY_FIT),  # TensorFlow takes 1, true and True only
        ("2.21.0", "2.21.0", "0", 3, None, EVERY_FIT),  # the user chose Keras 3: launch keeps the choice
        ("2.21.0", None, "1", 3, None, EVERY_FIT),  # asked for tf-keras that is not there (check_keras says so)
    ],
)
def test_keras_and_what_xla_compiles(tf: str, tf_keras: str | None, legacy: str | None, major: int,
                                     plain: int | None, level: str) -> None:
    choice = keras_choice(tf, tf_keras, legacy)
    assert (choice.major, choice.plain_python_major) == (major, plain), choice.why
    exposure = xla_exposure(tf, tf_keras, legacy)
    assert exposure.level == level
    words = {EVERY_FIT: "every fit", OPTIMIZER_STEP: "default optimizers' update step",
             JIT_COMPILE_ONLY: "only if a model compiles with jit_compile=True"}[level]
    assert words in exposure.bites
    assert ("plain python gets Keras 3" in exposure.detail) is (plain == 3)


@pytest.mark.parametrize("legacy", [None, "1", "true", "True", "0", "false", "TRUE"])
@pytest.mark.parametrize("tf_keras_installed", [True, False])
def test_the_doctor_predicts_the_keras_that_tfdist_launch_and_tf_config_give(
        legacy: str | None, tf_keras_installed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's rule lives in tfdist launch and tf-config --exec; the doctor must reach the same answer."""
    monkeypatch.setattr(command_check, "tf_keras_available", lambda: tf_keras_installed)
    environ = {} if legacy is None else {"TF_USE_LEGACY_KERAS": legacy}
    launched = dict(environ)
    if command_check.keras_plan(LaunchSpec(command=("train.py",)), environ):
        launched["TF_USE_LEGACY_KERAS"] = "1"
    tf_config = {"TF_CONFIG": '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 0}}'}
    via_tf_config = task_environment({**environ, **tf_config}, "env", legacy_keras_available=tf_keras_installed)
    assert via_tf_config.get("TF_USE_LEGACY_KERAS") == launched.get("TF_USE_LEGACY_KERAS")
    tf_keras_selected = tf_keras_installed and launched.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True")
    predicted = keras_choice("2.21.0", "2.21.0" if tf_keras_installed else None, legacy)
    assert predicted.major == (2 if tf_keras_selected else 3)


def _facts(tf: str, *, tf_keras: str | None = None, legacy: str | None = None) -> Facts:
    dists = (Distribution("tensorflow", tf, "/site"),)
    dists += (Distribution("tf-keras", tf_keras, "/site"),) if tf_keras else ()
    return Facts(
        system=SystemFacts(platform="linux", machine="x86_64", python_version="3.11.9", tf_use_legacy_keras=legacy),
        driver=DriverFacts(state="ok", driver_version="550.90.07", cuda_driver_version="12.4",
                           gpus=(Gpu(0, "NVIDIA GeForce RTX 4090", "8.9", "nvml"),)),
        libraries=LibraryFacts(),
        tensorflow=TensorFlowFacts(dists=dists, package_dir="/site/tensorflow", tf_keras=tf_keras,
                                   build_info={"is_cuda_build": True, "cuda_version": "12.5.1"}),
        xla=XlaFacts(probed=True, roots=(CudaRoot("./cuda_sdk_lib", "default"),
                                          CudaRoot("/usr/local/cuda", "/usr/local/cuda"), CudaRoot(".", "cwd"))),
    )


@pytest.mark.parametrize(
    "tf, tf_keras, legacy, severity, bites, workaround",
    [
        ("2.21.0", None, None, "error", "Keras 3 compiles with XLA by default: every fit", "jit_compile=False"),
        ("2.21.0", "2.21.0", None, "warning", "default optimizers' update step", "optimizers.legacy.Adam"),
        ("2.21.0", "2.21.0", "0", "error", "every fit", "jit_compile=False"),
        ("2.13.1", None, None, "warning", "default optimizers' update step", "optimizers.legacy.Adam"),
        ("2.10.1", None, None, "warning", "only if a model compiles with jit_compile=True", "optimizers.legacy.Adam"),
    ],
)
def test_missing_libdevice_severity_and_words_follow_the_keras(tf: str, tf_keras: str | None, legacy: str | None,
                                                               severity: str, bites: str, workaround: str) -> None:
    finding = next(f for f in check_xla(build_context(_facts(tf, tf_keras=tf_keras, legacy=legacy)))
                   if f.id == "xla-libdevice-missing")
    assert finding.severity == severity
    assert finding.title.endswith(bites) or bites in finding.title, finding.title
    assert any(line.startswith(f"Keras {3 if severity == 'error' else 2}: ") for line in finding.evidence)
    assert any(workaround in a for a in finding.alternatives), finding.alternatives
