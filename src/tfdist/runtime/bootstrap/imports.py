"""Run a function right after a given top-level package has been imported (a post-import hook), so that the
bootstrap can patch Keras whether the script imports it before or after anything else, without importing it itself.

Costs one set lookup per import statement that is not already in ``sys.modules``; nothing once the script runs.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Iterable


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, names: Iterable[str], then: Callable[[ModuleType], None]) -> None:
        self.names = frozenset(names)
        self.then = then
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname  # the real finders below us answer; we only wrap their loader
        try:
            spec = importlib.util.find_spec(fullname)
        except (ImportError, ValueError):
            return None
        finally:
            self._busy.name = None
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return None
        then = self.then

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            try:
                then(module)
            except Exception as error:  # noqa: BLE001 - the import itself succeeded; never fail it
                sys.stderr.write(f"tfdist: cannot watch {module.__name__} ({type(error).__name__}: {error})\n")

        loader.exec_module = exec_then_patch  # type: ignore[union-attr] - this loader serves this module only
        return spec


def after_import(names: Iterable[str], then: Callable[[ModuleType], None]) -> importlib.abc.MetaPathFinder:
    """Call ``then(module)`` once each package of ``names`` has finished importing (not for those already imported:
    the caller handles those)."""
    finder = _AfterImport(names, then)
    sys.meta_path.insert(0, finder)
    return finder
