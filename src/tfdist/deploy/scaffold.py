"""Files tfdist writes into a user's folder: a new project (``tfdist init``) and copies of the shipped examples.

Nothing here replaces an existing file: ``init`` keeps every file that is already there and says so. Writing goes
through :func:`tfdist.output.write_output` (atomic, the folder checked), like every other generated file; ``tfdist
example -o`` calls it directly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from tfdist.errors import UsageError
from tfdist.output import write_output
from tfdist.validate import shown

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


def project_name(folder: Path, name: str | None) -> str:
    """The project's name: ``name`` or the folder's, checked (it lands in Python, TOML and Markdown text).

    Raises:
        UsageError: not a letter followed by letters, digits, '_' or '-' (at most 64).
    """
    chosen = name if name is not None else folder.resolve().name
    if not _PROJECT_NAME.fullmatch(chosen):
        given = f"--name {shown(chosen)}" if name is not None else f"the project name {shown(chosen)} (FOLDER's name)"
        raise UsageError(f"{given} is not a letter followed by at most 63 letters, digits, '_' or '-'",
                         hint="pass --name NAME", reference="invalid-value")
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
        write_output(path, text, force=False, flag="FOLDER")
        results.append(Written(path, "written"))
    return results
