"""``mirror use``: plan each tool's config edit, show it as a diff, and apply it safely.

Every file is read and edited in memory first; if any of them cannot be handled, nothing at all is written.
"""
from __future__ import annotations

import difflib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tfdist.errors import ConfigFileError, UsageError
from tfdist.mirror import condarc, pipconf, uvconf
from tfdist.mirror.backup import BackupStore
from tfdist.mirror.catalog import Mirror
from tfdist.mirror.fileio import TextFile, atomic_write, check_writable, read_current, read_text_file
from tfdist.mirror.paths import ConfigPaths, Scope, Tool
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
class SwitchResult:
    """What ``mirror use`` planned and did."""

    mirror: Mirror
    changes: tuple[Change, ...]
    skipped: tuple[Skipped, ...] = ()
    applied: bool = False
    followups: tuple[str, ...] = field(default_factory=tuple)


def conda_in_use(paths: ConfigPaths) -> bool:
    """Whether conda is present here: on PATH, an active environment, or an existing .condarc."""
    if shutil.which("conda") or paths.conda_prefix is not None or paths.conda_root is not None:
        return True
    return any(path.exists() for path in paths.conda_search_path())


def plan(request: SwitchRequest, paths: ConfigPaths) -> SwitchResult:
    """Compute every edit without writing anything.

    Raises:
        UsageError: the mirror cannot serve an explicitly requested tool, or a scope makes no sense for it.
        ConfigFileError: a file cannot be read, parsed or written; nothing is written.
    """
    mirror = request.mirror
    explicit = request.tools is not None
    tools: tuple[Tool, ...] = request.tools or (("pip", "uv", "conda") if conda_in_use(paths) else ("pip", "uv"))
    changes: list[Change] = []
    skipped: list[Skipped] = []
    for tool in tools:
        if tool in ("pip", "uv") and not mirror.pip_index:
            reason = f"{mirror.name} has no PyPI mirror"
            if explicit:
                raise UsageError(reason, hint="choose another mirror for pip/uv")
            skipped.append(Skipped(tool, reason))
            continue
        if tool == "conda" and not mirror.has_conda and not mirror.is_official:
            reason = f"{mirror.name} has no conda channels in the catalog; conda left unchanged"
            if explicit and request.tools == ("conda",):
                raise UsageError(reason, hint="choose a mirror that carries conda channels (see 'tfdist mirror list')")
            skipped.append(Skipped(tool, reason))
            continue
        if tool == "uv" and request.scope == "site" and paths.uv_config_file is None:
            if explicit:
                paths.uv_file("site")  # raises the explanatory UsageError
            skipped.append(Skipped(tool, "uv has no per-environment config file"))
            continue
        path = paths.file_for(tool, request.scope)
        changes.append(_plan_one(tool, request.scope, path, mirror))
    return SwitchResult(mirror=mirror, changes=tuple(changes), skipped=tuple(skipped))


def _plan_one(tool: Tool, scope: Scope, path: Path, mirror: Mirror) -> Change:
    file = read_text_file(path)
    notes: list[str] = []
    keep_bom = True
    index = mirror.pip_index or ""  # plan() only asks for pip/uv when the mirror has an index
    if tool == "pip":
        edit = pipconf.set_index(file.text, index, path)
        text, notes = edit.text, list(edit.notes)
        if file.bom:
            keep_bom = False  # pip's parser rejects a BOM before the first section
            notes.append("removed the UTF-8 byte-order mark, which pip cannot read")
    elif tool == "uv":
        edit_uv = uvconf.set_default_index(file.text, index, mirror.name, path)
        text, notes = edit_uv.text, list(edit_uv.notes)
        if file.bom:
            keep_bom = False  # TOML does not allow a BOM
            notes.append("removed the UTF-8 byte-order mark, which TOML does not allow")
    else:
        edit_conda = condarc.set_mirror(file.text, mirror, path)
        text, notes = edit_conda.text, list(edit_conda.notes)
    after = file.encode(text, keep_bom=keep_bom)
    change = Change(tool=tool, scope=scope, file=file, after=after, notes=tuple(notes))
    if change.changed:
        check_writable(file)
    return change


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
    if any(c.tool == "conda" and c.changed for c in result.changes):
        followups.append(clean_conda_index())
    return SwitchResult(mirror=result.mirror, changes=result.changes, skipped=result.skipped, applied=True,
                        followups=tuple(followups))


def clean_conda_index() -> str:
    """Run ``conda clean -i -y`` when conda is on PATH; otherwise say that it should be run."""
    conda = shutil.which("conda")
    if conda is None:
        return "conda is not on PATH: run 'conda clean -i' once it is, so conda drops its cached channel index"
    try:
        done = subprocess.run([conda, "clean", "-i", "-y"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"'conda clean -i' failed ({error}); run it by hand"
    if done.returncode != 0:
        return f"'conda clean -i' exited {done.returncode}; run it by hand"
    return "ran 'conda clean -i' to drop conda's cached channel index"
