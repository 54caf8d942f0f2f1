"""The job secret: made, written, read and checked in one place.

A secret is at least :data:`MIN_BITS` random bits, kept as hex on one line of a file only its owner can read (the
rule ssh applies to private keys). A value that is plainly not random (one byte repeated, a short pattern repeated,
a handful of distinct bytes: what a person types or a test fixture writes) is refused by :func:`weakness` unless
``--rdzv-insecure`` says the network is trusted: its bits are not 128 bits an attacker must guess. Host-file mode makes a fresh one per job and hands it to every agent on ssh's
stdin (``--rdzv-secret-file -``), so it is on no command line and in no process list.
"""
from __future__ import annotations

import os
import secrets
import stat
import string
import sys
import time

from tfdist.errors import UsageError

MIN_BITS = 128
NEW_BYTES = 32  # 256 bits for new secrets
MAX_FILE_BYTES = 4096
STDIN = "-"
NEW_SECRET_COMMAND = "python -m tfdist.launch.elastic.secret PATH"
_HEX = frozenset(string.hexdigits)
MAX_PERIOD = 8  # a secret that repeats its first 1..8 bytes is a typed pattern ("00"*16, "deadbeef"*4, "0123..")
MIN_DISTINCT = 16  # random bytes this long hold about as many distinct values; see weakness()


def new_secret() -> bytes:
    return secrets.token_bytes(NEW_BYTES)


def encode(secret: bytes) -> str:
    return secret.hex()


