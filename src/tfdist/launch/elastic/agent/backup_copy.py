"""No shared filesystem: copy the latest complete backup to every machine of a round that lacks it.

tf-keras' ``BackupAndRestore`` has the chief write the backup (``<model dir>/backup/chief``) and restores *every*
worker from that folder, so on machines that do not share the model directory the non-chief workers would start
from nothing while the chief resumes. Before a round starts the rendezvous therefore compares what each machine
holds and has the newest complete backup streamed, through the rendezvous connection, to the machines without it.

- **Which mode**: each agent keeps a marker ``<model dir>/.tfdist-fs-<job>`` holding a random id, created once with
  ``O_EXCL``; machines that share the directory see the same id. The rendezvous prints ``checkpoint directory:
  shared`` or ``not shared``.
- **Complete**: the ``checkpoint`` index names ``ckpt-N``, and ``ckpt-N.index`` plus every ``ckpt-N.data-K-of-M``
  shard are present. TensorFlow writes a new checkpoint under a temporary name and updates the index last, so this
  never sees half a save.
- **Checksummed**: the manifest carries each file's SHA-256; the receiver writes into a fresh folder, checks every
  digest and only then swaps it in with renames. A mismatched or incomplete copy is deleted and never restored.
- **Bounded**: only file names of a backup (``messages.BACKUP_FILE``: no separators, no ``..``), each at most the
  size its manifest declares, all together at most :data:`MAX_BACKUP_BYTES`, within a deadline; only regular files
  are read or written (a FIFO or a link planted in the folder is never opened). Anything wrong: "not restored" and
  one line, never a crash. The backup it replaces is kept as ``backup/chief.previous``, never deleted by a copy.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import shutil
import stat
import time
from typing import Any, Callable

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.backend import Sender
from tfdist.launch.elastic.messages.fields import FILE_CHUNK

# tf-keras' name for the folder the chief writes and every worker restores from (worker_training_state.py).
CHIEF_FOLDER = "chief"
PREVIOUS_FOLDER = "chief.previous"
MAX_BACKUP_BYTES = 256 * 1024**3
MIN_DEADLINE_S = 120.0
MIN_RATE = 4 * 1024**2  # bytes/s the deadline allows for at least: slower links get "not restored"
_INDEX_LINE = re.compile(r'^model_checkpoint_path:\s*"([^"/]+)"', re.M)
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)\Z")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRestored(Exception):
    """Why a copy was not restored (one line)."""


def _open_regular(path: str) -> int:
    """An fd for reading ``path`` when it is a regular file (never a FIFO, device or link). Raises OSError."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{os.path.basename(path)} is not a regular file")
    return fd


