"""The shared-memory folder of one run on one machine (created and removed by the launcher or agent).

Layout: ``<dir>/snap-<step, 12 digits>.tfsnap``, whole snapshots only. A snapshot is written to
``.partial-<step>-<pid>`` and renamed into place once its last byte (the end magic after the CRC) is written, so a
reader sees either nothing or a whole file; the two newest are kept (double-buffered: the previous one stays whole
while the next is written). One process per machine writes: the one holding ``writer.lock`` (``flock``, released by
the kernel when the holder dies), since every data-parallel replica holds the same state.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tfdist.protocol.snapshot_file import SNAPSHOT_FILE, snapshot_name  # noqa: F401 - snapshot_name re-exported
from tfdist.runtime.snapshots.format import ArraySpec, Snapshot, SnapshotRefused, chunks, decode

KEEP = 2
_PARTIAL = ".partial-"
_IOV_MAX = 1024  # Linux's limit on buffers per writev


def write_all(fd: int, buffers: Sequence[Any]) -> None:
    """Write ``buffers`` one after another with as few system calls as the kernel allows (``writev``, at most
    :data:`_IOV_MAX` buffers a call; a short write goes on where it stopped). One call per snapshot instead of one
    per array: each call gives the GIL away and takes it back, which the training thread waits for."""
    pending = list(buffers)
    while pending:
        batch = pending[:_IOV_MAX]
        written = os.writev(fd, batch)
        if written == 0 and any(memoryview(b).nbytes for b in batch):
            raise OSError("the snapshot file took no bytes")  # would loop for ever
        done = 0
        while done < len(batch) and written >= memoryview(batch[done]).nbytes:
            written -= memoryview(batch[done]).nbytes
            done += 1
        pending = pending[done:]
        if written:
            pending[0] = memoryview(pending[0]).cast("B")[written:]


class SnapshotStore:
    """One run's snapshot folder on this machine."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._lock_fd: int | None = None

    # --- writer side -------------------------------------------------------------------------------------------
    def claim_writer(self) -> bool:
        """Become this machine's writer if no live process is; True when this process now writes."""
        if self._lock_fd is not None:
            return True
        fd = os.open(self.directory / "writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        for stale in self.directory.glob(f"{_PARTIAL}*"):  # left by a writer that was killed mid-write
            stale.unlink(missing_ok=True)
        return True

    def release_writer(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def write(self, step: int, arrays: Sequence[np.ndarray], specs: Sequence[ArraySpec],
              meta: Mapping[str, Any], model_count: int | None = None) -> Path:
        """Write one snapshot whole, then drop all but the :data:`KEEP` newest (``model_count``: see
        :func:`~tfdist.runtime.snapshots.format.encode_header`)."""
        partial = self.directory / f"{_PARTIAL}{step}-{os.getpid()}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                write_all(fd, list(chunks(step, arrays, specs, meta, model_count)))
            finally:
                os.close(fd)
            final = self.directory / snapshot_name(step)
            os.replace(partial, final)  # the commit: readers see the whole file or none
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        self.prune(keep=KEEP)
        return final

    def prune(self, *, keep: int = KEEP, above: int | None = None) -> None:
        """Keep the ``keep`` newest snapshots; with ``above``, first drop every snapshot newer than that step (a
        future the job abandoned when it restored an older step)."""
        steps = self.steps()
        doomed = [s for s in steps if above is not None and s > above]
        kept = [s for s in steps if s not in doomed]
        doomed += kept[keep:]
        for step in doomed:
            (self.directory / snapshot_name(step)).unlink(missing_ok=True)

    # --- reader side -------------------------------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Steps with a committed file, newest first (not yet verified)."""
        try:
            names: Iterable[str] = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = (SNAPSHOT_FILE.fullmatch(name) for name in names)
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def load(self, step: int, expect_fingerprint: str | None = None) -> Snapshot:
        """The snapshot of ``step``, verified whole.

        Raises:
            SnapshotRefused: missing, torn, corrupted, mixed-step or another model's.
        """
        try:
            data = (self.directory / snapshot_name(step)).read_bytes()
        except FileNotFoundError:
            raise SnapshotRefused(f"no snapshot of step {step}") from None
        return decode(data, expect_step=step, expect_fingerprint=expect_fingerprint)

    def loadable(self, expect_fingerprint: str | None, *, limit: int = 8) -> list[int]:
        """Steps whose snapshot verifies whole for this model, newest first (at most ``limit``)."""
        good = []
        for step in self.steps():
            try:
                self.load(step, expect_fingerprint)
            except SnapshotRefused:
                continue
            good.append(step)
            if len(good) >= limit:
                break
        return good

    def free_bytes(self) -> int:
        stats = os.statvfs(self.directory)
        return stats.f_bavail * stats.f_frsize
