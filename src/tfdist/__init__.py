"""tfdist: from a bare Linux machine to fault-tolerant distributed TensorFlow training.

The package root stays import-light: nothing here imports TensorFlow. Training scripts use
``tfdist.runtime``; the command line lives in ``tfdist.cli``.
"""
from __future__ import annotations

__version__ = "0.1.0"
