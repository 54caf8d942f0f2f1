"""Backups of every file tfdist changes, and ``mirror restore``.

The first time tfdist changes a file it copies the original bytes (or notes that the file did not exist) into
``$XDG_STATE_HOME/tfdist/mirror`` and records it in ``manifest.json``. Later switches keep that first backup, so a
restore always returns to the state before tfdist ever touched the file.

Safety rules: every read-modify-write of the manifest happens under an exclusive lock (two concurrent
``mirror use`` runs both get recorded); ``restore`` only trusts backup files that are plain files directly inside
the state directory (a manifest entry pointing elsewhere is refused); a file edited after tfdist wrote it is copied
aside before it is restored or removed, and the copy's path is reported; owner, group and mode are put back.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tfdist.errors import ConfigFileError
from tfdist.mirror.fileio import atomic_write, resolve, sha256
from tfdist.mirror.paths import ConfigPaths

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
LOCK = ".lock"
_BACKUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


@dataclass(frozen=True)
class BackupEntry:
    """One file tfdist has changed."""

    path: str
    tool: str
    scope: str
    existed: bool
    backup: str | None
    mode: int | None
    created: str
    written_sha256: str | None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class RestoreAction:
    """What ``restore`` did (or would do) to one file."""

    entry: BackupEntry
    action: str  # "restored", "deleted", "already-absent"
    note: str | None = None
    kept: str | None = None  # where the user's later edits were copied before the restore


class BackupStore:
    """The manifest and backup files under ``paths.backup_dir``."""

    def __init__(self, paths: ConfigPaths) -> None:
        self.directory = paths.backup_dir

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state directory's exclusive lock (blocking) for a read-modify-write of files and manifest.

        Raises:
            ConfigFileError: the state directory cannot be created or locked.
        """
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            handle = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise ConfigFileError(f"{self.directory}: cannot create tfdist's state directory ({error.strerror})",
                                  hint="check its permissions or set XDG_STATE_HOME") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)  # closing releases the lock

    @property
    def manifest_path(self) -> Path:
        """Where the manifest lives."""
        return self.directory / MANIFEST

    def entries(self) -> dict[str, BackupEntry]:
        """All recorded files by resolved path.

        Raises:
            ConfigFileError: the manifest is unreadable.
        """
        try:
            raw = self.manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise ConfigFileError(f"{self.manifest_path}: cannot be read ({error.strerror})",
                                  hint="check its permissions") from None
        try:
            document = json.loads(raw)
            return {key: BackupEntry(**value) for key, value in document.get("entries", {}).items()}
        except (ValueError, TypeError) as error:
            raise ConfigFileError(f"{self.manifest_path}: damaged backup manifest ({error})",
                                  hint="inspect the backups in that folder by hand") from None

    def _save(self, entries: dict[str, BackupEntry]) -> None:
        document: dict[str, Any] = {
            "schema_version": MANIFEST_VERSION,
            "entries": {key: entry.__dict__ for key, entry in sorted(entries.items())},
        }
        atomic_write(self.manifest_path, (json.dumps(document, indent=2) + "\n").encode("utf-8"), mode=0o600)

    def record_before_write(self, real: Path, original: bytes | None, mode: int | None, tool: str,
                            scope: str, owner: tuple[int | None, int | None] = (None, None)) -> None:
        """Back up ``original`` for ``real`` unless a backup already exists (the first change wins).

        Call with :meth:`locked` held.
        """
        entries = self.entries()
        key = str(real)
        if key in entries:
            return
        backup_name = None
        if original is not None:
            backup_name = f"{tool}-{scope}-{_stamp()}.orig"
            atomic_write(self.directory / backup_name, original, mode=0o600)
        entries[key] = BackupEntry(path=key, tool=tool, scope=scope, existed=original is not None,
                                   backup=backup_name, mode=mode,
                                   created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                   written_sha256=None, uid=owner[0], gid=owner[1])
        self._save(entries)

    def record_written(self, real: Path, data: bytes) -> None:
        """Remember the digest of what tfdist wrote (to tell later hand edits apart). Call with :meth:`locked` held."""
        entries = self.entries()
        key = str(real)
        if key in entries:
            entries[key] = BackupEntry(**{**entries[key].__dict__, "written_sha256": sha256(data)})
            self._save(entries)

    def backup_file(self, entry: BackupEntry) -> Path:
        """The backup of ``entry``, trusted only when it is a plain file directly inside the state directory.

        Raises:
            ConfigFileError: the manifest names a path elsewhere (or a symlink, or a missing file).
        """
        name = entry.backup or ""
        refused = ConfigFileError(
            f"the backup manifest points the backup of {entry.path} at {name!r}, outside tfdist's state directory "
            f"{self.directory}; refused",
            hint="restore that file by hand and remove its entry from the manifest",
            reference="mirror-backup-untrusted",
        )
        if not _BACKUP_NAME.fullmatch(name) or name in (MANIFEST, LOCK):
            raise refused
        source = self.directory / name
        try:
            info = os.lstat(source)
        except OSError:
            raise ConfigFileError(f"backup {source} of {entry.path} is missing",
                                  hint="restore that file by hand") from None
        if not stat.S_ISREG(info.st_mode):
            raise refused
        return source

    def restore(self, tools: tuple[str, ...] | None = None, *, dry_run: bool = False) -> list[RestoreAction]:
        """Put back the original bytes of every recorded file (of ``tools``), deleting files tfdist created.

        A file edited since tfdist wrote it is first copied to ``<file>.tfdist-edited-<time>`` (same owner and
        mode), so no edit is ever lost.

        Raises:
            ConfigFileError: a backup file is missing or untrusted, or a file cannot be written.
        """
        with self.locked():
            return self._restore(tools, dry_run)

    def _restore(self, tools: tuple[str, ...] | None, dry_run: bool) -> list[RestoreAction]:
        entries = self.entries()
        selected = {k: e for k, e in sorted(entries.items()) if tools is None or e.tool in tools}
        sources = {k: self.backup_file(e) for k, e in selected.items() if e.existed}  # refuse before any change
        actions: list[RestoreAction] = []
        for key, entry in selected.items():
            target = Path(key)
            real = resolve(target) if target.is_symlink() else target
            current = real.read_bytes() if real.is_file() else None
            note = kept = None
            if entry.written_sha256 and current is not None and sha256(current) != entry.written_sha256:
                kept_path = real.with_name(f"{real.name}.tfdist-edited-{_stamp()}")
                kept = str(kept_path)
                note = f"the file was edited after tfdist wrote it; that version is kept in {kept}"
                if not dry_run:
                    info = real.stat()
                    atomic_write(kept_path, current, mode=stat.S_IMODE(info.st_mode),
                                 owner=(info.st_uid, info.st_gid))
            if entry.existed:
                original = sources[key].read_bytes()
                if not dry_run:
                    owner = (entry.uid, entry.gid) if entry.uid is not None and entry.gid is not None else None
                    atomic_write(real, original, mode=entry.mode, owner=owner)
                actions.append(RestoreAction(entry, "restored", note, kept))
            elif current is not None or target.is_symlink():
                if not dry_run:
                    try:
                        os.unlink(target)
                    except OSError as error:
                        raise ConfigFileError(f"{key}: cannot be removed ({error.strerror})",
                                              hint="remove it by hand") from None
                actions.append(RestoreAction(entry, "deleted", note, kept))
            else:
                actions.append(RestoreAction(entry, "already-absent", None))
            if not dry_run:
                del entries[key]
                if key in sources:
                    try:
                        os.unlink(sources[key])
                    except OSError:
                        pass
                self._save(entries)
        return actions


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
