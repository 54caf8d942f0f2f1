"""A machine's end of the in-memory snapshot copy: what it claims, what it sends, and how it takes a copy in.

The agent reports its newest committed snapshot (``snap-<step>.tfsnap`` in its ``/dev/shm`` folder, with the file's
SHA-256 and size) with every ``ready``; the rendezvous (``snapshot_plan.py``) may then ask it to upload that file,
or tell it, in a round's message, to take one in before its tasks start. Taking one in is hardened as the backup
copy is (``backup_copy.py``): the name must be exactly the one file of the step named, the declared size is
enforced while writing, the total is limited, the copy has a deadline, and the file is put into the folder only
when its SHA-256 matches and the snapshot format's own checks (size, magics, CRC-32, step) pass. Anything wrong:
"not restored" and one line; the tasks then resume from a step every machine has, else the durable checkpoint.

Before taking a copy in, the machine drops its own snapshots: it is a receiver because its newest is not the
survivors' (it joined, came back with an abandoned future, or lagged), and if the copy fails none of its own files
may be mixed with the survivors' steps.
"""
from __future__ import annotations

import binascii
import os
import secrets
import shutil
from typing import Any, Callable

from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.backend import Sender
from tfdist.launch.elastic.agent.backup_copy import (MAX_BACKUP_BYTES, NotRestored, receive_files, sha256_of,
                                               stream_files)
from tfdist.launch.elastic.rendezvous.snapshot_plan import whole
from tfdist.protocol.snapshot_file import SnapshotRefused, snapshot_name, verify_file

_INCOMING = ".incoming-"  # not ".partial-": the snapshot writer removes those files and would trip on a folder


class SnapshotCopy:
    """This machine's snapshot folder (the agent's, kept across rounds), seen by the copy."""

    def __init__(self, folder: str, *, max_bytes: int = MAX_BACKUP_BYTES) -> None:
        self.folder = folder
        self.max_bytes = max_bytes

    def steps(self) -> list[int]:
        """Committed snapshot steps here, newest first."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        return sorted((int(m.group(1)) for m in map(M.SNAPSHOT_FILE.fullmatch, names) if m), reverse=True)

    def manifest(self) -> dict[str, Any] | None:
        """``{"step", "files": {name: sha256}, "sizes": {name: bytes}}`` of the newest snapshot here, or None.

        Files are committed by a rename once whole (runtime/snapshots/store.py), so the newest is complete; the
        receiver checks it again. Called between rounds, when no task here writes."""
        for step in self.steps():
            name = snapshot_name(step)
            try:
                digest, size = sha256_of(os.path.join(self.folder, name))
            except OSError:
                continue
            return {"step": step, "files": {name: digest}, "sizes": {name: size}}
        return None

    def upload(self, channel: Sender, request: M.Send) -> None:
        """Stream the snapshot file the rendezvous asks for (``send`` with ``what: snapshot``)."""
        names = [n for n in request.files if M.SNAPSHOT_FILE.fullmatch(n)]
        stream_files(self.folder, names[:1], channel)

    def drop_own(self) -> None:
        for step in self.steps():
            try:
                os.unlink(os.path.join(self.folder, snapshot_name(step)))
            except OSError:
                pass

    def await_restore(self, copy: dict[str, Any], receive: Callable[[], M.Message | None],
                      say: Callable[[str], None]) -> M.Message | None:
        """Take in the snapshot ``copy`` describes (the round message's ``snapshot``), chunks read with
        ``receive``. Returns a message that interrupted the copy (stop, finish) for the caller, else None; says one
        line either way."""
        step, source = copy.get("step"), str(copy.get("from", "?"))[:300]
        incoming = ""
        try:
            if not whole(copy):
                raise NotRestored("the manifest is not one snapshot's")
            name, total = snapshot_name(step), sum(copy["sizes"].values())
            if total > self.max_bytes:
                raise NotRestored(f"{total} bytes is over the {self.max_bytes}-byte limit")
            self.drop_own()
            incoming = os.path.join(self.folder, f"{_INCOMING}{secrets.token_hex(4)}")
            os.mkdir(incoming, 0o700)
            other = receive_files(incoming, dict(copy["files"]), dict(copy["sizes"]), receive)
            if other is not None:
                return other
            path = os.path.join(incoming, name)
            if sha256_of(path) != (copy["files"][name], copy["sizes"][name]):
                raise NotRestored(f"{name}: checksum mismatch")
            try:
                verify_file(path, expect_step=step)
            except SnapshotRefused as bad:
                raise NotRestored(str(bad)) from None
            os.replace(path, os.path.join(self.folder, name))
            say(f"copied the snapshot of step {step} from {source} ({total} bytes, SHA-256 and CRC checked)")
        except (NotRestored, OSError, binascii.Error, ValueError) as bad:
            say(f"snapshot copy of step {str(step)[:20]} from {source}: {bad}: not restored (the tasks resume from "
                "a step every machine has, else the durable checkpoint)")
        finally:
            if incoming:
                shutil.rmtree(incoming, ignore_errors=True)
        return None
