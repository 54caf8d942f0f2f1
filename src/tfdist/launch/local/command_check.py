"""Checks made before any task starts."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tempfile
from typing import Mapping, Sequence

from tfdist.compat.keras import tf_keras_available
from tfdist.constants import LEGACY_KERAS
from tfdist.errors import UsageError
from tfdist.protocol import Command
from tfdist.launch.spec import LaunchSpec


def resolve_command(target: Sequence[str], *, module: bool, no_python: bool,
                    python: str = sys.executable) -> Command:
    """``script.py a b`` -> ``python -u script.py a b``; ``-m pkg.mod`` -> ``python -u -m pkg.mod``; with
    ``no_python`` the program itself.

    Raises:
        UsageError: nothing to run, or the script does not exist.
    """
    if not target:
        raise UsageError("no training script given", hint="usage: tfdist launch [OPTIONS] [--] SCRIPT [ARGS...]")
    head, *rest = target
    if no_python:
        if not shutil.which(head) and not os.path.exists(head):
            raise UsageError(f"program {head!r} not found", hint="give a path or a command on PATH")
        return Command(target=head, args=tuple(rest))
    if module:
        return Command(target=head, args=tuple(rest), interpreter=python, module=True)
    if not os.path.isfile(head):
        raise UsageError(f"training script {head!r} does not exist", hint="check the path, or use -m MODULE")
    return Command(target=head, args=tuple(rest), interpreter=python)


def check_log_dir(path: str) -> None:
    """``--log-dir`` must be a folder we can create and write in.

    Raises:
        UsageError: it is a file, or cannot be created or written (read-only file system, permissions).
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--log-dir {path} is a file", hint="give a folder (it is created if missing)")
    try:
        os.makedirs(path, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".tfdist-write-test-")  # noqa: SIM115
        probe.close()
    except OSError as error:
        raise UsageError(f"--log-dir {path}: cannot write there ({error.strerror or error})",
                         hint="give a writable folder") from None


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def keras_plan(spec: LaunchSpec, environ: Mapping[str, str]) -> bool:
    """Whether tasks get ``TF_USE_LEGACY_KERAS=1``.

    Keras 3 cannot run multi-worker or parameter-server ``fit`` (keras-team/keras#20585); tf-keras can. Set the
    variable when tf-keras is installed and nobody chose; refuse a multi-worker launch that would hit Keras 3.

    Raises:
        UsageError: multi-worker job, Keras 3 installed, no tf-keras, and ``--allow-keras3`` not given.
    """
    user_choice = environ.get(LEGACY_KERAS) or dict(spec.env).get(LEGACY_KERAS)
    has_tf_keras = tf_keras_available()
    distributed = spec.workers + int(spec.chief) > 1 or spec.ps > 0
    if user_choice is None:
        if has_tf_keras:
            return True
        keras = _installed_version("keras")
        if distributed and keras and keras.startswith("3") and not spec.allow_keras3:
            raise UsageError(
                f"this multi-worker launch would run Keras {keras}, which cannot train with "
                "MultiWorkerMirroredStrategy or ParameterServerStrategy (keras-team/keras#20585)",
                hint="pip install 'tf-keras==<TF minor>.*' (or tfdist[cpu]); --allow-keras3 if the script has its "
                     "own training loop")
    return False