def weakness(secret: bytes) -> str:
    """Why ``secret`` is plainly not random (``""``: nothing found). Pure.

    A repeat of its first ``p`` bytes (``p`` up to :data:`MAX_PERIOD`) has at most ``8 * p`` bits, however long; and
    random bytes are nearly all distinct (32 of them hold about 30 values), so fewer than ``min(MIN_DISTINCT,
    len // 2)`` distinct bytes is a pattern, not chance: a random secret is refused with a chance below 1e-15 (32
    bytes, what :func:`new_secret` makes) or 1e-11 (16 bytes, the least accepted)."""
    period = next((p for p in range(1, min(MAX_PERIOD, len(secret) - 1) + 1)
                   if all(secret[i] == secret[i % p] for i in range(len(secret)))), None)
    if period == 1:
        return f"every byte is {secret[0]:02x}"
    if period is not None:
        return f"it repeats its first {period} bytes ({secret[:period].hex()})"
    distinct, needed = len(set(secret)), min(MIN_DISTINCT, len(secret) // 2)
    if distinct < needed:
        return f"it holds only {distinct} distinct byte values in {len(secret)} bytes"
    return ""


def parse(text: str, where: str, *, weak_ok: bool = False) -> bytes:
    """The secret written in ``text`` (hex, surrounding blanks ignored); a plainly non-random one is refused unless
    ``weak_ok`` (``--rdzv-insecure``). Raises UsageError naming ``where``."""
    value = text.strip()
    if not value or not set(value) <= _HEX or len(value) % 2:
        raise UsageError(f"{where} does not hold a job secret (one line of hex digits)",
                         hint=f"make one with `{NEW_SECRET_COMMAND}`")
    if len(value) * 4 < MIN_BITS:
        raise UsageError(f"{where} holds a {len(value) * 4}-bit secret; at least {MIN_BITS} bits are needed",
                         hint=f"make a new one with `{NEW_SECRET_COMMAND}`")
    secret = bytes.fromhex(value)
    why = "" if weak_ok else weakness(secret)
    if why:
        raise UsageError(f"{where} does not hold a random job secret: {why}",
                         hint=f"make a new one with `{NEW_SECRET_COMMAND}` (or add --rdzv-insecure, only on a "
                         "network you trust)")
    return secret


def write_new(path: str) -> None:
    """Write a new secret to ``path`` (mode 0600, never over an existing file, atomically: a reader sees all or
    nothing). Raises UsageError naming the file."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, (encode(new_secret()) + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(temporary, path)  # fails if path exists: an existing secret is never replaced
    except FileExistsError:
        raise UsageError(f"{path}: the file exists; a job secret is never overwritten",
                         hint="remove it first, or choose another path") from None
    except OSError as bad:
        raise UsageError(f"{path}: cannot write it ({bad.strerror or bad})",
                         hint="choose a folder you can write") from None
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass


def load(path: str, flag: str = "--rdzv-secret-file", *, weak_ok: bool = False) -> bytes:
    """The secret in ``path`` after ssh's checks: a regular file, owned by this user, that group and others cannot
    read or write; random unless ``weak_ok`` (:func:`parse`). ``-`` reads one line from stdin. Raises UsageError
    naming the file."""
    if path == STDIN:
        return parse(_read_stdin_line(), f"{flag} - (stdin)", weak_ok=weak_ok)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block us
    except OSError as bad:
        raise UsageError(f"{flag} {path}: cannot read it ({bad.strerror or bad})",
                         hint=f"make one with `{NEW_SECRET_COMMAND}`") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{flag} {path} is not a regular file", hint=f"make one with `{NEW_SECRET_COMMAND}`")
        if info.st_mode & 0o077:
            raise UsageError(f"{flag} {path}: group or others can access it (mode {stat.S_IMODE(info.st_mode):o})",
                             hint=f"chmod 600 {path}")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise UsageError(f"{flag} {path} belongs to another user", hint="use a secret file you own")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"{flag} {path} is too big for a job secret", hint=f"make one with `{NEW_SECRET_COMMAND}`")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        text = "\x00"
    return parse(text, f"{flag} {path}", weak_ok=weak_ok)


def _read_stdin_line(timeout: float = 30.0) -> str:
    """One line from fd 0, read byte-wise so nothing after it is consumed (the agent watches stdin afterwards)."""
    import select

    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n") and len(data) <= MAX_FILE_BYTES:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], max(0.0, left))
        if not readable:
            break
        byte = os.read(sys.stdin.fileno(), 1)
        if not byte:
            break
        data += byte
    return data.decode("ascii", errors="replace")


# What each key derived from the job secret is for. The secret itself keys nothing: every use has its own subkey
# (key separation), so a value computed with one (a job id anyone can read, a sealed etcd record) says nothing
# about another's key, and a proof made for one purpose is never valid for another.
PURPOSES = frozenset({"job id", "rendezvous wire", "etcd records"})
_SUBKEY_SALT = b"tfdist job secret v1"


def subkey(secret: bytes, purpose: str, length: int = 32) -> bytes:
    """The key for ``purpose`` (one of :data:`PURPOSES`): HKDF-SHA256 (RFC 5869) from ``cryptography``, with the
    purpose as its ``info``. Raises ValueError for an unknown purpose (a typo must not silently share a key)."""
    if purpose not in PURPOSES:
        raise ValueError(f"no such subkey purpose: {purpose!r}")
    from cryptography.hazmat.primitives import hashes  # imported here: the CLI's start does not pay for it
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_SUBKEY_SALT,
                info=b"tfdist " + purpose.encode("ascii")).derive(secret)


def derived_job_id(secret: bytes) -> str:
    """A job id named by the secret (``--rdzv-id`` left out): the same on every machine holding it, and it tells
    nothing about the secret (its own subkey)."""
    return "job-" + subkey(secret, "job id")[:6].hex()


def main(argv: list[str]) -> int:
    """``python -m tfdist.launch.elastic.secret PATH``: write a new job secret (256 bits, mode 0600)."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"usage: {NEW_SECRET_COMMAND}  (writes a new job secret, mode 0600, never over a file)", file=sys.stderr)
        return 2
    try:
        write_new(argv[0])
    except UsageError as bad:
        print(f"tfdist: {bad.one_line()}", file=sys.stderr)
        return 2
    print(f"tfdist: wrote a new job secret to {argv[0]} (mode 0600); copy it to every machine of the job the same "
          "way and pass --rdzv-secret-file", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
