"""What every recipe is made of: the :class:`Recipe` protocol, the :class:`Context` it reads a tool's files in, and
the records it answers with. The recipes (pip.py, uv.py, conda.py) import these; the package's ``__init__`` gathers
the recipes into :data:`tfdist.mirror.recipes.RECIPES`, so nothing here imports a recipe."""
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
