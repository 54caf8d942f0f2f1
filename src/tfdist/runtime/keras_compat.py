"""Keras 3 cannot run multi-worker ``fit``; tf-keras (Keras 2) can.

Measured with TF 2.21 + Keras 3.15: ``model.fit`` under MultiWorkerMirroredStrategy fails with ``Attempt to convert a
value (PerReplica:...) with an unsupported type`` (keras-team/keras#20585; ParameterServerStrategy likewise,
keras-team/keras#18624). Setting ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported makes ``tf.keras`` resolve to
tf-keras, and the same script trains.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping

from tfdist.compat.keras import tf_keras_available
from tfdist.constants import LEGACY_KERAS
from tfdist.errors import TfdistError

_TRUE = ("1", "true", "True")  # the values TensorFlow's __init__ accepts


def legacy_keras_requested(environ: Mapping[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get(LEGACY_KERAS, "") in _TRUE


class Keras3MultiWorkerError(TfdistError):
    """A multi-worker strategy would run under Keras 3, which cannot train with it."""


KERAS3_FIX = "pip install 'tf-keras==<your TF minor>.*' and set TF_USE_LEGACY_KERAS=1 before importing TensorFlow"


def prefer_legacy_keras() -> None:
    """Before TensorFlow is imported: select tf-keras when it is installed and the user has not chosen, so single- and
    multi-worker runs of one script use the same Keras (and can read each other's checkpoints). After TensorFlow is
    imported nothing can change; :func:`check_keras_for_strategy` then only checks."""
    if LEGACY_KERAS in os.environ:
        return
    if "tensorflow" not in sys.modules and tf_keras_available():
        os.environ[LEGACY_KERAS] = "1"


def check_keras_for_strategy(distributed: bool) -> None:
    """Raise a clear error when ``tf.keras`` is Keras 3 under a multi-worker or parameter-server strategy."""
    if not distributed:
        return
    import tensorflow as tf  # noqa: PLC0415 - imported only inside training scripts

    version = str(getattr(tf.keras, "__version__", ""))
    if str(version).startswith("3"):
        raise Keras3MultiWorkerError(
            f"tf.keras is Keras {version}, which cannot run multi-worker training (keras-team/keras#20585)",
            hint=KERAS3_FIX, reference="keras3-multi-worker")
