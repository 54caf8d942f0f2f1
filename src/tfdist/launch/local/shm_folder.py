"""The run's shared-memory folder for in-memory snapshots (:mod:`tfdist.runtime.snapshots`), owned by the
per-machine launcher or agent: created before the first task starts, passed to every task as
``TFDIST_SNAPSHOT_DIR``, kept across restarts (that is the point: a restarted group restores from it) and removed on
every exit path -- normal end, failure, signal, and (through the orphan watcher) the launcher's own SIGKILL.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile

SHM_ROOT = "/dev/shm"
PREFIX = "tfdist-"


def create_snapshot_folder(run_id: str, root: str = SHM_ROOT) -> str | None:
    """A fresh private folder ``<root>/tfdist-<run_id>-...``; None where there is no shared memory (then snapshots
    are off and training goes on without them)."""
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return None
    try:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:64]
        return tempfile.mkdtemp(prefix=f"{PREFIX}{safe}-snapshots-", dir=root)  # mode 0700
    except OSError:
        return None


def remove_snapshot_folder(path: str | None) -> None:
    """Remove a folder :func:`create_snapshot_folder` made (nothing else: the name is checked)."""
    if path and os.path.basename(path.rstrip("/")).startswith(PREFIX):
        shutil.rmtree(path, ignore_errors=True)


class WatchedSnapshotFolder:
    """A snapshot folder for a process with no orphan watcher of its own (the multi-machine agent): a watcher
    process removes the folder if this process dies without removing it (SIGKILL)."""

    def __init__(self, run_id: str) -> None:
        from tfdist.launch.process.reaper import Watcher

        self.path = create_snapshot_folder(run_id)
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