def sha256_of(path: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with os.fdopen(_open_regular(path), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def chunk_message(name: str, chunk: bytes, *, end: bool, last: bool, raw: bool) -> M.Message:
    """One chunk's message: raw bytes after a header (``raw``: the TCP wire) or base64 in JSON (the etcd backend,
    whose records are JSON)."""
    if raw:
        return M.Chunk.of(name, chunk, end=end, last=last)
    return M.File(name=name, data=base64.b64encode(chunk).decode("ascii"), end=end, last=last)


def chunk_bytes(message: M.File | M.Chunk) -> bytes:
    """A chunk message's bytes. Raises binascii.Error (bad base64)."""
    return message.data if isinstance(message, M.Chunk) else base64.b64decode(message.data, validate=True)


def stream_files(folder: str, names: list[str], channel: Sender) -> None:
    """Send ``names`` (already checked against their pattern) from ``folder``, chunk by chunk, through
    ``channel.send(file_message)`` (False: stop); only regular files. A file that cannot be opened ends the upload:
    the receivers time out and say "not restored". A channel with ``RAW_CHUNKS`` true (the TCP link) gets
    :class:`~tfdist.launch.elastic.messages.protocol.Chunk` messages, any other base64 ``file`` messages."""
    raw = getattr(channel, "RAW_CHUNKS", False) is True
    for position, name in enumerate(names):
        try:
            handle = os.fdopen(_open_regular(os.path.join(folder, name)), "rb")
        except OSError:
            return
        with handle:
            while True:
                chunk = handle.read(FILE_CHUNK)
                end = len(chunk) < FILE_CHUNK
                if channel.send(chunk_message(name, chunk, end=end, last=end and position == len(names) - 1,
                                              raw=raw)) is False:
                    return
                if end:
                    break


def receive_files(incoming: str, expected: dict[str, str], sizes: dict[str, int],
                  receive: Callable[[], M.Message | None]) -> M.Message | None:
    """Write the chunks of ``expected`` (name -> digest, checked by the caller) into ``incoming``, each at most its
    declared size, within a deadline; a message that is not a file is handed back (stop, finish).

    Raises:
        NotRestored: a file not expected, bigger than declared, short, or the deadline passed.
    """
    deadline = time.monotonic() + MIN_DEADLINE_S + sum(sizes.values()) / MIN_RATE
    handles: dict[str, Any] = {}
    written = dict.fromkeys(expected, 0)
    try:
        while True:
            if time.monotonic() > deadline:
                raise NotRestored("the copy did not finish in time")
            message = receive()
            if message is None or isinstance(message, M.Ping):
                continue
            if not isinstance(message, M.CHUNKS):
                return message
            name = message.name
            if name not in expected:
                raise NotRestored(f"unexpected file {name[:100]!r}")
            chunk = chunk_bytes(message)
            written[name] += len(chunk)
            if written[name] > sizes[name]:
                raise NotRestored(f"{name} is bigger than its manifest says")
            handle = handles.get(name)
            if handle is None:
                fd = os.open(os.path.join(incoming, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW,
                             0o600)
                handle = handles[name] = os.fdopen(fd, "wb")
            handle.write(chunk)
            if message.last:
                break
        short = [n for n in expected if written[n] != sizes[n]]
        if short:
            raise NotRestored(f"{', '.join(short)} missing or short")
        return None
    finally:
        for handle in handles.values():
            handle.close()


class BackupStore:
    """This machine's view of the job's backup folder (``<checkpoint_dir>/backup/chief``)."""

    def __init__(self, checkpoint_dir: str, job: str, *, max_bytes: int = MAX_BACKUP_BYTES) -> None:
        self.root = checkpoint_dir
        self.folder = os.path.join(checkpoint_dir, "backup", CHIEF_FOLDER)
        self.job = job
        self.max_bytes = max_bytes

    def filesystem_id(self) -> str:
        """The id every machine sharing this directory reads (made on first use, atomically)."""
        os.makedirs(self.root, exist_ok=True)
        marker = os.path.join(self.root, f".tfdist-fs-{self.job}")
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
        except FileExistsError:
            with os.fdopen(_open_regular(marker), encoding="ascii") as handle:
                return handle.read(64).strip()
        value = secrets.token_hex(8)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(value)
        return value

    def manifest(self) -> dict[str, Any]:
        """``{"fs", "name": "ckpt-N"|None, "files": {file: sha256}, "sizes": {file: bytes}}`` of the latest
        complete backup here (``name`` None when there is none)."""
        result: dict[str, Any] = {"fs": self.filesystem_id(), "name": None, "files": None, "sizes": None}
        try:
            with os.fdopen(_open_regular(os.path.join(self.folder, "checkpoint")), encoding="utf-8") as handle:
                index = handle.read(1 << 20)
            present = os.listdir(self.folder)
        except (OSError, UnicodeDecodeError):
            return result
        found = _INDEX_LINE.search(index)
        if not found or not M.BACKUP_NAME.fullmatch(found.group(1)):
            return result
        name = found.group(1)
        shards = [f for f in present if f.startswith(name + ".data-") and M.BACKUP_FILE.fullmatch(f)]
        totals = {int(m.group(2)) for m in (_SHARD.search(f) for f in shards) if m}
        if f"{name}.index" not in present or len(totals) != 1 or len(shards) != totals.pop():
            return result  # incomplete: never offered
        files = ["checkpoint", f"{name}.index", *sorted(shards)]
        try:
            sums = {f: sha256_of(os.path.join(self.folder, f)) for f in files}
        except OSError:
            return result
        result.update(name=name, files={f: s[0] for f, s in sums.items()}, sizes={f: s[1] for f, s in sums.items()})
        return result

    # -- sending -------------------------------------------------------------------------------------------------
    def upload(self, channel: Sender, request: M.Send) -> None:
        """Stream the files the rendezvous asks for (``send``), chunk by chunk, through ``channel.send(file_message)``
        (False: stop). Only backup file names, only regular files."""
        stream_files(self.folder, [n for n in request.files if M.BACKUP_FILE.fullmatch(n)], channel)

    # -- receiving -----------------------------------------------------------------------------------------------
    def await_restore(self, restore: dict[str, Any], receive: Callable[[], M.Message | None],
                      say: Callable[[str], None]) -> tuple[bool, M.Message | None]:
        """Receive the files ``restore`` lists, check them, and swap them in.

        Returns ``(restored, other)``: ``other`` is a message that interrupted the transfer (stop, finish) for the
        caller to handle.
        """
        name = restore.get("name")
        incoming = ""
        try:
            expected, sizes = self._check_restore(restore)
            os.makedirs(os.path.join(self.root, "backup"), exist_ok=True)
            incoming = os.path.join(self.root, "backup", f".incoming-{secrets.token_hex(4)}")
            os.mkdir(incoming, 0o700)
            other = self._receive_files(incoming, expected, sizes, receive)
            if other is not None:
                return False, other
            wrong = [n for n, digest in expected.items()
                     if sha256_of(os.path.join(incoming, n)) != (digest, sizes[n])]
            if wrong:
                raise NotRestored(f"{', '.join(wrong)}: checksum mismatch")
            self._swap_in(incoming)
            incoming = ""
            say(f"restored backup {name} from {restore.get('from')} ({len(expected)} files, SHA-256 checked)")
            return True, None
        except (NotRestored, OSError, binascii.Error, ValueError) as bad:
            say(f"backup copy of {str(name)[:100]}: {bad}: not restored")
            return False, None
        finally:
            if incoming:
                shutil.rmtree(incoming, ignore_errors=True)

    def _check_restore(self, restore: dict[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
        expected, sizes = restore.get("files"), restore.get("sizes")
        if not isinstance(expected, dict) or not isinstance(sizes, dict) or set(expected) != set(sizes) or \
                not all(M.BACKUP_FILE.fullmatch(str(n)) for n in expected):
            raise NotRestored("the manifest is not a backup's")
        total = sum(sizes.values())
        if total > self.max_bytes:
            raise NotRestored(f"{total} bytes is over the {self.max_bytes}-byte limit")
        return expected, sizes

    def _receive_files(self, incoming: str, expected: dict[str, str], sizes: dict[str, int],
                       receive: Callable[[], M.Message | None]) -> M.Message | None:
        return receive_files(incoming, expected, sizes, receive)

    def _swap_in(self, incoming: str) -> None:
        """Put the checked copy in place; the backup it replaces becomes ``chief.previous`` (one kept)."""
        previous = os.path.join(os.path.dirname(self.folder), PREVIOUS_FOLDER)
        if os.path.lexists(self.folder):
            shutil.rmtree(previous, ignore_errors=True)
            os.rename(self.folder, previous)
        os.rename(incoming, self.folder)
