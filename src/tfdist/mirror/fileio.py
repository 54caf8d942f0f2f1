"""Careful reading and atomic writing of small configuration files.

Every failure becomes a :class:`~tfdist.errors.ConfigFileError` (exit status 2) raised *before* anything is written,
so a file tfdist cannot handle is always left exactly as it was.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfdist.errors import ConfigFileError

BOM = "\ufeff"


@dataclass(frozen=True)
class TextFile:
    """A configuration file as read from disk.

    Attributes:
        path: the path as configured (may be a symlink).
        real: the file actually read and written (symlinks resolved, so a symlinked dotfile stays a symlink).
        raw: the exact bytes on disk, or ``None`` when the file does not exist.
        text: the decoded text with the BOM removed and line endings normalised to ``\\n``.
        bom: whether the file started with a UTF-8 byte-order mark.
        newline: the line ending to write back (``"\\r\\n"`` when the file used CRLF).
        mode: permission bits of the existing file.
        uid: owner of the existing file (kept when the file is replaced).
        gid: group of the existing file.
    """

    path: Path
    real: Path
    raw: bytes | None
    text: str
    bom: bool = False
    newline: str = "\n"
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None

    @property
    def exists(self) -> bool:
        """Whether the file existed when read."""
        return self.raw is not None

    def encode(self, text: str, *, keep_bom: bool = True) -> bytes:
        """Turn edited ``\\n`` text back into bytes with the file's own line endings (and BOM if ``keep_bom``)."""
        body = text.replace("\n", self.newline) if self.newline != "\n" else text
        prefix = BOM if (self.bom and keep_bom) else ""
        return (prefix + body).encode("utf-8")


def _fail(path: Path, problem: str, hint: str, reference: str) -> ConfigFileError:
    return ConfigFileError(f"{path}: {problem}; nothing was changed", hint=hint, reference=reference)


def resolve(path: Path) -> Path:
    """Follow symlinks to the file that should really be edited.

    Raises:
        ConfigFileError: a symlink loop, or a dangling symlink.
    """
    if not path.is_symlink():
        return path
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise _fail(path, f"is a symlink to {os.readlink(path)!s}, which does not exist",
                    "fix or remove the dangling link", "mirror-config-dangling-symlink") from None
    except (RuntimeError, OSError) as loop:
        raise _fail(path, f"cannot resolve symlink ({loop})", "fix the link", "mirror-config-symlink-loop") from None
    return real


def read_text_file(path: Path) -> TextFile:
    """Read a configuration file strictly as UTF-8.

    A missing file reads as empty. A directory, a device, undecodable bytes or an unreadable file raise.

    Raises:
        ConfigFileError: the file cannot be used; the message names the file and the problem.
    """
    real = resolve(path)
    try:
        info = real.stat()
    except FileNotFoundError:
        return TextFile(path=path, real=real, raw=None, text="")
    except NotADirectoryError:
        blocker = next((p for p in real.parents if p.exists() and not p.is_dir()), real.parent)
        raise _fail(path, f"cannot be created because {blocker} is not a directory", "move that file away",
                    "mirror-config-parent-not-directory") from None
    except OSError as error:
        raise _fail(path, f"cannot be examined ({error.strerror})", "check its permissions", "mirror-config-unreadable")
    if stat.S_ISDIR(info.st_mode):
        raise _fail(path, "is a directory, not a file", "move the directory away", "mirror-config-is-directory")
    if not stat.S_ISREG(info.st_mode):
        raise _fail(path, "is not a regular file", "replace it with a regular file", "mirror-config-not-regular")
    try:
        raw = real.read_bytes()
    except OSError as error:
        raise _fail(path, f"cannot be read ({error.strerror})", "check its permissions", "mirror-config-unreadable")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(path, f"is not valid UTF-8 (byte {error.start}: {raw[error.start:error.start + 1]!r})",
                    "re-save the file as UTF-8", "mirror-config-not-utf8") from None
    bom = decoded.startswith(BOM)
    if bom:
        decoded = decoded[1:]
    newline = "\r\n" if "\r\n" in decoded else "\n"
    text = decoded.replace("\r\n", "\n")
    return TextFile(path=path, real=real, raw=raw, text=text, bom=bom, newline=newline,
                    mode=stat.S_IMODE(info.st_mode), uid=info.st_uid, gid=info.st_gid)


def check_writable(file: TextFile) -> None:
    """Make sure ``file`` can be replaced: the file itself (read-only bits are honoured even for root) and the
    nearest existing parent directory.

    Raises:
        ConfigFileError: the file or its directory cannot be written.
    """
    if file.exists:
        if file.mode is not None and not file.mode & 0o222 or not os.access(file.real, os.W_OK):
            raise _fail(file.path, "is read-only", "make it writable (chmod u+w) or choose another --scope",
                        "mirror-config-read-only")
    ancestor = file.real.parent
    while not ancestor.exists():
        if ancestor.parent == ancestor:
            break
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise _fail(file.path, f"cannot be created because {ancestor} is not a directory",
                    "move that file away", "mirror-config-parent-not-directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise _fail(file.path, f"cannot be written: no permission in {ancestor}",
                    "run with the needed rights or choose --scope user", "mirror-config-not-writable")


def _nearest_directory(path: Path) -> Path:
    ancestor = path.parent
    while not ancestor.exists() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    return ancestor


def _make_parents(directory: Path, owner: tuple[int, int] | None) -> None:
    """``mkdir -p`` that gives each created directory ``owner`` (so root never leaves root-owned folders in a
    user's home)."""
    missing: list[Path] = []
    current = directory
    while not current.exists() and current.parent != current:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        if owner is not None:
            os.chown(folder, *owner)


def atomic_write(path: Path, data: bytes, *, mode: int | None = None, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same directory, fsync, then rename.

    Missing parent directories are created. The previous permission bits are kept (new files get 0644), and so
    are owner and group: ``owner`` is the (uid, gid) to give the file; ``None`` means "the owner of the nearest
    existing directory" when running as root (a file written into another user's home stays theirs), else the
    caller.

    Raises:
        ConfigFileError: the write failed; the original file is untouched.
    """
    if owner is None and os.geteuid() == 0:
        info = _nearest_directory(path).stat()
        owner = (info.st_uid, info.st_gid)
    try:
        _make_parents(path.parent, owner)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tfdist-tmp", dir=path.parent)
    except OSError as error:
        raise _fail(path, f"cannot be written ({error.strerror})", "check the directory's permissions",
                    "mirror-config-not-writable") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if owner is not None and (owner[0] != os.geteuid() or owner[1] != os.getegid()):
            os.chown(temporary, *owner)
        os.chmod(temporary, 0o644 if mode is None else mode)  # after chown, which may clear set-id bits
        os.replace(temporary, path)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise _fail(path, f"cannot be written ({error.strerror})", "check free space and permissions",
                    "mirror-config-not-writable") from None
    try:
        directory = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(directory)
    except OSError:
        pass
    finally:
        os.close(directory)


def read_current(path: Path) -> bytes | None:
    """The bytes on disk now (``None`` if missing), to detect a change made since the file was planned.

    Raises:
        ConfigFileError: the file exists but cannot be read.
    """
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _fail(path, f"cannot be read ({error.strerror})", "check its permissions", "mirror-config-unreadable")


def sha256(data: bytes | None) -> str | None:
    """Hex digest of ``data`` (``None`` for a missing file)."""
    return None if data is None else hashlib.sha256(data).hexdigest()
