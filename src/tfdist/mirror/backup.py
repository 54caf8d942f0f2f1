"""Backups of every file tfdist changes, and ``mirror restore``.

The first time tfdist changes a file it copies the original bytes (or notes that the file did not exist) into
``$XDG_STATE_HOME/tfdist/mirror`` and records it in ``manifest.json``. Later switches keep that first backup, so a
restore always returns to the state before tfdist ever touched the file.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdist.errors import ConfigFileError
from tfdist.mirror.fileio import atomic_write, resolve, sha256
from tfdist.mirror.paths import ConfigPaths

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


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


@dataclass(frozen=True)
class RestoreAction:
    """What ``restore`` did (or would do) to one file."""

    entry: BackupEntry
    action: str  # "restored", "deleted", "already-absent"
    note: str | None = None


class BackupStore:
    """The manifest and backup files under ``paths.backup_dir``."""

    def __init__(self, paths: ConfigPaths) -> None:
        self.directory = paths.backup_dir

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
                            scope: str) -> None:
        """Back up ``original`` for ``real`` unless a backup already exists (the first change wins)."""
        entries = self.entries()
        key = str(real)
        if key in entries:
            return
        backup_name = None
        if original is not None:
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            backup_name = f"{tool}-{scope}-{stamp}.orig"
            atomic_write(self.directory / backup_name, original, mode=0o600)
        entries[key] = BackupEntry(path=key, tool=tool, scope=scope, existed=original is not None,
                                   backup=backup_name, mode=mode,
                                   created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                   written_sha256=None)
        self._save(entries)

    def record_written(self, real: Path, data: bytes) -> None:
        """Remember the digest of what tfdist wrote (to tell later hand edits apart)."""
        entries = self.entries()
        key = str(real)
        if key in entries:
            entries[key] = BackupEntry(**{**entries[key].__dict__, "written_sha256": sha256(data)})
            self._save(entries)

    def restore(self, tools: tuple[str, ...] | None = None, *, dry_run: bool = False) -> list[RestoreAction]:
        """Put back the original bytes of every recorded file (of ``tools``), deleting files tfdist created.

        Raises:
            ConfigFileError: a backup file is missing or a file cannot be written.
        """
        entries = self.entries()
        actions: list[RestoreAction] = []
        for key, entry in sorted(entries.items()):
            if tools is not None and entry.tool not in tools:
                continue
            target = Path(key)
            current = None
            if target.is_file():
                current = target.read_bytes()
            note = None
            if entry.written_sha256 and current is not None and sha256(current) != entry.written_sha256:
                note = "the file was edited after tfdist wrote it; those edits are replaced"
            if entry.existed:
                if entry.backup is None:
                    raise ConfigFileError(f"the backup manifest has no backup file for {key}",
                                          hint="restore that file by hand")
                source = self.directory / entry.backup
                try:
                    original = source.read_bytes()
                except OSError:
                    raise ConfigFileError(f"backup {source} of {key} is missing",
                                          hint="restore that file by hand") from None
                if not dry_run:
                    atomic_write(resolve(target) if target.is_symlink() else target, original, mode=entry.mode)
                actions.append(RestoreAction(entry, "restored", note))
            elif current is not None or target.is_symlink():
                if not dry_run:
                    try:
                        os.unlink(target)
                    except OSError as error:
                        raise ConfigFileError(f"{key}: cannot be removed ({error.strerror})",
                                              hint="remove it by hand") from None
                actions.append(RestoreAction(entry, "deleted", note))
            else:
                actions.append(RestoreAction(entry, "already-absent", None))
            if not dry_run:
                del entries[key]
                if entry.backup:
                    try:
                        os.unlink(self.directory / entry.backup)
                    except OSError:
                        pass
                self._save(entries)
        return actions
