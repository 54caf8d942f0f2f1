"""The field checks of the rendezvous' messages (``messages.py``): each raises :class:`ProtocolError` with a short
reason naming the field, so one bad message costs its sender the connection and nothing more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tfdist.protocol.snapshot_file import SNAPSHOT_FILE  # noqa: F401 - the one file of an in-memory snapshot

MAX_TEXT = 4096
MAX_REPORT = 256 * 1024
MAX_ITEMS = 4096
MAX_SLOTS = 1024
FILE_CHUNK = 256 * 1024  # the bytes of one ``chunk`` (or ``file``) message: a backup's or a snapshot's chunk
MAX_CHUNK_TEXT = 512 * 1024  # base64 of a FILE_CHUNK (a ``file`` message, the etcd form), with room
BACKUP_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
# The only files a backup holds: tf-keras' index, and one checkpoint's index and shards. No separators, no "..".
BACKUP_FILE = re.compile(r"checkpoint|[A-Za-z0-9_-]{1,100}\.(?:index|data-[0-9]{1,6}-of-[0-9]{1,6})")
_HEX = re.compile(r"[0-9a-f]{1,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ProtocolError(Exception):
    """The peer sent something that is not a message of this protocol."""


# -- field checks ----------------------------------------------------------------------------------------------
def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ProtocolError(f"{what}: expected text of at most {limit} characters")
    return value


def _int(value: Any, what: str, low: int = 0, high: int = 2**53) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{what}: expected a whole number from {low} to {high}")
    return value


def _maybe(check: Any, value: Any, *args: Any) -> Any:
    return None if value is None else check(value, *args)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"{what}: expected true or false")
    return value


def _list(value: Any, what: str, limit: int = MAX_ITEMS) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise ProtocolError(f"{what}: expected a list of at most {limit} items")
    return value


def _object(value: Any, what: str, limit: int = MAX_ITEMS) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) > limit:
        raise ProtocolError(f"{what}: expected an object of at most {limit} keys")
    return value


def _files(value: Any, what: str, pattern: re.Pattern[str] = BACKUP_FILE) -> dict[str, str]:
    files = _object(value, what, 1024)
    for name, digest in files.items():
        if not pattern.fullmatch(name):
            raise ProtocolError(f"{what}: {name[:80]!r} is not a backup file name")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ProtocolError(f"{what}: {name} has no SHA-256")
    return files


def _sizes(value: Any, what: str, names: dict[str, str]) -> dict[str, int]:
    sizes = _object(value, what, 1024)
    if set(sizes) != set(names):
        raise ProtocolError(f"{what}: sizes must name exactly the files listed")
    return {name: _int(size, f"{what}.{name}", 0, 2**50) for name, size in sizes.items()}


@dataclass(frozen=True)
class Backup:
    """A machine's latest complete backup (``name`` None: it has none) and its filesystem's id."""

    fs: str
    name: str | None = None
    files: dict[str, str] | None = None
    sizes: dict[str, int] | None = None

    @classmethod
    def check(cls, value: Any, what: str = "backup") -> "Backup":
        raw = _object(value, what, 8)
        fs = _text(raw.get("fs"), f"{what}.fs", 64)
        if not _HEX.fullmatch(fs):
            raise ProtocolError(f"{what}.fs: expected a hex id")
        name = raw.get("name")
        if name is None:
            return cls(fs)
        if not isinstance(name, str) or not BACKUP_NAME.fullmatch(name):
            raise ProtocolError(f"{what}.name: not a checkpoint name")
        files = _files(raw.get("files"), f"{what}.files")
        return cls(fs, name, files, _sizes(raw.get("sizes"), f"{what}.sizes", files))


def _roles(check: Any, value: Any, what: str) -> Any:
    """A role field, checked by the placement rule's own check (``role_list``, ``layout_word``)."""
    try:
        return check(value)
    except ValueError:
        raise ProtocolError(f"{what}: not the job's roles") from None


def _snapshot(value: Any, what: str) -> dict[str, Any]:
    """A snapshot claim (``ready``) or copy (``round``): ``{"step", "files", "sizes"[, "from"]}``."""
    raw = _object(value, what, 8)
    files = _files(raw.get("files"), f"{what}.files", SNAPSHOT_FILE)
    out = {"step": _int(raw.get("step"), f"{what}.step"), "files": files,
           "sizes": _sizes(raw.get("sizes"), f"{what}.sizes", files)}
    return out if "from" not in raw else {**out, "from": _text(raw["from"], f"{what}.from", 300)}


def counter(name: str) -> int:
    """A checkpoint name's trailing number (``ckpt-12`` -> 12; -1: none): the newer of two backups has the higher."""
    found = re.search(r"(\d+)\Z", name)
    return int(found.group(1)) if found else -1
