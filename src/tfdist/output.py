"""Writing generated files without losing anything.

:func:`check_output` refuses, before anything is written, an output whose folder is missing, that is a folder, or
that exists (unless ``force``). :func:`write_output` then writes atomically (a temporary file in the same folder,
flushed, then renamed over the target), so a reader never sees half a file and a failed write leaves the old one.
With ``force``, an existing file is first kept as ``NAME.bak`` (replacing an older ``.bak``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from tfdist.errors import UsageError
from tfdist.validate import path_text, shown

BACKUP_SUFFIX = ".bak"


def backup_path(path: Path) -> Path:
    """Where ``--force`` keeps the file it replaces."""
    return path.with_name(path.name + BACKUP_SUFFIX)


def check_output(path: str | os.PathLike[str], *, force: bool, flag: str = "--output") -> Path:
    """Refuse an output that cannot or must not be written; return it as a Path.

    Raises:
        UsageError: the name is not one line, its folder is missing, it is a folder, or it exists without ``force``.
    """
    text = os.fspath(path)
    path_text(text, flag)
    target = Path(text)
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"{flag} {shown(text)}: the folder {shown(str(folder))} does not exist",
                         hint=f"create it first (mkdir -p {folder}) or choose another {flag}",
                         reference="output-folder-missing")
    if target.is_dir():
        raise UsageError(f"{flag} {shown(text)} is a folder", hint="give a file name", reference="output-is-folder")
    if (target.exists() or target.is_symlink()) and not force:
        raise UsageError(f"{flag} {shown(text)} exists; it was left untouched",
                         hint=f"pass --force to replace it (the old one is kept as {target.name}{BACKUP_SUFFIX}) "
                              f"or choose another {flag}",
                         reference="output-exists")
    return target


def write_output(path: str | os.PathLike[str], text: str, *, force: bool, mode: int = 0o644,
                 flag: str = "--output") -> Path | None:
    """Write ``text`` to ``path`` atomically with ``mode``; return where the replaced file was kept, if any.

    Raises:
        UsageError: see :func:`check_output`, or the write failed (the old file, if any, is unchanged).
    """
    target = check_output(path, force=force, flag=flag)
    backup = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name[:50]}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
                stream.flush()
                os.fsync(stream.fileno())
            os.chmod(temporary, mode)
            if target.exists() or target.is_symlink():
                backup = backup_path(target)
                # A hard link keeps the old bytes under NAME.bak while NAME is replaced; no moment without NAME.
                if backup.exists() or backup.is_symlink():
                    backup.unlink()
                try:
                    os.link(target, backup, follow_symlinks=False)
                except OSError:  # a file system without hard links
                    shutil.copy2(target, backup, follow_symlinks=False)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as failure:
        raise UsageError(f"cannot write {flag} {shown(str(target))}: {failure.strerror or failure}",
                         hint=f"check {flag} and the free space", reference="output-not-written") from None
    return backup
