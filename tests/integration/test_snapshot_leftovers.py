"""A launcher killed together with its orphan watcher (SIGKILL of both: what a power cut, the OOM killer or a
container killed whole does) leaves its run's snapshot folder in /dev/shm -- memory, until the machine restarts.
The next ``tfdist launch`` on the machine removes it and says so in one line; a live run's folder stays.

Real launchers and /dev/shm: the folders here are those of this test's launchers, removed whatever happens."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tests.integration.test_launch_stops import PATIENCE, launch, records, start, wait_for, wait_gone

pytestmark = pytest.mark.slow

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def _folder(out: Path) -> str:
    """The run's snapshot folder, as its task was told."""
    return records(out)[0]["env"]["TFDIST_SNAPSHOT_DIR"]


def _watcher_of(launcher: int) -> int:
    watchers = [p.pid for p in psutil.Process(launcher).children()
                if any(word.endswith("orphan_watcher.py") for word in p.cmdline())]
    assert len(watchers) == 1, watchers
    return watchers[0]


def test_the_next_launch_removes_what_a_killed_launcher_left_and_keeps_a_live_runs(tmp_path: Path) -> None:
    running: list[subprocess.Popen[str]] = []
    try:
        other = start("-n", "1", FAKE, str(tmp_path / "b"), "--sleep", "600")  # a live run, started first
        running.append(other)
        wait_for(lambda: records(tmp_path / "b"))
        kept = _folder(tmp_path / "b")
        first = start("-n", "1", FAKE, str(tmp_path / "a"), "--sleep", "600")
        running.append(first)
        wait_for(lambda: records(tmp_path / "a"))
        left = _folder(tmp_path / "a")
        task = records(tmp_path / "a")[0]["pid"]
        os.kill(_watcher_of(first.pid), signal.SIGKILL)  # both at once: nothing of the run can clean up
        first.kill()
        first.communicate(timeout=PATIENCE)
        assert wait_gone([task]) == []  # the task died with its launcher (PR_SET_PDEATHSIG)
        assert os.path.isdir(left)  # what this is about: the folder stays

        result = launch("-n", "1", FAKE, str(tmp_path / "c"), "--sleep", "0")
        assert result.returncode == 0, result.stderr
        said = [line for line in result.stderr.splitlines() if "in-memory snapshot folder" in line]
        assert len(said) == 1 and said[0].startswith("tfdist: removed ") and left in said[0], result.stderr
        assert "of runs whose launcher is gone" in said[0]
        assert not os.path.exists(left)
        assert os.path.isdir(kept) and kept not in said[0]
    finally:
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.communicate(timeout=PATIENCE)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate(timeout=PATIENCE)
        for out in ("a", "b"):
            if records(tmp_path / out):
                shutil.rmtree(_folder(tmp_path / out), ignore_errors=True)
