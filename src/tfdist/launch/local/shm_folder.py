"""The run's shared-memory folder for in-memory snapshots (:mod:`tfdist.runtime.snapshots`), owned by the
per-machine launcher or agent: created before the first task starts, passed to every task as
``TFDIST_SNAPSHOT_DIR``, kept across restarts (that is the point: a restarted group restores from it) and removed on
every exit path -- normal end, failure, signal, and (through the orphan watcher) the launcher's own SIGKILL.

Only a launcher that dies together with its watcher (a power cut, the OOM killer, a container killed whole) leaves
its folder -- memory, until the machine restarts. So the folder's name says whose it is,
``tfdist-<run>-snapshots-<pid>.<start>.<pid namespace>-<random>`` (:mod:`tfdist.launch.process.identity`), and
the next launcher on the machine removes the folders of this user whose launcher has ended, saying so in one line.
Never another user's, never one whose owner may run (another pid namespace, a name it cannot read), never through
a symbolic link.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from typing import Callable

from tfdist.launch.process.identity import ProcessIdentity, has_ended, start_of, this_process
from tfdist.launch.seams import Say

SHM_ROOT = "/dev/shm"
PREFIX = "tfdist-"
_OWNED = re.compile(r"tfdist-.*-snapshots-(?P<owner>[0-9.]+)-[a-z0-9_]+")  # mkdtemp's random part: [a-z0-9_]
_NAMED_IN_LINE = 3  # removed folders named in the one line; the others counted


def create_snapshot_folder(run_id: str, root: str = SHM_ROOT, say: Say | None = None) -> str | None:
    """A fresh private folder ``<root>/tfdist-<run_id>-snapshots-<owner>-...``, after removing those that runs whose
    launcher has ended left there (``say``, the launcher's, gets the one message that says so; None: nobody is
    told); None where there is no shared memory (then snapshots are off and training goes on without them)."""
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return None
    here = this_process()
    if here is not None:
        removed = remove_stale_folders(root, here)
        if removed and say is not None:
            say(removed_message(removed))
    try:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:64]
        owner = f"{here.token}-" if here is not None else ""  # without it, no later launcher ever removes it
        return tempfile.mkdtemp(prefix=f"{PREFIX}{safe}-snapshots-{owner}", dir=root)  # mode 0700
    except OSError:
        return None


def is_stale(name: str, mode: int, uid: int, *, me: int, here: ProcessIdentity,
             start: Callable[[int], int | None] = start_of) -> bool:
    """Whether the entry ``name`` of the shared-memory folder (its ``lstat`` mode and owner given) is a snapshot
    folder of this user (``me``) whose launcher has certainly ended."""
    match = _OWNED.fullmatch(name)
    owner = ProcessIdentity.parse(match["owner"]) if match else None
    return (owner is not None and stat.S_ISDIR(mode) and uid == me  # a real folder (no link) of this user's
            and has_ended(owner, here, start))


def remove_stale_folders(root: str, here: ProcessIdentity) -> list[tuple[str, int]]:
    """Remove the snapshot folders in ``root`` that :func:`is_stale` judges left behind; (path, bytes) of each."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    removed = []
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not is_stale(entry.name, info.st_mode, info.st_uid, me=os.geteuid(), here=here):
            continue
        size = _bytes_in(entry.path)
        shutil.rmtree(entry.path, ignore_errors=True)  # fd-based on Linux: a link inside is removed, not followed
        if not os.path.lexists(entry.path):  # another launcher may have removed it first, or a file resisted
            removed.append((entry.path, size))
    return removed


def removed_message(removed: list[tuple[str, int]]) -> str:
    """The one message (a launcher's line without its ``tfdist:`` prefix) that says what was removed."""
    paths = [path for path, _ in removed]
    named = ", ".join(paths[:_NAMED_IN_LINE]) + (f" and {len(paths) - _NAMED_IN_LINE} more"
                                                   if len(paths) > _NAMED_IN_LINE else "")
    mib = sum(size for _, size in removed) / (1 << 20)
    plural = "s" if len(paths) > 1 else ""
    return (f"removed {len(paths)} in-memory snapshot folder{plural} of runs whose launcher is gone "
            f"({mib:.1f} MiB of memory): {named}")


def _bytes_in(path: str) -> int:
    """Memory the folder holds (its files' allocated blocks; links are not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def remove_snapshot_folder(path: str | None) -> None:
    """Remove a folder :func:`create_snapshot_folder` made (nothing else: the name is checked)."""
    if path and os.path.basename(path.rstrip("/")).startswith(PREFIX):
        shutil.rmtree(path, ignore_errors=True)


class WatchedSnapshotFolder:
    """A snapshot folder for a process with no orphan watcher of its own (the multi-machine agent): a watcher
    process removes the folder if this process dies without removing it (SIGKILL)."""

    def __init__(self, run_id: str, say: Say | None = None) -> None:
        from tfdist.launch.process.reaper import Watcher

        self.path = create_snapshot_folder(run_id, say=say)
        self._watcher: Watcher | None = None
        if self.path is not None:
            try:
                # A run id no process carries: the watcher kills nothing, it only removes the folder.
                self._watcher = Watcher(f"snapshots-{os.path.basename(self.path)}", remove=self.path)
            except OSError:
                self._watcher = None

    def remove(self) -> None:
        remove_snapshot_folder(self.path)
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
