"""``mirror status``: which index each real command of pip, uv and conda will use now, and the file:line or
variable that decides it (each tool's rules live in its recipe, :mod:`tfdist.mirror.recipes`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from tfdist.mirror.catalog import identify, load_catalog
from tfdist.mirror.paths import TOOLS, ConfigPaths
from tfdist.mirror.recipes import RECIPES, Context, Effective


@dataclass(frozen=True)
class ToolStatus:
    """The effective setting of every real command of one tool."""

    tool: str
    commands: tuple[Effective, ...]
    problems: tuple[str, ...] = ()

    @property
    def mirror(self) -> str | None:
        """The catalog mirror every command uses, ``"mixed"`` when they differ, ``None`` when unknown."""
        names = {c.command: mirror_of(c) for c in self.commands}
        distinct = set(names.values())
        if len(distinct) == 1:
            return distinct.pop()
        others = distinct - {"official"}
        if len(others) == 1 and None not in others:
            # A mirror that does not carry a channel leaves it on the official one (USTC has no conda `defaults`).
            (name,) = others
            carried = RECIPES[self.tool].wanted(load_catalog()[name])
            if all(n == name or command not in carried for command, n in names.items()):
                return name
        return "mixed"

    @property
    def index(self) -> str | None:
        """The first command's index (pip install, uv pip, conda defaults)."""
        return self.commands[0].index if self.commands else None

    @property
    def source(self) -> str:
        """Where the first command's index comes from."""
        return self.commands[0].source if self.commands else ""


def mirror_of(item: Effective) -> str | None:
    """The catalog name of the index one command uses (``official`` for a tool's built-in default)."""
    if item.tool != "conda":
        return identify(item.index)
    if item.index is None:
        return "official"
    url = item.index.rstrip("/")
    for mirror in load_catalog().values():
        if url in {u.rstrip("/") for u in mirror.conda_default_channels}:
            return mirror.name
        if any(url == f"{base.rstrip('/')}/{item.command}" for base in mirror.conda_custom_channels.values()):
            return mirror.name
    return None


def tool_status(tool: str, paths: ConfigPaths, environ: Mapping[str, str] | None = None,
                cwd: Path | None = None) -> ToolStatus:
    """The effective settings of ``tool``."""
    context = Context(paths, os.environ if environ is None else environ, cwd or Path.cwd())
    commands = RECIPES[tool].effective(context)
    return ToolStatus(tool, tuple(commands), tuple(dict.fromkeys(context.problems)))


def pip_status(paths: ConfigPaths, environ: Mapping[str, str], cwd: Path | None = None) -> ToolStatus:
    """pip's effective index for install, download, wheel and index."""
    return tool_status("pip", paths, environ, cwd)


def uv_status(paths: ConfigPaths, environ: Mapping[str, str], cwd: Path | None = None) -> ToolStatus:
    """uv's effective default index for ``uv pip`` and project commands."""
    return tool_status("uv", paths, environ, cwd)


def conda_status(paths: ConfigPaths, environ: Mapping[str, str] | None = None) -> ToolStatus:
    """Where conda's ``defaults`` and ``conda-forge`` channels come from."""
    return tool_status("conda", paths, environ or {})


def all_status(paths: ConfigPaths, environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[ToolStatus]:
    """Status of pip, uv and conda."""
    return [tool_status(tool, paths, environ, cwd) for tool in TOOLS]
