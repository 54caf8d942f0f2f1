"""A round's copies on this machine: taking in the job's backup and the survivors' in-memory snapshot before the
round's tasks start, and answering the rendezvous' requests to upload them.

One machine can be a round's backup source and its snapshot's receiver (it held worker 0, so it wrote the backup; a
survivor's snapshot is newer than its own), and the rendezvous asks for the snapshot only once the backup went
through. So a request that arrives while a copy comes in is answered on the way (the agent's ``_next_during_copy``):
treated as the end of the copy, it left this machine waiting for a snapshot that waited for its backup, and the
round never started here.
"""
from __future__ import annotations

from typing import Callable

from tfdist.launch.elastic.agent.backup_copy import BackupStore
from tfdist.launch.elastic.agent.snapshot_copy import SnapshotCopy
from tfdist.launch.elastic.backend import RendezvousBackend
from tfdist.launch.elastic.messages import protocol as M


def answer_upload(message: M.Message | None, link: RendezvousBackend, backups: BackupStore | None,
                  snapshot_folder: str | None) -> bool:
    """Upload what ``message`` asks for when it is an upload request this machine can serve (True)."""
    match message:
        case M.Send(what="snapshot") if snapshot_folder:
            link.upload(message, SnapshotCopy(snapshot_folder))
        case M.Send(what="backup") if backups is not None:
            link.upload(message, backups)
        case _:
            return False
    return True


def take_in(message: M.Round, backups: BackupStore | None, snapshot_folder: str | None,
            receive: Callable[[], M.Message | None], say: Callable[[str], None]) -> tuple[bool, M.Message | None]:
    """Receive the round's backup (``message.restore``), then its snapshot (``message.snapshot``), those this
    machine is to get. Returns ``(backup_ok, interruption)``: ``backup_ok`` False when the backup could not be
    restored (the round cannot start here; a snapshot that could not be is said and the tasks fall back), and the
    message (stop, finish) that ended a copy before it was done, for the caller."""
    if message.restore and backups is not None:
        restored, other = backups.await_restore(message.restore, receive, say)
        if other is not None or not restored:
            return restored, other
    if message.snapshot and snapshot_folder:
        return True, SnapshotCopy(snapshot_folder).await_restore(message.snapshot, receive, say)
    return True, None
