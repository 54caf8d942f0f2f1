"""``mirror use``: plan each tool's config edit, show it as a diff, and apply it safely.

Every file is read and edited in memory first; if any of them cannot be handled, nothing at all is written.
"""
from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from tfdist.errors import ConfigFileError, UsageError
from tfdist.mirror.backup import BackupStore
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.fileio import TextFile, atomic_write, check_writable, read_current, read_text_file
from tfdist.mirror.paths import ConfigPaths, Scope, Tool
from tfdist.mirror.recipes import RECIPES, Context, same_index
from tfdist.mirror.urls import has_credentials


@dataclass(frozen=True)
class SwitchRequest:
    """What ``mirror use`` was asked to do.

    Attributes:
        mirror: the mirror to switch to.
        tools: the tools to switch; ``None`` means pip and uv, plus conda when conda is in use here.
        scope: which of each tool's files to edit.
        dry_run: only compute the changes.
    """

    mirror: Mirror
    tools: tuple[Tool, ...] | None = None
    scope: Scope = "user"
    dry_run: bool = False


@dataclass(frozen=True)
class Change:
    """One planned file edit."""

    tool: Tool
    scope: Scope
    file: TextFile
    after: bytes
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the new bytes differ from the file on disk."""
        return self.after != self.file.raw

    def diff(self) -> str:
        """A unified diff from the current file to the new one."""
        before = "" if self.file.raw is None else self.file.text
        after = self.after.decode("utf-8").lstrip("\ufeff").replace("\r\n", "\n")
        label = str(self.file.path)
        lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                     fromfile=label if self.file.exists else "/dev/null", tofile=label)
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        return text


@dataclass(frozen=True)
class Skipped:
    """A tool that was not switched, and why."""

    tool: Tool
    reason: str


@dataclass(frozen=True)
class Override:
    """A real command that will still not use the mirror after the switch, and what makes it so."""

    tool: str
    command: str
    index: str | None
    source: str

    def describe(self) -> str:
        """One line for a user: the command, the index it will use, and the file:line or variable that sets it."""
        index = self.index or "its built-in default"
        return f"'{self.command}' will still use {index}, set by {self.source}" if self.tool != "conda" else \
            f"conda channel '{self.command}' will still come from {index}, set by {self.source}"


@dataclass(frozen=True)
class SwitchResult:
    """What ``mirror use`` planned and did.

    ``overridden`` lists the real commands that the written files do not reach (an environment variable, a
    project file or a higher-priority file of another scope wins); ``mismatches`` where a tool itself reported
    something other than tfdist's model after the write; ``unverified`` why a tool could not be asked.
    """

    mirror: Mirror
    changes: tuple[Change, ...]
    skipped: tuple[Skipped, ...] = ()
    applied: bool = False
    followups: tuple[str, ...] = field(default_factory=tuple)
    overridden: tuple[Override, ...] = ()
    mismatches: tuple[Override, ...] = ()
    unverified: tuple[str, ...] = ()

    @property
    def took_effect(self) -> bool:
        """Whether every switched command now uses the mirror (the tools' own word where they were asked)."""
        return not self.overridden


def conda_in_use(paths: ConfigPaths) -> bool:
    """Whether conda is present here: on PATH, an active environment, or an existing .condarc."""
    if shutil.which("conda") or paths.conda_prefix is not None or paths.conda_root is not None:
        return True
    return any(path.exists() for path in paths.conda_search_path())


def _context(paths: ConfigPaths, environ: Mapping[str, str] | None, cwd: Path | None,
             overlay: dict[Path, str] | None = None) -> Context:
    return Context(paths, os.environ if environ is None else environ, cwd or Path.cwd(), dict(overlay or {}))


def plan(request: SwitchRequest, paths: ConfigPaths, environ: Mapping[str, str] | None = None,
         cwd: Path | None = None) -> SwitchResult:
    """Compute every edit, and the commands it would not reach, without writing anything.

    Raises:
        UsageError: the mirror cannot serve the one tool explicitly requested, or a scope makes no sense for it.
        ConfigFileError: a file cannot be read, parsed or written; nothing is written.
    """
    mirror = request.mirror
    tools: tuple[Tool, ...] = request.tools or (("pip", "uv", "conda") if conda_in_use(paths) else ("pip", "uv"))
    alone = request.tools is not None and len(request.tools) == 1
    context = _context(paths, environ, cwd)
    changes: list[Change] = []
    skipped: list[Skipped] = []
    for tool in tools:
        recipe = RECIPES[tool]
        reason = recipe.skip_reason(mirror, request.scope, paths)
        if reason is not None:
            if alone:
                recipe.target(paths, request.scope)  # raises the explanatory error where there is one
                raise UsageError(reason, hint="choose another mirror, tool or --scope (see 'tfdist mirror list')")
            skipped.append(Skipped(tool, reason))
            continue
        changes.append(_plan_one(tool, request.scope, recipe.target(paths, request.scope), mirror, context))
    overlay: dict[Path, str] = {}
    for change in changes:
        text = change.after.decode("utf-8").lstrip("\ufeff").replace("\r\n", "\n")
        overlay[change.file.path] = overlay[change.file.real] = text
    overridden = _unreached(mirror, [c.tool for c in changes], _context(paths, environ, cwd, overlay))
    return SwitchResult(mirror=mirror, changes=tuple(changes), skipped=tuple(skipped), overridden=overridden)


def _unreached(mirror: Mirror, tools: list[str], context: Context) -> tuple[Override, ...]:
    found = []
    for tool in tools:
        recipe = RECIPES[tool]
        wanted = recipe.wanted(mirror)
        for item in recipe.effective(context):
            if item.command in wanted and not same_index(item.index, wanted[item.command]):
                found.append(Override(tool, item.command, item.index, item.source))
    return tuple(found)


def _plan_one(tool: Tool, scope: Scope, path: Path, mirror: Mirror, context: Context) -> Change:
    file = read_text_file(path)
    edit = RECIPES[tool].edit(file.text, file.bom, mirror, path, context)
    after = file.encode(edit.text, keep_bom=edit.keep_bom)
    change = Change(tool=tool, scope=scope, file=file, after=after, notes=edit.notes)
    if change.changed:
        check_writable(file)
    return change


def verify(result: SwitchResult, paths: ConfigPaths, environ: Mapping[str, str] | None = None,
           cwd: Path | None = None) -> SwitchResult:
    """Ask each switched tool itself which index it will use now.

    The tool has the last word: a command it reports on the mirror took effect, one it reports elsewhere did not
    (``overridden``, with the file:line from tfdist's model when the two agree). Where tfdist's model and the tool
    disagree, that is recorded in ``mismatches``; a tool that cannot be asked is named in ``unverified`` and its
    commands keep the model's verdict.
    """
    mismatches: list[Override] = []
    unverified: list[str] = []
    overridden = {(o.tool, o.command): o for o in result.overridden}
    for tool in dict.fromkeys(c.tool for c in result.changes):
        recipe = RECIPES[tool]
        view = recipe.ask_tool(_context(paths, environ, cwd))
        if view.unavailable:
            unverified.append(f"{tool}: {view.unavailable}")
            continue
        wanted = recipe.wanted(result.mirror)
        model = {e.command: e for e in recipe.effective(_context(paths, environ, cwd))}
        for item in view.effective:
            if item.command not in wanted:
                continue
            expected = model.get(item.command)
            if expected is not None and not same_index(item.index, expected.index):
                mismatches.append(Override(tool, item.command, item.index,
                                           f"{item.source}, where tfdist expected {expected.index or 'the default'} "
                                           f"from {expected.source}"))
            if same_index(item.index, wanted[item.command]):
                overridden.pop((tool, item.command), None)
            else:
                source = expected.source if expected is not None and same_index(item.index, expected.index) \
                    else item.source
                overridden[(tool, item.command)] = Override(tool, item.command, item.index,
                                                            f"{source} (confirmed by {tool} itself)")
    return replace(result, overridden=tuple(overridden.values()), mismatches=tuple(mismatches),
                   unverified=tuple(unverified))


def apply(result: SwitchResult, paths: ConfigPaths) -> SwitchResult:
    """Back up and atomically write every changed file, then clear conda's index cache when conda is used.

    Holds tfdist's state lock throughout. Before the first write, every file is read again: if any changed since
    :func:`plan` read it, nothing is written. Owner, group and mode are kept; a file that will hold a credential
    (an index URL with a password) is written 0600.

    Raises:
        ConfigFileError: a file changed since the plan, or a write failed (files already written stay backed up
            and can be restored).
    """
    store = BackupStore(paths)
    followups: list[str] = []
    secret = has_credentials(result.mirror.pip_index)
    with store.locked():
        for change in result.changes:
            if change.changed and read_current(change.file.real) != change.file.raw:
                raise ConfigFileError(
                    f"{change.file.path}: changed on disk while tfdist was preparing its edit; nothing was written",
                    hint="run the command again", reference="mirror-config-changed-meanwhile")
        for change in result.changes:
            if not change.changed:
                continue
            file = change.file
            owner = (file.uid, file.gid) if file.uid is not None and file.gid is not None else None
            mode = file.mode
            if secret and change.tool in ("pip", "uv"):
                mode = 0o600  # the file now holds a password
            store.record_before_write(file.real, file.raw, file.mode, change.tool, change.scope,
                                      owner=(file.uid, file.gid))
            atomic_write(file.real, change.after, mode=mode, owner=owner)
            store.record_written(file.real, change.after)
    for tool in dict.fromkeys(c.tool for c in result.changes if c.changed):
        followups += RECIPES[tool].followups()
    return replace(result, applied=True, followups=tuple(followups))
