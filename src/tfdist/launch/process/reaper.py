"""Making sure no process a task started outlives the launcher, on every exit path.

- Each task runs in its own process group; stopping a task signals the whole group.
- The launcher makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``): a task's grandchild whose parent died,
  even one that left the group with ``setsid``, is re-parented to the launcher instead of init, so
  :func:`kill_strays` finds it among the launcher's descendants and kills it.
- ``kill -9`` of the launcher runs none of its code. The tasks die by ``PR_SET_PDEATHSIG`` (see ``spawn``), but that
  covers only the direct child: a grandchild would be re-parented to init and live on. A tiny watcher process
  (``tfdist/launch/process/orphan_watcher.py``, standard library only) holds a pipe from the launcher; when the pipe closes without
  the launcher's "done", it kills every task's process group and every process carrying this run's id.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterable

import psutil

from tfdist.launch.process import libc

PR_SET_CHILD_SUBREAPER = 36
_WATCHER = os.path.join(os.path.dirname(__file__), "orphan_watcher.py")


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux >= 3.4); False where the kernel refuses."""
    return libc.prctl is not None and libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def kill_strays(spare: Iterable[int]) -> list[int]:
    """SIGKILL every descendant of this process except those in ``spare`` (and theirs); reap the ones that are our
    own children. Returns the pids killed."""
    keep = set(spare)
    me = psutil.Process()
    try:
        children = me.children(recursive=False)
    except psutil.Error:
        return []
    victims: list[psutil.Process] = []
    for child in children:
        if child.pid in keep:
            continue
        victims.append(child)
        try:
            victims.extend(child.children(recursive=True))
        except psutil.Error:
            pass
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    direct = {c.pid for c in children}
    for proc in victims:
        if proc.pid in direct:
            try:
                proc.wait(timeout=2)  # psutil reaps our own children
            except psutil.Error:
                pass
    return [p.pid for p in victims]


def reap_orphans(own: Iterable[int]) -> None:
    """Collect exited adopted orphans (zombies) that no Popen object of ours will wait for."""
    known = set(own)
    try:
        children = psutil.Process().children(recursive=False)
    except psutil.Error:
        return
    for child in children:
        if child.pid in known:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


class Watcher:
    """The process that cleans up after a launcher killed with SIGKILL (see the module docstring)."""

    def __init__(self, run_id: str, remove: str | None = None) -> None:
        """``remove``: a folder of the run (its shared-memory snapshots) to delete if the launcher dies."""
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", _WATCHER, run_id, *([remove] if remove else [])], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def watch(self, pgids: Iterable[int]) -> None:
        self._send("".join(f"group {pgid}\n" for pgid in pgids))

    def delete_table(self, table: str) -> None:
        """Delete this nftables table (``--firewall``, launch/firewall/) if the launcher dies."""
        self._send(f"nft-table {table}\n")

    def close(self) -> None:
        """The launcher is done and cleaned up itself: the watcher exits without killing anything."""
        self._send("done\n")
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, text: str) -> None:
        if not text or self.proc.stdin is None or self.proc.stdin.closed:
            return
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.flush()
        except OSError:
            pass
