"""Checks made before any task starts."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import tempfile
from typing import Mapping, Sequence

from tfdist.compat.keras import tf_keras_available
from tfdist.constants import LEGACY_KERAS
from tfdist.errors import UsageError
from tfdist.extras import require_for_module
from tfdist.protocol import Command
from tfdist.launch.spec import LaunchSpec


_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")  # python, python3, python3.11


def is_python_word(word: str) -> bool:
    """Whether a command's first word names a Python interpreter (``python3``, ``/usr/bin/python3.11``)."""
    return bool(_PYTHON_NAME.fullmatch(os.path.basename(word)))


def resolve_command(target: Sequence[str], *, module: bool, no_python: bool,
                    python: str = sys.executable) -> Command:
    """``script.py a b`` -> ``python -u script.py a b``; ``-m pkg.mod`` -> ``python -u -m pkg.mod``; with
    ``no_python`` the program itself. ``python3 script.py a`` (as mpirun and horovodrun users type it) runs the script
    with that interpreter, as given.

    Raises:
        UsageError: nothing to run, the script does not exist, the interpreter is given options tfdist would not
            pass on, or a module of tfdist's own (an example) lacks the extra it needs.
    """
    if not target:
        raise UsageError("no training script given", hint="usage: tfdist launch [OPTIONS] [--] SCRIPT [ARGS...]")
    head, *rest = target
    if no_python:
        if not shutil.which(head) and not os.path.exists(head):
            raise UsageError(f"program {head!r} not found", hint="give a path or a command on PATH")
        return Command(target=head, args=tuple(rest))
    if not module and is_python_word(head):
        return _interpreter_given(head, rest)
    if module:
        if python == sys.executable:  # the tasks run in this environment: a missing extra fails each of them
            require_for_module(head, f"-m {head}")
        return Command(target=head, args=tuple(rest), interpreter=python, module=True)
    if not os.path.isfile(head):
        raise UsageError(f"training script {head!r} does not exist", hint="check the path, or use -m MODULE")
    return Command(target=head, args=tuple(rest), interpreter=python)


def _interpreter_given(interpreter: str, words: list[str]) -> Command:
    if not shutil.which(interpreter):
        raise UsageError(f"{interpreter!r} not found", hint="give a Python on PATH, or drop it: tfdist launch runs "
                                                           "the script with its own Python")
    while words[:1] == ["-u"]:  # tfdist passes -u itself
        words = words[1:]
    if words[:1] == ["-m"] and len(words) > 1:
        return Command(target=words[1], args=tuple(words[2:]), interpreter=interpreter, module=True)
    if not words or words[0].startswith("-"):
        given = " ".join([interpreter, *words[:1]])
        raise UsageError(f"{given}: tfdist launch runs the script with {interpreter} but passes no interpreter "
                         "options", hint=f"drop {interpreter!r} and its options: tfdist launch [OPTIONS] -- SCRIPT "
                                         "[ARGS...] (or -m MODULE)")
    return resolve_command(words, module=False, no_python=False, python=interpreter)


def other_python(program: str, python: str = sys.executable) -> str | None:
    """With ``--no-python``: the interpreter ``program`` (a bare ``python3``) runs from PATH when that is not the one
    tfdist runs under (the tasks may then lack TensorFlow, tf-keras or tfdist); else None."""
    if not is_python_word(program):
        return None
    found = shutil.which(program)
    if found is None or os.path.realpath(found) == os.path.realpath(python):
        return None
    return found


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
