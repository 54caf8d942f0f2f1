"""Optional dependencies: which ``pip install 'tfdist[EXTRA]'`` extra brings each, in one table, and the one way
to import one.

A missing optional dependency is a setup problem that one command fixes, so it is reported as a usage error (exit
status 2, before anything starts) whose one line names what needed it and the extra to install -- never as a
``ModuleNotFoundError`` traceback from deep inside the code that first imports it. pyproject.toml's
``[project.optional-dependencies]`` lists the distributions; this table lists the import names tfdist uses from
them (tests/unit/test_extras.py keeps the two in step).

A leaf module (it imports only :mod:`tfdist.errors`), so the CLI, the launcher and the runtime inside a training
script can all use it.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from tfdist.errors import UsageError


@dataclass(frozen=True)
class Extra:
    """One install extra as tfdist's code sees it.

    Args:
        name: the extra's name in pyproject.toml (``pip install 'tfdist[<name>]'``).
        modules: the top-level import names tfdist uses from it.
        used_for: what needs it, for the docs' install section.
        needed_by_modules: tfdist's own modules (and the modules under them) that need it to run at all, so that
            ``tfdist launch -m`` one of them says so before starting tasks that would each fail.
    """

    name: str
    modules: tuple[str, ...]
    used_for: str
    needed_by_modules: tuple[str, ...] = ()

    @property
    def install(self) -> str:
        """The command that installs it, as a user types it (quoted: brackets are a shell glob)."""
        return f"pip install 'tfdist[{self.name}]'"


EXTRAS: dict[str, Extra] = {extra.name: extra for extra in (
    Extra("etcd", ("pyetcd",), "--rdzv-backend etcd: the etcd v3 client (etcd-sdk-python, imported as pyetcd)"),
    Extra("examples", ("sklearn",), "the digits example's data set, which ships with scikit-learn",
          needed_by_modules=("tfdist.examples",)),
    # TensorFlow 2.21 no longer depends on TensorBoard; without it tf.summary cannot write a single scalar.
    Extra("tensorboard", ("tensorboard",), "TensorBoard summaries of tfdist.runtime.callbacks and tfdist tensorboard"),
)}


class MissingExtra(UsageError):
    """An optional dependency is not installed (or does not import): the line names the extra to install."""

    def __init__(self, extra: Extra, needed_by: str, problem: str | None = None) -> None:
        message = f"{needed_by} needs the {extra.name} extra"
        if problem:
            message += f" ({problem})"
        super().__init__(f"{message}: {extra.install}", reference=f"missing-extra-{extra.name}")
        self.extra = extra


def require(name: str, needed_by: str, module: str | None = None) -> ModuleType:
    """Import ``module`` (default: the extra's first module) of extra ``name`` and return it.

    Args:
        name: the extra (a key of :data:`EXTRAS`).
        needed_by: what needs it, as the user asked for it: ``--rdzv-backend etcd``, ``tfdist tensorboard``.
        module: a dotted module of the extra to import instead (``sklearn.datasets``).

    Raises:
        MissingExtra: it is not installed, or it is installed but fails to import (a dependency of it missing or
            of the wrong version: reinstalling the extra is the fix either way).
    """
    extra = EXTRAS[name]
    target = module or extra.modules[0]
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as missing:
        if missing.name is not None and target.partition(".")[0] == missing.name.partition(".")[0]:
            raise MissingExtra(extra, needed_by) from None
        raise MissingExtra(extra, needed_by, f"{target} does not import: {_first_line(missing)}") from None
    except Exception as broken:  # noqa: BLE001 - any failure to import makes the extra unusable; say which
        raise MissingExtra(extra, needed_by, f"{target} does not import: {_first_line(broken)}") from None


def require_for_module(module: str, needed_by: str) -> None:
    """Check that the extras tfdist's own ``module`` needs (:attr:`Extra.needed_by_modules`) are installed, without
    importing them (a launcher need not pay for its tasks' imports; a broken install is the task's to report).

    Raises:
        MissingExtra: one is not installed.
    """
    for extra in EXTRAS.values():
        if any(module == owner or module.startswith(f"{owner}.") for owner in extra.needed_by_modules):
            for name in extra.modules:
                if not _findable(name):
                    raise MissingExtra(extra, needed_by)


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:200]}" if text else type(error).__name__
