"""Is tf-keras (Keras 2) installed? Keras 3 cannot run multi-worker ``fit``, so the launcher, ``tf-config --exec``
and the runtime all select tf-keras when it is there; this is the one place that looks."""
from __future__ import annotations

import importlib.util

TF_KERAS = "tf_keras"  # tf-keras' import name
KERAS = "keras"  # Keras 3's (or an old standalone Keras 2's)


def tf_keras_available() -> bool:
    """Whether ``import tf_keras`` would find the package (it is not imported)."""
    return importlib.util.find_spec(TF_KERAS) is not None
