"""Per-tool recipes (as chsrc has one per target): everything tfdist knows about one package tool, in one object.

A recipe answers, for its tool: which file each scope means (:meth:`Recipe.target`), whether a mirror applies
(:meth:`Recipe.skip_reason`), how to edit that file (:meth:`Recipe.edit`), which index each real command of the
tool will use and where that comes from (:meth:`Recipe.effective`), what the tool itself says
(:meth:`Recipe.ask_tool`), what to run afterwards (:meth:`Recipe.followups`) and which environment variables select
a mirror (:meth:`Recipe.environment`). Adding a tool is adding one module here and one line to :data:`RECIPES`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Protocol

from tfdist.errors import ConfigFileError
from tfdist.mirror.fileio import read_text_file

if TYPE_CHECKING:
    from tfdist.mirror.catalog import Mirror
    from tfdist.mirror.paths import ConfigPaths, Scope

BUILT_IN = "built-in default"


@dataclass(frozen=True)
class Effective:
    """The index one real command of a tool will use, and the file:line or variable it comes from."""

    tool: str
    command: str
    index: str | None
    source: str


@dataclass(frozen=True)
class Edit:
    """A recipe's new file text and what a user should know."""

    text: str
    notes: tuple[str, ...] = ()
    keep_bom: bool = True


@dataclass(frozen=True)
class ToolView:
    """What the tool itself reported (``effective``), or why it could not be asked (``unavailable``)."""

    effective: tuple[Effective, ...] = ()
    unavailable: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)


class Recipe(Protocol):
    """The knowledge of one tool."""

    name: str

    def target(self, paths: "ConfigPaths", scope: "Scope") -> Path: ...

    def skip_reason(self, mirror: "Mirror", scope: "Scope", paths: "ConfigPaths") -> str | None: ...

    def edit(self, text: str, bom: bool, mirror: "Mirror", path: Path, context: "Context") -> Edit: ...

    def effective(self, context: "Context") -> list[Effective]: ...

    def wanted(self, mirror: "Mirror") -> dict[str, str | None]: ...

    def ask_tool(self, context: "Context") -> ToolView: ...

    def followups(self) -> list[str]: ...

    def environment(self, mirror: "Mirror") -> dict[str, str]: ...


@dataclass
class Context:
    """Where a tool runs: the paths, the environment, the working directory, and planned file contents that
    replace what is on disk (``overlay``) so a plan can be checked before anything is written."""

    paths: "ConfigPaths"
    environ: Mapping[str, str]
    cwd: Path
    overlay: dict[Path, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def text(self, path: Path) -> str | None:
        """The file's text (the planned one if in the overlay), ``None`` if missing or unreadable (noted)."""
        if path in self.overlay:
            return self.overlay[path]
        if not path.exists() and not path.is_symlink():
            return None
        try:
            return read_text_file(path).text
        except ConfigFileError as error:
            self.problems.append(error.message)
            return None


def same_index(a: str | None, b: str | None) -> bool:
    """Whether two index URLs are the same, ignoring a trailing slash, case and the password (uv reports
    ``user:****@host``, so a password cannot be compared)."""
    from tfdist.mirror.urls import mask_url

    if a is None or b is None:
        return a is b
    return str(mask_url(a.strip().rstrip("/"))).lower() == str(mask_url(b.strip().rstrip("/"))).lower()


def index_environment(mirror: "Mirror", index_variable: str, insecure_variable: str) -> dict[str, str]:
    """The variables that point a pip-like tool at ``mirror``'s index (and trust its host only for plain http)."""
    from tfdist.mirror.urls import trusted_host

    env: dict[str, str] = {}
    if mirror.pip_index:
        env[index_variable] = mirror.pip_index
        host = trusted_host(mirror.pip_index)
        if host:
            env[insecure_variable] = host
    return env


def _registry() -> dict[str, Recipe]:
    from tfdist.mirror.recipes.conda import CondaRecipe
    from tfdist.mirror.recipes.pip import PipRecipe
    from tfdist.mirror.recipes.uv import UvRecipe

    return {"pip": PipRecipe(), "uv": UvRecipe(), "conda": CondaRecipe()}


RECIPES: dict[str, Recipe] = _registry()
