"""Which Keras a training run on this machine will use, and so how much of it goes through XLA (issue 35 item 5).

A missing libdevice or a bad ptxas only breaks code that XLA compiles, and how much that is depends on the Keras:

- Keras 3 (TensorFlow >= 2.16 unless tf-keras is selected) compiles the whole train step with XLA by default
  (``model.compile(jit_compile="auto")``): every ``fit`` on a GPU.
- Keras 2 from TensorFlow 2.11 on (and tf-keras) compiles the model's step with XLA only with ``jit_compile=True``,
  but its default optimizers (``tf.keras.optimizers.Adam`` and the others, not ``.legacy``) compile their update
  step with XLA when a GPU is listed (``jit_compile=True`` is their default, tf_keras ``optimizers/optimizer.py``):
  ``fit`` with Adam then needs libdevice (keras-team/keras#17422, tensorflow/tensorflow#60254).
- Keras 2 before TensorFlow 2.11: only code that asks for ``jit_compile=True``.

The Keras is the one ``tfdist launch`` gives its tasks: it sets ``TF_USE_LEGACY_KERAS=1`` when tf-keras is installed
and the variable is unset (:func:`tfdist.launch.local.command_check.keras_plan`, ``tfdist tf-config --exec``); a
script started with plain ``python`` gets what the environment says. Pure: versions and the variable in, answer out.
"""

from __future__ import annotations

from tfdist.compat import tables as compat
from tfdist.compat.versions import at_least
from tfdist.constants import LEGACY_KERAS
from tfdist.frozen import frozen

# The values TensorFlow's __init__ accepts for TF_USE_LEGACY_KERAS (the runtime's legacy_keras_requested agrees).
LEGACY_TRUE = ("1", "true", "True")

EVERY_FIT, OPTIMIZER_STEP, JIT_COMPILE_ONLY = "every-fit", "optimizer-step", "jit-compile-only"


def legacy_selected(value: str | None) -> bool:
    """``TF_USE_LEGACY_KERAS`` set to a value TensorFlow takes as true."""
    return value in LEGACY_TRUE


@frozen
class KerasChoice:
    """The Keras a run uses.

    Attributes:
        major: 2 or 3 (under ``tfdist launch``).
        why: one line naming what decided it.
        plain_python_major: what a script started with plain ``python`` gets, when that differs from ``major``.
    """

    major: int
    why: str
    plain_python_major: int | None = None


def keras_choice(tf_version: str | None, tf_keras: str | None, legacy_env: str | None) -> KerasChoice:
    """The Keras ``tfdist launch`` tasks will run under.

    Args:
        tf_version: the installed TensorFlow.
        tf_keras: the installed tf-keras version, ``None`` when absent.
        legacy_env: ``TF_USE_LEGACY_KERAS`` as set here (``None``: unset).
    """
    since = compat.load_data("tf_distributions")["keras"]["keras3_default_from_tf"]
    if not at_least(tf_version, since):
        return KerasChoice(2, f"TensorFlow {tf_version} comes with Keras 2 (Keras 3 from {since})")
    if legacy_env is not None:
        if legacy_selected(legacy_env) and tf_keras:
            return KerasChoice(2, f"{LEGACY_KERAS}={legacy_env} selects tf-keras {tf_keras}")
        return KerasChoice(3, f"{LEGACY_KERAS}={legacy_env!r} with tf-keras {tf_keras or 'not installed'}: Keras 3")
    if tf_keras:
        return KerasChoice(2, f"tfdist launch sets {LEGACY_KERAS}=1 because tf-keras {tf_keras} is installed",
                           plain_python_major=3)
    return KerasChoice(3, f"TensorFlow {tf_version} without tf-keras: Keras 3")


@frozen
class XlaExposure:
    """How much of training XLA compiles, and the words that say when an XLA problem bites.

    Attributes:
        level: EVERY_FIT, OPTIMIZER_STEP or JIT_COMPILE_ONLY.
        bites: a few words for a finding's title.
        detail: the sentence for its detail, ending where the log messages follow.
        keras: the Keras choice it rests on.
    """

    level: str
    bites: str
    detail: str
    keras: KerasChoice


def xla_exposure(tf_version: str | None, tf_keras: str | None, legacy_env: str | None) -> XlaExposure:
    """What XLA compiles in a ``fit`` on a GPU with this TensorFlow and Keras."""
    choice = keras_choice(tf_version, tf_keras, legacy_env)
    plain = (" A script started with plain python gets Keras 3 here, which compiles every fit with XLA."
             if choice.plain_python_major == 3 else "")
    if choice.major == 3:
        return XlaExposure(
            EVERY_FIT, 'Keras 3 compiles with XLA by default: every fit',
            'Keras 3 compiles the whole train step with XLA by default (jit_compile="auto") when a GPU is listed, '
            "so every model.fit fails: ", choice)
    since = compat.load_data("xla_toolchain")["keras_xla_default"]["optimizer_step_since"]
    if at_least(tf_version, since):
        return XlaExposure(
            OPTIMIZER_STEP, "Keras 2: only XLA-compiled code, such as the default optimizers' update step (Adam)",
            "Keras 2 compiles a model with XLA only with jit_compile=True, but its default optimizers (Adam and the "
            "others outside tf.keras.optimizers.legacy) compile their update step with XLA when a GPU is listed, so "
            f"fit with Adam fails; the legacy optimizers do not use XLA.{plain} The failure: ", choice)
    return XlaExposure(
        JIT_COMPILE_ONLY, "only if a model compiles with jit_compile=True",
        f"Keras 2 before TensorFlow {since} compiles nothing with XLA unless asked, so only functions and models with "
        f"jit_compile=True fail.{plain} The failure: ", choice)
