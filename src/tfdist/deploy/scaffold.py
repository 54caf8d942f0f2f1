"""Files tfdist writes into a user's folder: a new project (``tfdist init``) and copies of the shipped examples.

Nothing here replaces an existing file unless asked to: ``init`` keeps every file that is already there and says so,
and :func:`write_new` refuses an existing target without ``force``. Writes are atomic (a temporary file renamed
into place), so an interrupted run leaves either the old file or the new one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from tfdist.errors import UsageError
from tfdist.mirror.fileio import atomic_write

# Template in deploy/templates/init -> file written in the project folder.
PROJECT_FILES: dict[str, str] = {
    "train.py.tmpl": "train.py",
    "tfdist.toml.tmpl": "tfdist.toml",
    "gitignore.tmpl": ".gitignore",
    "README.md.tmpl": "README.md",
}
_PROJECT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Written:
    """One project file and what happened to it: ``written`` or ``kept`` (it existed)."""

    path: Path
    status: str


def write_new(path: Path, text: str, *, force: bool = False, flag: str = "--output") -> None:
    """Write ``text`` to a file that must not exist yet (or may be replaced with ``force``).

    Raises:
        UsageError: the file exists (without ``force``), is a folder, or its folder is missing.
    """
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder", hint="give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: the folder {path.parent} does not exist", hint="create it first")
    if path.exists() and not force:
        raise UsageError(f"{flag} {path} exists; it was left untouched", hint="pass --force to replace it")
    atomic_write(path, text.encode("utf-8"))


def project_name(folder: Path, name: str | None) -> str:
    """The project's name: ``name`` or the folder's, checked (it lands in Python, TOML and Markdown text).

    Raises:
        UsageError: not a letter followed by letters, digits, '_' or '-' (at most 64).
    """
    chosen = name if name is not None else folder.resolve().name
    if not _PROJECT_NAME.fullmatch(chosen):
        raise UsageError(f"project name {chosen!r} is not a letter followed by letters, digits, '_' or '-'",
                         hint="pass --name NAME")
    return chosen


def render_project(name: str) -> dict[str, str]:
    """File name -> text of every project file for a project called ``name``."""
    folder = resources.files("tfdist.deploy").joinpath("templates/init")
    return {target: Template(folder.joinpath(template).read_text("utf-8")).substitute(name=name)
            for template, target in PROJECT_FILES.items()}


def init_project(folder: Path, name: str) -> list[Written]:
    """Write the project files into ``folder`` (created if missing); files that exist are kept as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for target, text in render_project(name).items():
        path = folder / target
        if path.exists() or path.is_symlink():
            results.append(Written(path, "kept"))
            continue
        atomic_write(path, text.encode("utf-8"))
        results.append(Written(path, "written"))
    return results
